"""``--device`` and ``--dtype`` of eval and bench: the models, their caches and the maps run on one device in one
dtype, as the receiver's own K/V projections do in its prefill (bf16 matrix products run on AMX units on CPUs
that have them, on tensor cores on GPUs). Adapters are fitted in fp32 on the CPU first, then placed."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16", "float16")  # names only: argument checks run before torch is imported


def dtype_problems(dtype: str) -> list[str]:
    return [] if dtype in DTYPES else [f"--dtype: {dtype!r}; choose from {', '.join(DTYPES)}"]


def place(sides, adapters: dict, *, dtype: str, device: str | torch.device = "cpu") -> dict:
    """Move the sides' models and ``adapters`` (name -> adapter) to ``device`` in ``dtype``; returns the adapters."""
    import torch

    torch_dtype = getattr(torch, dtype)
    for side in sides:
        side.model.to(device=device, dtype=torch_dtype)
    return {name: adapter.to(device=device, dtype=torch_dtype) for name, adapter in adapters.items()}
