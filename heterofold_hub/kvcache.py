"""Moving between ``transformers`` caches and plain per-layer tensors."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .arch import KVSpec
from .errors import PairMismatchError

LayerKV = tuple[torch.Tensor, torch.Tensor]  # keys, values: [batch, kv_heads, seq, head_dim]


def cache_layers(cache) -> list[LayerKV]:
    """Per-layer (keys, values) of a ``transformers`` cache or of a list of tuples."""
    if isinstance(cache, (list, tuple)):
        return [(k, v) for k, v, *_ in cache]
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise PairMismatchError(
            f"Expected a transformers Cache (e.g. DynamicCache) or a list of (keys, values); got "
            f"{type(cache).__name__}. Run the sender with use_cache=True and pass `out.cache`."
        )
    return [(layer.keys, layer.values) for layer in layers]


def build_cache(layers: list[LayerKV]) -> DynamicCache:
    """A ``DynamicCache`` holding ``layers`` (each ``[batch, kv_heads, seq, head_dim]``) without copying them.

    ``DynamicCache(ddp_cache_data=layers)`` would concatenate each layer onto an empty tensor, a copy of the
    whole cache at once; the layers are adopted as they are instead (what that update leaves behind)."""
    cache = DynamicCache(ddp_cache_data=[(None, None)] * len(layers))
    for layer, (keys, values) in zip(cache.layers, layers):
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache


def check_cache(layers: list[LayerKV], spec: KVSpec, *, who: str, model_id: str) -> None:
    """Refuse a cache whose layout is not ``spec``'s, naming both sides."""
    if not layers:
        raise PairMismatchError(f"The {who} cache is empty; expected {spec.num_layers} layers from {model_id}.")
    k = layers[0][0]
    if not k.is_floating_point():
        raise PairMismatchError(f"The {who} cache holds {k.dtype} tensors; a KV cache from {model_id!r} holds floats "
                                "(float32, bfloat16 or float16). Pass the model's own `out.cache`.")
    got = (len(layers), k.shape[1], k.shape[-1])
    want = (spec.num_layers, spec.kv_heads, spec.head_dim)
    if got != want:
        raise PairMismatchError(
            f"This cache does not come from the declared {who} {model_id!r}: it has layers={got[0]}, "
            f"kv_heads={got[1]}, head_dim={got[2]}, but {model_id!r} has layers={want[0]}, "
            f"kv_heads={want[1]}, head_dim={want[2]}. Pass the cache that {model_id!r} produced, or "
            "load the adapter for the model that made this cache."
        )
