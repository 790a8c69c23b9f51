"""Attention over grouped KV heads without copying them, for a recompute's masked forward on the CPU.

A recompute (:mod:`heterofold_hub.transfer.recompute`) runs the receiver over a few chosen positions with a custom
4D mask. Given a mask, transformers' ``sdpa`` attention copies each layer's keys and values once per query head of a
group (``repeat_kv``) before attending, since masked grouped attention falls back to a slow kernel on CUDA. On the
CPU, torch's kernel reads grouped heads in place under a mask (``enable_gqa=True``) and gives the same result to the
bit, so a recompute of a few positions over a long cache no longer pays for copying that cache per query head.
The receiver's own prefill and generation are untouched: :func:`grouped_attention` switches the model only for the
forward it wraps.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

GROUPED_SDPA = "heterofold_grouped_sdpa"


def grouped_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, but masked queries of several heads read their group's KV heads in place.

    ``query`` ``[B, H, n, D]``, ``key``/``value`` ``[B, Hkv, T, D]``, ``attention_mask`` ``[B, 1, n, T]`` (bool or
    additive); returns ``[B, n, H, D]`` as transformers' attention functions do. Anything else (no mask, one query,
    no groups, a position bias or soft-capping) goes to ``sdpa`` unchanged."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = attention_mask is None or groups == 1 or query.shape[2] == 1
    if plain or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)


@contextmanager
def grouped_attention(model):
    """Within the block, ``model`` attends with :func:`grouped_sdpa_attention` when it runs ``sdpa`` on the CPU
    (elsewhere, or with another attention, it is left as it is); its own attention is restored on the way out,
    an exception included."""
    config = model.config
    if config._attn_implementation != "sdpa" or model.device.type != "cpu":
        yield
        return
    config._attn_implementation = GROUPED_SDPA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
