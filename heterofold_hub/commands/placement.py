"""``--device``, ``--dtype`` and ``--map-dtype`` of eval and bench: the models, their caches and the maps run on
one device in one dtype, as the receiver's own K/V projections do in its prefill (bf16 matrix products run on
AVX512-BF16 or AMX units on CPUs that have them, on tensor cores on GPUs). Adapters are fitted in fp32 on the CPU
first, then placed. ``--map-dtype`` adds rows: each adapter again with only its maps' matrix products in that dtype,
the models and caches left as they are (the fast path keeps its gathers and turns in float32 on the CPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16", "float16")  # names only: argument checks run before torch is imported


def dtype_problems(dtype: str, flag: str = "--dtype") -> list[str]:
    return [] if dtype in DTYPES else [f"{flag}: {dtype!r}; choose from {', '.join(DTYPES)}"]


def map_dtype_problems(map_dtype: str | None, dtype: str) -> list[str]:
    """``--map-dtype``: a dtype, and not the models' own (those rows exist already)."""
    if map_dtype is None:
        return []
    if map_dtype == dtype:
        return [f"--map-dtype: {map_dtype!r} is --dtype already, so it would add nothing; give a narrower dtype "
                "(bfloat16) or drop it"]
    return dtype_problems(map_dtype, "--map-dtype")


def map_dtype_row(name: str, map_dtype: str) -> str:
    """The row name of adapter ``name`` with its products in ``map_dtype``: ``"heterofold (bfloat16 maps)"``."""
    return f"{name} ({map_dtype} maps)"


def with_map_dtype(adapters: dict, names: list[str], map_dtype: str | None) -> dict:
    """``adapters`` plus, for each of ``names``, a copy whose weights (so its matrix products) are in ``map_dtype``,
    named by :func:`map_dtype_row` and placed right after it. Unchanged with no ``map_dtype``."""
    if map_dtype is None:
        return adapters
    import copy

    import torch

    out = {}
    for name, adapter in adapters.items():
        out[name] = adapter
        if name in names:
            out[map_dtype_row(name, map_dtype)] = copy.deepcopy(adapter).to(getattr(torch, map_dtype))
    return out


def place(sides, adapters: dict, *, dtype: str, device: str | torch.device = "cpu") -> dict:
    """Move the sides' models and ``adapters`` (name -> adapter) to ``device`` in ``dtype``; returns the adapters."""
    import torch

    torch_dtype = getattr(torch, dtype)
    for side in sides:
        side.model.to(device=device, dtype=torch_dtype)
    return {name: adapter.to(device=device, dtype=torch_dtype) for name, adapter in adapters.items()}
