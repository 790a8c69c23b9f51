"""The transfer path: gather aligned sender KV, un-rotate, map per receiver layer, re-rotate, build the cache.

No Python loop runs over tokens or heads; the only loops are over layers.
"""

from __future__ import annotations

import torch
from torch import nn

from heterofold_hub.transfer.alignment import TokenAlignment
from heterofold_hub.base_models.arch import Rope
from heterofold_hub.base_models.loading import cache_only
from heterofold_hub.transfer.kvcache import LayerKV, truncated_sender_layer
from heterofold_hub.adapter.base import PairAdapter

Features = list[tuple[torch.Tensor, torch.Tensor] | None]  # per sender layer: [B, Tr, kv_heads*head_dim] x2


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, D]`` -> ``[B, T, H*D]``."""
    return x.transpose(1, 2).flatten(2)


def sender_features(
    sender_kv: list[LayerKV],
    alignment: TokenAlignment,
    rope: Rope,
    layers: set[int] | None = None,
    sender_position_ids: torch.Tensor | None = None,
) -> Features:
    """Gather each receiver token's sender K/V and strip the sender's RoPE from the keys.

    ``sender_kv``: per layer ``[B, Hs, Ts, Ds]``; returns per sender layer (None where not in
    ``layers``) keys and values ``[B, Tr, Hs*Ds]``. Sender positions default to the cache column, as a
    plain forward assigns them; pass ``sender_position_ids`` ``[B, Ts]`` if the sender used others.
    """
    index = alignment.sender_index
    positions = index if sender_position_ids is None else sender_position_ids.gather(1, index)
    ref = sender_kv[0][0]
    tables = rope.tables_per_layer(positions.to(ref.device), torch.float32)
    gather_at = index.to(ref.device)[:, :, None, None]
    out: Features = []
    for i, (k, v) in enumerate(sender_kv):
        if layers is not None and i not in layers:
            out.append(None)
            continue
        if k.shape[2] < int(index.max()) + 1:
            raise truncated_sender_layer(i, k.shape[2], int(index.max()) + 1)
        at = gather_at.expand(-1, -1, k.shape[1], k.shape[-1])
        k = k.transpose(1, 2).gather(1, at).float()  # [B, Tr, Hs, Ds]
        v = v.transpose(1, 2).gather(1, at).float()
        out.append((Rope.unrotate(k, tables[i]).flatten(2), v.flatten(2)))
    return out


def receiver_targets(receiver_kv: list[LayerKV], positions: torch.Tensor, rope: Rope) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Receiver K/V in the mapped space: keys un-rotated; each ``[B, T, Hr*Dr]`` (fp32)."""
    tables = rope.tables_per_layer(positions.to(receiver_kv[0][0].device), torch.float32)
    return [
        (Rope.unrotate(k.transpose(1, 2).float(), tables[i]).flatten(2), _flat(v).float())
        for i, (k, v) in enumerate(receiver_kv)
    ]


def native_prefix_ids(alignment: TokenAlignment) -> torch.Tensor:
    """``[B, P]``: each row's first ``native_prefix`` real receiver token ids (BOS / attention sink)."""
    mask = alignment.native_mask
    return alignment.receiver_ids[mask].view(len(mask), alignment.native_prefix)


@torch.no_grad()
def prefix_kv(receiver: nn.Module, ids: torch.Tensor) -> list[LayerKV]:
    """The receiver's own keys/values ``[B, Hr, P, Dr]`` per layer for prefix ``ids`` ``[B, P]``: one forward of
    ``P`` tokens, independent of the context length (the LM head only on the last position: no logits are used)."""
    out = receiver(input_ids=ids.to(receiver.device), use_cache=True, **cache_only(receiver))
    return [(layer.keys, layer.values) for layer in out.cache.layers]


def native_prefix_kv(receiver: nn.Module, alignment: TokenAlignment) -> list[LayerKV]:
    """The receiver's own KV ``[B, Hr, P, Dr]`` per layer for each row's first ``native_prefix`` tokens."""
    return prefix_kv(receiver, native_prefix_ids(alignment))


def assemble(
    adapter: PairAdapter,
    features: Features,
    alignment: TokenAlignment,
    rope: Rope,
    native: list[LayerKV],
    *,
    dtype: torch.dtype,
) -> list[LayerKV]:
    """Receiver cache layers ``[B, Hr, Tr, Dr]`` from sender ``features`` (gradients flow to ``adapter``).

    Native-prefix positions take the receiver's own KV; padding positions are zero.
    """
    spec = adapter.config.receiver_spec
    heads, dim = spec["kv_heads"], spec["head_dim"]
    device = native[0][0].device
    tables = rope.tables_per_layer(alignment.receiver_positions.to(device), torch.float32)
    native_at = alignment.native_mask.to(device)
    mapped_at = alignment.mapped_mask.to(device)[:, None, :, None]
    layers = []
    for r in range(len(adapter.config.layer_sources)):
        # features may be stored narrower (fp16 training batches); the map reads them in its own dtype
        k, v = adapter.map_layer(r, *(x.to(adapter.compute_dtype) for x in adapter.layer_inputs(features, r)))
        k = Rope.rotate(k.view(*k.shape[:2], heads, dim), tables[r]).transpose(1, 2)
        v = v.view(*v.shape[:2], heads, dim).transpose(1, 2)
        nk, nv = native[r]
        k = _overwrite(k.to(dtype) * mapped_at, native_at, nk)
        v = _overwrite(v.to(dtype) * mapped_at, native_at, nv)
        layers.append((k, v))
    return layers


def _overwrite(x: torch.Tensor, where: torch.Tensor, native: torch.Tensor) -> torch.Tensor:
    """Put ``native`` ``[B, H, P, D]`` at the ``P`` positions per row where ``where`` ``[B, T]`` is set.

    Writes into ``x`` (a fresh tensor the caller made), so no extra layer-sized copy is allocated.
    """
    x.transpose(1, 2)[where] = native.transpose(1, 2).flatten(0, 1).to(x.dtype)
    return x
