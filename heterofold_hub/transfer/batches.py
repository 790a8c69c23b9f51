"""Batches: windows made ready for the receiver by running the frozen sender over their contexts (prefill, token
alignment, feature gathering). The text side, cutting windows, is ``heterofold_hub.data.windows``; this is the
part that runs a model, so it lives with the transfer path it feeds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.windows import Window
from heterofold_hub.transfer.alignment import TokenAlignment, align_batch
from heterofold_hub.transfer.reference import Features, sender_features
from heterofold_hub.transfer.sender import prefill_sender

COPY_NGRAM = 4  # a target is a copy when it and the 3 tokens before it occur together in the context


@dataclass
class Batch:
    """Windows made ready for the receiver; sender features already gathered and un-rotated.

    - ``alignment`` covers the receiver's prefix + ``context[:-1]`` (the part a transfer provides);
    - ``query`` ``[B, M]``: ``context[-1] + continuation[:-1]``; ``targets`` ``[B, M]``: continuation;
    - ``native_ids`` ``[B, P + Tc + M - 1]``: what a native prefill + continuation reads.
    """

    alignment: TokenAlignment
    features: Features
    query: torch.Tensor
    targets: torch.Tensor
    native_ids: torch.Tensor
    prefix: torch.Tensor
    surprisal: torch.Tensor | None = None  # [B, Ts] the sender's, when asked for (recompute's "content" select)

    def __len__(self) -> int:
        return len(self.query)

    def copied_targets(self, ngram: int = COPY_NGRAM) -> torch.Tensor:
        """``[B, M]`` bool: targets the context could be copied from, i.e. the ``ngram`` tokens ending at the
        target (itself and the ``ngram - 1`` before it, which may reach back into the context) also occur
        consecutively in the context. Where such a target is predicted, the receiver reads the transferred cache."""
        prefix, steps = len(self.prefix), self.query.shape[1]
        copied = torch.zeros(self.targets.shape, dtype=torch.bool)
        for row, (ids, targets) in enumerate(zip(self.native_ids.tolist(), self.targets.tolist())):
            tokens = ids + targets[-1:]  # prefix + context + continuation
            context = tokens[prefix : len(tokens) - steps]
            seen = {tuple(context[i : i + ngram]) for i in range(len(context) - ngram + 1)}
            for t in range(steps):
                end = len(tokens) - steps + t + 1
                copied[row, t] = tuple(tokens[end - ngram : end]) in seen
        return copied


def prepare_batch(windows: list[Window], sender: Side, receiver: Side, *, layers: set[int] | None = None,
                  min_native: int = 1, dtype: torch.dtype = torch.float32, surprisal: bool = False) -> Batch:
    """Sender prefill, token alignment and feature gathering for ``windows`` (no gradients); features are
    stored in ``dtype`` (a layer that would overflow it stays fp32); ``surprisal`` keeps the sender's."""
    prefill = prefill_sender(sender, [w.context for w in windows], surprisal=surprisal)
    sender_kv, sender_offsets = prefill.layers, prefill.offsets
    prefix = receiver.prefix_ids()
    empty = torch.zeros(len(prefix), 2, dtype=torch.long)
    alignment = align_batch(
        sender_offsets,
        [torch.cat([empty, w.receiver_offsets[:-1]]) for w in windows],
        [torch.cat([prefix, w.receiver_context[:-1]]) for w in windows],
        [len(w.context) for w in windows],
        min_native=min_native,
    )
    with torch.no_grad():
        features = [None if kv is None else tuple(_stored(x, dtype) for x in kv)
                    for kv in sender_features(sender_kv, alignment, sender.rope, layers)]
    query = torch.stack([torch.cat([w.receiver_context[-1:], w.continuation[:-1]]) for w in windows])
    targets = torch.stack([w.continuation for w in windows])
    native_ids = torch.stack([torch.cat([prefix, w.receiver_context, w.continuation[:-1]]) for w in windows])
    return Batch(alignment, features, query, targets, native_ids, prefix, prefill.surprisal)


def _stored(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    narrow = x.to(dtype)
    return narrow if narrow is x or torch.isfinite(narrow).all() else x
