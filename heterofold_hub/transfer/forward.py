"""The receiver's next-token logits on a batch's continuation: native, without context, or transferred."""

from __future__ import annotations

import torch

from heterofold_hub.transfer.kvcache import build_cache
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side, keep_logits
from heterofold_hub.transfer.reference import assemble, native_prefix_kv
from heterofold_hub.transfer.batches import Batch
from heterofold_hub.transfer.recompute import apply_recompute, choose_before_map, selection_inputs


def native_logits(receiver: Side, batch: Batch) -> torch.Tensor:
    """``[B, M, V]`` after the receiver's own prefill of the context (the quality reference)."""
    steps = batch.query.shape[1]  # logits of the scored positions only: a 262k vocabulary x every position is GBs
    out = receiver.model(input_ids=batch.native_ids.to(receiver.model.device), **keep_logits(receiver.model, steps))
    return out.logits[:, -steps:].float()


def no_context_logits(receiver: Side, batch: Batch) -> torch.Tensor:
    """``[B, M, V]`` when the receiver sees only its prefix special tokens and the query."""
    ids = torch.cat([batch.prefix.expand(len(batch), -1), batch.query], dim=1)
    steps = batch.query.shape[1]
    out = receiver.model(input_ids=ids.to(receiver.model.device), **keep_logits(receiver.model, steps))
    return out.logits[:, -steps:].float()


def transferred_logits(adapter: PairAdapter, receiver: Side, batch: Batch, *, recompute=None) -> torch.Tensor:
    """``[B, M, V]`` when the receiver continues from the mapped cache (differentiable w.r.t. the adapter), after
    ``recompute`` (:class:`~heterofold_hub.transfer.config.TransferConfig`, query-agnostic selects only; no
    gradients then) when given."""
    model = receiver.model
    alignment = batch.alignment
    native = native_prefix_kv(model, alignment)
    layers = assemble(adapter, batch.features, alignment, receiver.rope, native, dtype=model.dtype)
    if recompute is not None and recompute.active:
        mapped = [(k.detach(), v.detach()) for k, v in layers]  # the reference path maps every row anyway
        selector, inputs = selection_inputs(recompute, receiver=receiver, sender=None, alignment=alignment,
                                            sender_layers=[], sender_mask=None, surprisal=batch.surprisal, query=None,
                                            spans=None, texts=None)
        layers, _ = apply_recompute(recompute, selector, inputs, receiver=receiver, alignment=alignment,
                                    working=mapped, choice=choose_before_map(selector, inputs, alignment, recompute))
    steps = batch.query.shape[1]
    positions = alignment.receiver_positions[:, -1:] + 1 + torch.arange(steps)
    mask = torch.cat([alignment.attention_mask, torch.ones_like(batch.query)], dim=1)
    out = model(
        input_ids=batch.query.to(model.device),
        attention_mask=mask.to(model.device),
        position_ids=positions.to(model.device),
        cache=build_cache(layers),
    )
    return out.logits.float()
