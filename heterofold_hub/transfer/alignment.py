"""Token and layer alignment between two models.

Token alignment works on character offsets: every receiver token draws from the sender token that
covers the receiver token's *last* character. That one rule covers many-to-one (several receiver
tokens inside one sender token) and one-to-many (a receiver token spanning several sender tokens
takes the last one, which has already attended to the others). Receiver tokens with no characters
(BOS, chat-template tokens) at the start are not mapped at all: their KV does not depend on the
context, so the receiver computes it natively (the attention sink matters a lot).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heterofold_hub.errors import AlignmentError, HeteroFoldError
from heterofold_hub.transfer.padding import padded, positions


def char_owner(sender_offsets: torch.Tensor, n_chars: int) -> torch.Tensor:
    """For each character, the index of the last sender token that starts at or before it and covers a character:
    the last token covering it, or the nearest before it (characters no token covers, e.g. dropped spaces, look
    back; byte-level BPE spans can overlap, and the later token wins).

    ``sender_offsets``: ``[Ts, 2]`` (start, end) character spans; returns ``[n_chars]`` long, -1 where
    no sender token starts at or before the character.
    """
    start, end = sender_offsets[:, 0].long(), sender_offsets[:, 1].long().clamp(max=n_chars)
    covers = end > start
    owner = torch.full((n_chars,), -1, dtype=torch.long)
    owner.scatter_reduce_(0, start[covers], torch.arange(len(start))[covers], reduce="amax")
    return torch.cummax(owner, 0).values


def _rows(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """For parts laid end to end: the part each element belongs to ``[sum T]`` and each part's first element ``[B]``."""
    lengths = torch.tensor([len(p) for p in parts], dtype=torch.long)
    return torch.repeat_interleave(torch.arange(len(parts)), lengths), lengths.cumsum(0) - lengths


def align_rows(sender_offsets: list[torch.Tensor], receiver_offsets: list[torch.Tensor],
               n_chars: list[int]) -> torch.Tensor:
    """Sender token index (within its text) for every receiver token of a batch of texts, in one pass over the
    texts laid end to end (no loop over texts or tokens).

    Per text: ``sender_offsets`` ``[Ts, 2]``, ``receiver_offsets`` ``[Tr, 2]``, its length in characters; returns
    ``[sum Tr]`` long, the texts' receiver tokens one after another. Raises :class:`AlignmentError` when a text's
    sender tokens cover no character.
    """
    chars = torch.tensor(n_chars, dtype=torch.long)
    s_row, s_first = _rows(sender_offsets)
    r_row, _ = _rows(receiver_offsets)
    sender, receiver = torch.cat(sender_offsets).long(), torch.cat(receiver_offsets).long()
    content = sender[:, 1] > sender[:, 0]
    first_content = torch.full_like(chars, -1).scatter_reduce_(0, s_row[content], torch.arange(len(sender))[content],
                                                               reduce="amin", include_self=False)
    if bool(((chars == 0) | (first_content < 0)).any()):
        raise AlignmentError(
            "The sender's tokenization of this context covers no characters (empty text, or only "
            "special tokens), so there is nothing to transfer. Pass a non-empty context text."
        )
    # Spans clamped to their own text and shifted to its place: owners are global token ids, and a text's chars
    # before its first token see the previous text's tokens, ids below the text's first (handled as -1 was).
    base = chars.cumsum(0) - chars
    owner = char_owner(torch.minimum(sender, chars[s_row, None]) + base[s_row, None], int(chars.sum()))
    last_char = torch.minimum((receiver[:, 1] - 1).clamp(min=0), chars[r_row] - 1) + base[r_row]
    index = owner[last_char] - s_first[r_row]
    return torch.where(index < 0, (first_content - s_first)[r_row], index)


def align_sequence(sender_offsets: torch.Tensor, receiver_offsets: torch.Tensor, n_chars: int) -> torch.Tensor:
    """Sender token index for every receiver token of one text (:func:`align_rows` of one text).

    ``sender_offsets``: ``[Ts, 2]``, ``receiver_offsets``: ``[Tr, 2]``; returns ``[Tr]`` long.
    Raises :class:`AlignmentError` when the sender has no token that covers any character.
    """
    return align_rows([sender_offsets], [receiver_offsets], [n_chars])


@dataclass
class TokenAlignment:
    """A batch of aligned contexts.

    - ``sender_index`` ``[B, Tr]``: column of the padded sender cache each receiver token draws from.
    - ``receiver_ids`` ``[B, Tr]``: receiver token ids, left-padded so all rows end together.
    - ``attention_mask`` ``[B, Tr]``: 1 for real receiver tokens.
    - ``native_prefix``: the first ``native_prefix`` real tokens of each row are computed natively.
    """

    sender_index: torch.Tensor
    receiver_ids: torch.Tensor
    attention_mask: torch.Tensor
    native_prefix: int

    @property
    def receiver_positions(self) -> torch.Tensor:
        """``[B, Tr]`` receiver positions as ``generate`` computes them from a left-padded mask."""
        return positions(self.attention_mask)

    @property
    def native_mask(self) -> torch.Tensor:
        """``[B, Tr]`` bool: positions whose KV the receiver computes itself."""
        return self.attention_mask.bool() & (self.receiver_positions < self.native_prefix)

    @property
    def mapped_mask(self) -> torch.Tensor:
        """``[B, Tr]`` bool: positions whose KV comes from the sender."""
        return self.attention_mask.bool() & ~self.native_mask


def leading_empty(offsets: torch.Tensor) -> int:
    """Number of leading tokens with no characters (BOS and other prefix special tokens)."""
    empty = offsets[:, 1] <= offsets[:, 0]
    return int(torch.cumprod(empty.long(), 0).sum())


def align_batch(
    sender_offsets: list[torch.Tensor],
    receiver_offsets: list[torch.Tensor],
    receiver_ids: list[torch.Tensor],
    n_chars: list[int],
    *,
    min_native: int = 1,
) -> TokenAlignment:
    """Align a batch of texts. Sender caches are expected right-padded (real tokens at columns 0..Ts-1).

    Each list holds one entry per text: offsets ``[T, 2]``, receiver ids ``[Tr]``, the text length.
    """
    natives = {leading_empty(off) for off in receiver_offsets}
    native = max(max(natives), min_native)
    lengths = [len(ids) for ids in receiver_ids]
    if min(lengths) <= native:
        raise AlignmentError(
            f"A context has {min(lengths)} receiver token(s) but the receiver computes its first "
            f"{native} natively, so nothing would be transferred. Pass a longer context."
        )
    # left-padded: each row's real tokens fill its last columns, so a row-major mask takes them in text order
    ids, mask = padded(receiver_ids, 0, side="left")
    index = torch.zeros_like(ids).masked_scatter_(mask.bool(), align_rows(sender_offsets, receiver_offsets, n_chars))
    return TokenAlignment(sender_index=index, receiver_ids=ids, attention_mask=mask, native_prefix=native)


SENDER_LAYERS = ("all", "full")


def source_candidates(spec, which: str = "all") -> list[int]:
    """The sender layers a map may draw from: ``"all"``, or ``"full"``: only layers whose cache keeps every
    position (Gemma 3's global layers), so the map also works from a default cache whose sliding-window layers
    kept only their window."""
    if which not in SENDER_LAYERS:
        raise HeteroFoldError(f"sender_layers={which!r}; choose one of {', '.join(SENDER_LAYERS)}.")
    return list(range(spec.num_layers)) if which == "all" else spec.full_layers


def layers_by_depth(sender_layers: int, receiver_layers: int, k: int = 2,
                    candidates: list[int] | None = None) -> list[list[int]]:
    """For each receiver layer, the ``k`` sender layers (of ``candidates``, default all) nearest its relative
    depth (sorted, distinct)."""
    candidates = list(range(sender_layers)) if candidates is None else candidates
    plan = []
    for layer in range(receiver_layers):
        depth = layer * (sender_layers - 1) / max(receiver_layers - 1, 1)
        order = sorted(candidates, key=lambda s: (abs(s - depth), s))
        plan.append(sorted(order[: min(k, len(candidates))]))
    return plan
