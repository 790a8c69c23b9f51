"""A transfer plan: everything about a batch of context texts that does not depend on the sender's cache.

Tokenizing both sides, aligning tokens, the RoPE tables at both sides' positions and the receiver's own
KV for its native prefix (the attention sink) depend only on the texts. Building them once per context
lets every later transfer of that context (another sender cache, another method, a retry) pay only for
the mapping itself, and lets the plan be built while the sender is still prefilling. What does not depend on the
text at all (RoPE tables by position, the receiver's K/V of its native prefix ids) is computed once per pair and
kept in a :class:`PlanCache` on the pipeline, so a plan costs little more than tokenizing and aligning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from heterofold_hub.transfer.alignment import TokenAlignment, align_batch
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.kvcache import LayerKV
from heterofold_hub.base_models.loading import Side, encode
from heterofold_hub.transfer.reference import native_prefix_ids, prefix_kv
from heterofold_hub.transfer.sender import as_texts

MAX_PREFIXES = 256  # native prefixes a PlanCache keeps (a receiver without BOS has one per first token of a text)


@dataclass
class TransferPlan:
    """One batch of contexts, ready to map any sender cache of them.

    - ``alignment``: which sender cache column each receiver token draws from (``[B, Tr]``).
    - ``sender_tokens``: the sequence length the sender cache of these texts must have.
    - ``unrotate``: per sender layer, the :class:`Turn` that undoes the sender's RoPE at the sender position each
      receiver token draws from (None without RoPE); layers of one type (Gemma 3: local, global) share one.
    - ``rotate``: per receiver layer, the receiver's RoPE at its own positions.
    - ``native``: per receiver layer, the receiver's own keys/values ``[B, Hr, P, Dr]`` of the native prefix.
    - ``input_ids`` / ``attention_mask`` ``[B, Tr + 1]``: receiver tokens, left-padded; the cache covers all but
      the last column, which is the first token ``generate`` feeds.
    - ``sender_rows`` ``[B * Tr, Hs]``: for each receiver row (batch, then position) and sender KV head, the row
      of a sender layer flattened to ``[B * Hs * Ts, Ds]`` it draws from.
    - ``native_rows`` / ``padding_rows``: the receiver rows (of ``B * Tr``) the receiver computes itself, and
      the left padding.
    - ``texts``: the contexts this plan is of.
    """

    alignment: TokenAlignment
    sender_tokens: int
    unrotate: list[Turn | None]
    rotate: list[Turn | None]
    native: list[LayerKV]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    sender_rows: torch.Tensor
    native_rows: torch.Tensor
    padding_rows: torch.Tensor
    texts: list[str] = field(default_factory=list)  # the contexts planned, so a transfer can check its sender cache
    _converted: dict = field(default_factory=dict, repr=False, compare=False)  # (kind, dtype) -> turns

    def turns(self, kind: str, dtype: torch.dtype) -> list[Turn | None]:
        """``unrotate`` or ``rotate`` with tables in ``dtype`` (that of the rows they turn: mixed dtypes would make
        every turn convert and allocate fp32 temporaries), converted once per plan and dtype, so transfers slice
        views of them."""
        if (kind, dtype) not in self._converted:
            self._converted[kind, dtype] = once_each(lambda t: Turn(t.cos.to(dtype), t.sin.to(dtype), t.rotary_dim),
                                                     getattr(self, kind))
        return self._converted[kind, dtype]

    @property
    def batch_size(self) -> int:
        return self.alignment.sender_index.shape[0]

    @property
    def cache_tokens(self) -> int:
        """Sequence length of the receiver cache this plan produces."""
        return self.alignment.sender_index.shape[1]


@dataclass
class Turn:
    """RoPE (or its inverse) at a batch of positions, on whole heads: ``x * cos + swap(x) * sin``.

    ``swap`` exchanges the two halves of the first ``rotary_dim`` dims; the sign of transformers'
    ``rotate_half`` (``[-x2, x1]``) is folded into ``sin``. ``cos``, ``sin`` ``[B, T, D]``, or ``[n, 1, D]`` per
    row once :meth:`at` a chunk: past ``rotary_dim`` (partial rotary) cos is 1 and sin 0, so those dims pass
    through.
    """

    cos: torch.Tensor
    sin: torch.Tensor
    rotary_dim: int

    @classmethod
    def from_tables(cls, tables, head_dim: int, *, inverse: bool) -> "Turn | None":
        """From a rotary module's ``cos, sin [B, T, rd]``. ``inverse`` divides by ``cos^2 + sin^2`` and negates
        sin: the inverse rotation, which also undoes rope attention scaling."""
        if tables is None:
            return None
        cos, sin = (t.float() for t in tables)
        if inverse:
            norm = cos * cos + sin * sin
            cos, sin = cos / norm, -sin / norm
        rotary_dim, half = cos.shape[-1], cos.shape[-1] // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), -1)  # rotate_half's sign
        pad = head_dim - rotary_dim
        return cls(torch.nn.functional.pad(cos, (0, pad), value=1.0), torch.nn.functional.pad(sin, (0, pad)), rotary_dim)

    def gather(self, positions: torch.Tensor) -> "Turn":
        """The tables of one row of positions ``0..N-1`` (``[1, N, D]``, a :class:`RopeTable`'s) at ``positions``
        ``[B, T]``: ``[B, T, D]``, the numbers the rotary module gives at those positions (each position's cos/sin
        is computed elementwise, whatever the other positions)."""
        # index_select: the same rows as t[0][positions], faster on the CPU
        pick = lambda t: torch.index_select(t[0], 0, positions.flatten()).view(*positions.shape, -1)  # noqa: E731
        return Turn(pick(self.cos), pick(self.sin), self.rotary_dim)

    def at(self, rows: slice) -> "Turn":
        """The tables of ``rows`` of the flattened ``[B * T]`` positions, ``[n, 1, D]`` to broadcast over the
        heads of ``[n, H, D]`` (views): slice once per chunk, apply to every layer."""
        pick = lambda t: t.flatten(0, 1)[rows, None]  # noqa: E731
        return Turn(pick(self.cos), pick(self.sin), self.rotary_dim)

    def apply(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``out = turn(x)`` for ``x``, ``out`` ``[n, H, D]`` (``out`` None: in place), tables already :meth:`at`
        their rows; returns ``out``."""
        out = x if out is None else out
        rd = self.rotary_dim
        if rd == x.shape[-1]:  # one contiguous swapped copy beats multiply-adds on half views of small heads
            swapped = torch.roll(x, rd // 2, -1)
            return torch.mul(x, self.cos, out=out).addcmul_(swapped, self.sin)
        half, rotary = rd // 2, x[..., :rd].clone()  # partial rotary: past rd, cos 1 and sin 0 copy x through
        torch.mul(x, self.cos, out=out)
        out[..., :half].addcmul_(rotary[..., half:], self.sin[..., :half])
        out[..., half:rd].addcmul_(rotary[..., :half], self.sin[..., half:rd])
        return out


@torch.no_grad()
def build_plan(
    sender: Side,
    receiver: Side,
    texts: str | list[str],
    *,
    min_native: int = 1,
    sender_position_ids: torch.Tensor | None = None,
    cache: "PlanCache | None" = None,
    mapped_start: int | None = None,
    sender_tokens: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> TransferPlan:
    """Tokenize ``texts`` for both models, align them and precompute what every transfer of them needs.

    ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not the cache columns. ``cache``: the
    pair's :class:`PlanCache` (a pipeline's ``plan_cache``) to reuse; None computes everything afresh.
    ``mapped_start``: the receiver position of the first mapped token (a segment that follows others in a composed
    cache, whose native prefix rows are then dropped); None: right after the native prefix.
    ``sender_tokens``: per text, the sender's token ids ``[T]`` and character offsets ``[T, 2]`` its cache was
    computed from (:meth:`SenderPrefill.tokens`), so the sender side is not tokenized again; None tokenizes.
    Needs the receiver model loaded (for its native prefix); the sender model is not used.
    """
    if receiver.model is None:
        raise HeteroFoldError("The receiver model must be loaded to plan a transfer into its cache.")
    cache = cache or PlanCache(sender, receiver)
    texts = as_texts(texts)
    sender_enc = [encode(sender.tokenizer, t) for t in texts] if sender_tokens is None else \
        _checked_tokens(sender_tokens, texts, sender.name)
    receiver_enc = [encode(receiver.tokenizer, t) for t in texts]
    for side, encoded in ((receiver, receiver_enc), (sender, sender_enc)):
        longest, limit = max(len(ids) for ids, _ in encoded), side.spec.max_positions
        if longest > limit:
            raise HeteroFoldError(f"A context is {longest} tokens long for {side.name!r}, which allows {limit} "
                                  "positions. Shorten the context.")
    alignment = align_batch(
        [off for _, off in sender_enc],
        [off[:-1] for _, off in receiver_enc],
        [ids[:-1] for ids, _ in receiver_enc],
        [len(t) for t in texts],
        min_native=min_native,
    )
    device = receiver.model.device
    shift = 0 if mapped_start is None else mapped_start - alignment.native_prefix
    index = alignment.sender_index
    if sender_position_ids is not None:
        index = sender_position_ids.to(index.device).gather(1, index)
    last = torch.stack([ids[-1] for ids, _ in receiver_enc])[:, None]
    sender_tokens, heads = max(len(ids) for ids, _ in sender_enc), sender.spec.kv_heads
    first_rows = (torch.arange(len(texts)).view(-1, 1, 1) * heads + torch.arange(heads).view(1, 1, -1)) * sender_tokens
    return TransferPlan(
        alignment=alignment,
        sender_tokens=sender_tokens,
        unrotate=cache.unrotate.at(index.to(device)),
        rotate=cache.rotate.at(alignment.receiver_positions.to(device) + shift),
        native=cache.native(alignment),
        input_ids=torch.cat([alignment.receiver_ids, last], 1),
        attention_mask=torch.cat([alignment.attention_mask, torch.ones_like(last)], 1),
        sender_rows=(first_rows + alignment.sender_index[:, :, None]).flatten(0, 1).to(device),
        native_rows=alignment.native_mask.flatten().nonzero().squeeze(1).to(device),
        padding_rows=(~alignment.attention_mask.bool()).flatten().nonzero().squeeze(1).to(device),
        texts=texts,
    )


def _checked_tokens(tokens: list[tuple[torch.Tensor, torch.Tensor]], texts: list[str], name: str):
    """``tokens`` (per text, ids ``[T]`` and offsets ``[T, 2]``) when they can be tokens of ``texts``: one pair per
    text, an offset pair per id, spans inside the text. Alignment trusts offsets, so bad ones are refused here."""
    if len(tokens) != len(texts):
        raise HeteroFoldError(f"sender_tokens holds {len(tokens)} rows for {len(texts)} texts; pass one (ids, offsets) "
                              "pair per text, as SenderPrefill.tokens() returns them.")
    for row, ((ids, offsets), text) in enumerate(zip(tokens, texts)):
        if len(ids) == 0 or offsets.shape != (len(ids), 2) or bool((offsets[:, 0] > offsets[:, 1]).any()) or \
                int(offsets.min()) < 0 or int(offsets.max()) > len(text):
            raise HeteroFoldError(f"The sender tokens of text {row} are not {name!r}'s tokens of it: their offsets "
                                  f"(shape {tuple(offsets.shape)} for {len(ids)} ids) do not lie within its "
                                  f"{len(text)} characters. Pass the prefill of these texts, or plan without "
                                  "sender_tokens to tokenize them afresh.")
    return tokens


def _turns(side: Side, positions: torch.Tensor, *, inverse: bool) -> list[Turn | None]:
    """Per layer of ``side``, its RoPE (or the inverse) at ``positions`` ``[B, T]`` from its rotary module: one
    :class:`Turn` per layer type, shared by the layers of that type."""
    tables = side.rope.tables_per_layer(positions, torch.float32)
    return once_each(lambda t: Turn.from_tables(t, side.spec.head_dim, inverse=inverse), tables)


def once_each(fn, items: list) -> list:
    """``[fn(x) for x in items]``, calling ``fn`` once per distinct object (layers of one type share a table or a
    turn, and keep sharing the result); None stays None."""
    done: dict[int, object] = {}
    for x in items:
        if id(x) not in done:
            done[id(x)] = None if x is None else fn(x)
    return [done[id(x)] for x in items]


class RopeTable:
    """One side's RoPE (or its inverse) per layer as :class:`Turn` tables for positions ``0..N-1`` (``[1, N, D]``),
    computed once and regrown (at least doubled) when a plan reaches a later position, so a plan gathers its rows
    instead of calling the rotary module. A RoPE whose tables depend on the longest position asked for (dynamic
    NTK, longrope; :attr:`Rope.tables_fixed`) is asked afresh each time instead."""

    def __init__(self, side: Side, *, inverse: bool):
        self.side, self.inverse = side, inverse
        self.turns: list[Turn | None] = []  # per layer, one object per layer type
        self.length, self.device = 0, None

    def at(self, positions: torch.Tensor) -> list[Turn | None]:
        """Per layer, the turn at ``positions`` ``[B, T]`` (tables ``[B, T, D]``, on ``positions``' device)."""
        if not self.side.rope.tables_fixed:
            return _turns(self.side, positions, inverse=self.inverse)
        needed = int(positions.max()) + 1 if positions.numel() else 1
        if needed > self.length or positions.device != self.device:
            self.length, self.device = max(needed, 2 * self.length), positions.device
            self.turns = _turns(self.side, torch.arange(self.length, device=self.device)[None], inverse=self.inverse)
        return once_each(lambda turn: turn.gather(positions), self.turns)


class PlanCache:
    """What every plan of one pair shares, whatever the text: both sides' :class:`RopeTable` (the sender's inverse
    RoPE, the receiver's RoPE) and the receiver's own K/V of each distinct native prefix (e.g. ``[BOS]``), one
    forward per prefix ever. Plans hold views of these tensors: read them, never write into them."""

    def __init__(self, sender: Side, receiver: Side):
        self.receiver = receiver
        self.unrotate = RopeTable(sender, inverse=True)
        self.rotate = RopeTable(receiver, inverse=False)
        self.prefixes: dict[tuple, list[LayerKV]] = {}  # (device, dtype, ids) -> per layer [1, Hr, P, Dr]

    def native(self, alignment: TokenAlignment) -> list[LayerKV]:
        """Per receiver layer, keys/values ``[B, Hr, P, Dr]`` of each row's native prefix (broadcast views when every
        row has the same prefix ids, the usual case)."""
        per_row = [self._prefix(row) for row in native_prefix_ids(alignment)]  # ids [B, P]: cached per distinct row
        if all(kv is per_row[0] for kv in per_row):
            return [(k.expand(len(per_row), -1, -1, -1), v.expand(len(per_row), -1, -1, -1)) for k, v in per_row[0]]
        return [(torch.cat([kv[r][0] for kv in per_row]), torch.cat([kv[r][1] for kv in per_row]))
                for r in range(len(per_row[0]))]

    def _prefix(self, ids: torch.Tensor) -> list[LayerKV]:
        """Per layer ``[1, Hr, P, Dr]``: the receiver's K/V of prefix ``ids`` ``[P]``, computed on first use."""
        model = self.receiver.model
        key = (str(model.device), model.dtype, tuple(ids.tolist()))
        if key not in self.prefixes:
            if len(self.prefixes) >= MAX_PREFIXES:
                del self.prefixes[next(iter(self.prefixes))]  # the oldest
            self.prefixes[key] = prefix_kv(model, ids[None])
        return self.prefixes[key]
