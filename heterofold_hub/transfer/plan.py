"""A transfer plan: everything about a batch of context texts that does not depend on the sender's cache.

Tokenizing both sides, aligning tokens, the RoPE tables at both sides' positions and the receiver's own
KV for its native prefix (the attention sink) depend only on the texts. Building them once per context
lets every later transfer of that context (another sender cache, another method, a retry) pay only for
the mapping itself, and lets the plan be built while the sender is still prefilling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from heterofold_hub.transfer.alignment import TokenAlignment, align_batch
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.kvcache import LayerKV
from heterofold_hub.base_models.loading import Side, encode
from heterofold_hub.transfer.reference import native_prefix_kv



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
    _converted: dict = field(default_factory=dict, repr=False, compare=False)  # (kind, dtype) -> turns

    def turns(self, kind: str, dtype: torch.dtype) -> list[Turn | None]:
        """``unrotate`` or ``rotate`` with tables in ``dtype`` (that of the rows they turn: mixed dtypes would make
        every turn convert and allocate fp32 temporaries), converted once per plan and dtype, so transfers slice
        views of them."""
        cached = self._converted
        if (kind, dtype) not in cached:
            converted: dict[int, Turn | None] = {}
            for turn in getattr(self, kind):  # layers of one type share a turn; so do their conversions
                if id(turn) not in converted:
                    converted[id(turn)] = None if turn is None else Turn(turn.cos.to(dtype), turn.sin.to(dtype),
                                                                           turn.rotary_dim)
            cached[kind, dtype] = [converted[id(turn)] for turn in getattr(self, kind)]
        return cached[kind, dtype]

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
) -> TransferPlan:
    """Tokenize ``texts`` for both models, align them and precompute what every transfer of them needs.

    ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not the cache columns.
    Needs the receiver model loaded (for its native prefix); the sender model is not used.
    """
    if receiver.model is None:
        raise HeteroFoldError("The receiver model must be loaded to plan a transfer into its cache.")
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise HeteroFoldError("No context texts given; pass the text (or list of texts) the sender prefilled.")
    sender_enc = [encode(sender.tokenizer, t) for t in texts]
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
    index = alignment.sender_index
    if sender_position_ids is not None:
        index = sender_position_ids.to(index.device).gather(1, index)
    last = torch.stack([ids[-1] for ids, _ in receiver_enc])[:, None]
    sender_tokens, heads = max(len(ids) for ids, _ in sender_enc), sender.spec.kv_heads
    first_rows = (torch.arange(len(texts)).view(-1, 1, 1) * heads + torch.arange(heads).view(1, 1, -1)) * sender_tokens
    return TransferPlan(
        alignment=alignment,
        sender_tokens=sender_tokens,
        unrotate=_turns(sender, index.to(device), inverse=True),
        rotate=_turns(receiver, alignment.receiver_positions.to(device), inverse=False),
        native=native_prefix_kv(receiver.model, alignment),
        input_ids=torch.cat([alignment.receiver_ids, last], 1),
        attention_mask=torch.cat([alignment.attention_mask, torch.ones_like(last)], 1),
        sender_rows=(first_rows + alignment.sender_index[:, :, None]).flatten(0, 1).to(device),
        native_rows=alignment.native_mask.flatten().nonzero().squeeze(1).to(device),
        padding_rows=(~alignment.attention_mask.bool()).flatten().nonzero().squeeze(1).to(device),
    )


def _turns(side: Side, positions: torch.Tensor, *, inverse: bool) -> list[Turn | None]:
    """Per layer of ``side``, its RoPE (or the inverse) at ``positions`` ``[B, T]``: one :class:`Turn` per layer type,
    shared by the layers of that type."""
    tables = side.rope.tables_per_layer(positions, torch.float32)
    made: dict[int, Turn | None] = {}
    return [made.setdefault(id(t), Turn.from_tables(t, side.spec.head_dim, inverse=inverse)) for t in tables]
