"""Calibration features: both frozen models run over calibration text, aligned token by token."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heterofold_hub.progress import progress_bar
from heterofold_hub.base_models.arch import KVSpec
from heterofold_hub.transfer.kvcache import cache_layers, full_cache
from heterofold_hub.base_models.loading import Side, cache_only
from heterofold_hub.transfer.reference import receiver_targets
from heterofold_hub.transfer.batches import Batch, prepare_batch
from heterofold_hub.data.windows import Window


@dataclass
class CalibrationSet:
    """Aligned features of mapped positions only (native-prefix and padding positions dropped).

    ``sender[i]``: keys, values ``[N, Hs*Ds]`` of sender layer ``i`` (keys un-rotated);
    ``receiver[r]``: keys, values ``[N, Hr*Dr]`` of receiver layer ``r`` (keys un-rotated).
    """

    sender_name: str
    receiver_name: str
    sender_spec: KVSpec
    receiver_spec: KVSpec
    sender: list[tuple[torch.Tensor, torch.Tensor]]
    receiver: list[tuple[torch.Tensor, torch.Tensor]]
    disposable: bool = False  # set by a holder that will not read the set again: a fit may then free() it

    def free(self) -> None:
        """Drop the features (gigabytes on the real pair) if :attr:`disposable`: a fit that needs them only
        for its starting map calls this before its training loop."""
        if self.disposable:
            self.sender, self.receiver = [], []

    @property
    def tokens(self) -> int:
        return len(self.sender[0][0])


def receiver_features(receiver: Side, batch: Batch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The receiver's own un-rotated K/V ``[B, Tr, Hr*Dr]`` over the positions a transfer provides."""
    alignment = batch.alignment
    with torch.no_grad():
        out = receiver.model(
            input_ids=alignment.receiver_ids.to(receiver.model.device),
            attention_mask=alignment.attention_mask.to(receiver.model.device),
            use_cache=True,
            cache=full_cache(),
            **cache_only(receiver.model),
        )
    return receiver_targets(cache_layers(out.cache), alignment.receiver_positions, receiver.rope)


def collect(
    sender: Side,
    receiver: Side,
    windows: list[Window],
    *,
    batch_size: int = 8,
    max_tokens: int = 32768,
    seed: int = 0,
    min_native: int = 1,
    progress: bool = True,
    prepare=prepare_batch,
) -> CalibrationSet:
    """Run both models over ``windows`` and keep up to ``max_tokens`` aligned positions (seeded subsample).
    ``prepare``: what makes a batch of windows ready (:func:`prepare_batch`; a probe may pass one that adds features)."""
    sends, recvs = [], []
    with progress_bar(progress) as bar:
        task = bar.add_task("calibration features", total=len(windows))
        for start in range(0, len(windows), batch_size):
            batch = prepare(windows[start : start + batch_size], sender, receiver, min_native=min_native)
            keep = batch.alignment.mapped_mask
            sends.append([(k[keep], v[keep]) for k, v in batch.features])
            recvs.append([(k[keep], v[keep]) for k, v in receiver_features(receiver, batch)])
            bar.advance(task, len(batch))
    merge = lambda parts: [tuple(torch.cat([p[i][j] for p in parts]) for j in range(2)) for i in range(len(parts[0]))]
    sender_feats, receiver_feats = merge(sends), merge(recvs)
    total = len(sender_feats[0][0])
    if total > max_tokens:
        pick = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:max_tokens]
        sender_feats = [(k[pick], v[pick]) for k, v in sender_feats]
        receiver_feats = [(k[pick], v[pick]) for k, v in receiver_feats]
    return CalibrationSet(sender.name, receiver.name, sender.spec, receiver.spec, sender_feats, receiver_feats)
