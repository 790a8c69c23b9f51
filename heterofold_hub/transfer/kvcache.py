"""Moving between ``transformers`` caches and plain per-layer tensors."""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicSlidingWindowLayer

from heterofold_hub.base_models.arch import KVSpec
from heterofold_hub.errors import PairMismatchError

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


def full_cache() -> DynamicCache:
    """An empty cache whose every layer keeps every position. A model's default cache keeps only the last
    ``sliding_window - 1`` positions of its sliding-window layers (Gemma 3); features and targets need them all.
    The model still masks attention to its window, so outputs do not change."""
    return DynamicCache()


def build_cache(layers: list[LayerKV], *, windows: list[int | None] | None = None, tokens: int | None = None) -> DynamicCache:
    """A ``DynamicCache`` holding ``layers`` (each ``[batch, kv_heads, seq, head_dim]``) without copying them.

    ``windows[i]`` (from the receiver's :meth:`KVSpec.window`) makes layer ``i`` a sliding-window layer that keeps
    only its last ``windows[i]`` positions (a view of a longer layer given to it) and has seen ``tokens``
    positions (default: the longest layer's length), exactly as after the receiver's own prefill, so ``generate``
    continues the same way. ``DynamicCache(ddp_cache_data=layers)`` would concatenate each layer onto an empty
    tensor, a copy of the whole cache at once; the layers are adopted as they are."""
    windows = windows or [None] * len(layers)
    tokens = tokens or max(k.shape[2] for k, _ in layers)
    cache = DynamicCache(ddp_cache_data=[(None, None)] * len(layers))
    for i, (keys, values) in enumerate(layers):
        if windows[i] is not None:
            layer = cache.layers[i] = DynamicSlidingWindowLayer(sliding_window=windows[i] + 1)
            keys, values = keys[:, :, -windows[i]:], values[:, :, -windows[i]:]
            layer.cumulative_length = tokens
        layer = cache.layers[i]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache


def view_of(cache: DynamicCache) -> DynamicCache:
    """A new cache over the same tensors as ``cache``, for one ``generate`` to extend: transformers' layers grow by
    concatenating into new tensors (never writing into the ones they hold), so extending the view leaves ``cache``
    exactly as it was, and each of several questions reads the same context without copying it."""
    view = copy.copy(cache)
    view.layers = [copy.copy(layer) for layer in cache.layers]
    return view


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


def truncated_sender_layer(layer: int, kept: int, needed: int) -> PairMismatchError:
    """The refusal of a sender layer whose cache kept only its last ``kept`` of the ``needed`` positions a map
    reads (a sliding-window layer of a default Gemma 3 cache), naming both fixes."""
    return PairMismatchError(
        f"Sender layer {layer} is a sliding-window layer whose cache kept only its last {kept} of {needed} "
        "positions, but this adapter maps from it at every position. Prefill the sender with a cache that keeps "
        "every position (`cache=DynamicCache()`: attention is still windowed), or use an adapter fitted from the "
        "sender's full-attention layers only (`--sender-layers full`).")
