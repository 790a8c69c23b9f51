"""A small C kernel for the CPU fast path: gather sender rows and turn them by RoPE in one pass.

On CPU the torch ops for a gather, a roll and two multiply-adds each make a full pass over tiny heads, and
together they cost as much as the map's matmul. ``gather_turn.c`` does the same in one pass. For a map whose
products run in bf16 beside a float32 cache, the same pass also rounds the gathered rows to bf16, and one more
widens the bf16 products into the cache and turns the keys: the conversions cost no pass of their own. It is
compiled once per machine with the system C compiler (well under a second, no torch headers) into
``$HF_FOLD_HOME/kernels`` and called through ``ctypes``. Without a compiler or with ``HF_FOLD_KERNELS=0``,
:func:`load` returns None; then, and for anything but float32 CPU tensors, the torch ops run instead.
Tests hold both paths to the reference.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from heterofold_hub.paths import kernels_dir

SOURCE = Path(__file__).with_name("gather_turn.c")
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c99"]


class Kernels:
    """The compiled functions, taking tensors; each call refuses a layout it was not written for."""

    def __init__(self, library: ctypes.CDLL):
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self._gather_turn = library.hf_gather_turn
        self._gather_turn.argtypes = [ptr, ptr, i64, i64, i64, ptr, i64, ptr, ptr, i64]
        self._gather_turn.restype = None
        self._turn = library.hf_turn
        self._turn.argtypes = [ptr, i64, i64, i64, i64, ptr, ptr, i64]
        self._turn.restype = None
        self._gather_turn_bf16 = library.hf_gather_turn_bf16
        self._gather_turn_bf16.argtypes = self._gather_turn.argtypes
        self._gather_turn_bf16.restype = None
        self._widen_turn = library.hf_widen_turn
        self._widen_turn.argtypes = [ptr, i64, i64, i64, ptr, i64, ptr, ptr, i64]
        self._widen_turn.restype = None

    def gather_turn(self, source: torch.Tensor, rows: torch.Tensor, out: torch.Tensor, turn=None) -> None:
        """``out[r, h] = turn(source[rows[r * H + h]])``. ``source`` ``[R, D]`` contiguous; ``rows`` ``[n * H]``
        int64, each in ``[0, R)`` (the caller guarantees it: the kernel does not check); ``out`` ``[n, H, D]``
        float32, or bf16 (each result rounded as torch rounds), with contiguous heads, any row stride; ``turn`` a
        :class:`~heterofold_hub.transfer.plan.Turn` at these rows (tables ``[n, 1, D]``), or None to copy."""
        n, heads, dim = out.shape
        _require(source.dtype == torch.float32 and source.device.type == "cpu" and source.is_contiguous()
                 and source.dim() == 2 and source.shape[1] == dim, "source rows", source)
        _require(rows.is_contiguous() and rows.dtype == torch.int64 and rows.numel() == n * heads, "rows", rows)
        narrow = out.dtype == torch.bfloat16
        _require(_heads_contiguous(out, torch.bfloat16 if narrow else torch.float32), "output", out)
        cos, sin, rotary = self._tables(turn, n, dim) if turn is not None else (None, None, 0)
        kernel = self._gather_turn_bf16 if narrow else self._gather_turn
        kernel(source.data_ptr(), rows.data_ptr(), n, heads, dim, out.data_ptr(), out.stride(0), cos, sin, rotary)

    def widen_turn(self, x: torch.Tensor, out: torch.Tensor, turn=None) -> None:
        """``out = turn(x.float())``: bf16 rows ``x`` ``[n, H, D]`` (contiguous) widened into float32 ``out``
        ``[n, H, D]`` (contiguous heads, any row stride), turned by ``turn`` (at these rows) or only widened."""
        n, heads, dim = out.shape
        _require(x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.is_contiguous()
                 and tuple(x.shape) == (n, heads, dim), "bf16 rows", x)
        _require(_heads_contiguous(out), "output", out)
        cos, sin, rotary = self._tables(turn, n, dim) if turn is not None else (None, None, 0)
        self._widen_turn(x.data_ptr(), n, heads, dim, out.data_ptr(), out.stride(0), cos, sin, rotary)

    def turn(self, x: torch.Tensor, turn) -> None:
        """``x = turn(x)`` in place; ``x`` ``[n, H, D]`` with contiguous heads, any row stride."""
        n, heads, dim = x.shape
        _require(_heads_contiguous(x), "rows to turn", x)
        self._turn(x.data_ptr(), n, heads, dim, x.stride(0), *self._tables(turn, n, dim))

    @staticmethod
    def _tables(turn, n: int, dim: int) -> tuple[int, int, int]:
        for table in (turn.cos, turn.sin):
            _require(table.dtype == torch.float32 and table.device.type == "cpu" and table.shape[0] == n
                     and table.shape[-1] == dim and table.stride(0) == dim and table.stride(-1) == 1, "RoPE table", table)
        return turn.cos.data_ptr(), turn.sin.data_ptr(), turn.rotary_dim


def _heads_contiguous(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> bool:
    return x.dtype == dtype and x.device.type == "cpu" and x.stride(-1) == 1 and x.stride(-2) == x.shape[-1]


def _require(ok: bool, what: str, tensor: torch.Tensor) -> None:
    """The kernels read and write raw memory: refuse any layout they were not written for."""
    if not ok:
        raise ValueError(f"gather_turn kernel: unsupported {what}: {tuple(tensor.shape)} {tensor.dtype} "
                         f"strides {tensor.stride()} on {tensor.device}")


def load() -> Kernels | None:
    """The compiled kernels, building them on first use; None where they cannot be built or are turned off."""
    return _loaded()[0]


def status() -> str:
    """One line on whether the kernels run here, and if not, why not (for ``hf-fold env`` and bug reports)."""
    return _loaded()[1]


@functools.cache  # once per process: the environment is read, and the library built or found, on first use
def _loaded() -> tuple[Kernels | None, str]:
    if os.environ.get("HF_FOLD_KERNELS", "1") == "0":
        return None, "off (HF_FOLD_KERNELS=0): torch ops"
    name = os.environ.get("CC", "cc")
    compiler = shutil.which(name)
    if compiler is None:
        return None, f"no C compiler ({name!r} not found; set CC to one): torch ops"
    source = SOURCE.read_bytes()
    identity = " ".join([compiler, *FLAGS, _cpu_identity()]).encode()
    library = kernels_dir() / f"gather_turn-{hashlib.sha256(source + identity).hexdigest()[:16]}.so"
    try:
        if not library.exists():
            library.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=library.parent) as scratch:  # same filesystem: the rename is atomic
                built = Path(scratch) / library.name
                subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True, capture_output=True,
                               timeout=120)
                os.replace(built, library)
        return Kernels(ctypes.CDLL(str(library))), f"on: {library}"
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"could not be built with {compiler} ({type(err).__name__}): torch ops"


def _cpu_identity() -> str:
    """What ``-march=native`` depends on, so a library built for one CPU is never loaded on another."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = platform.processor()
    return f"{platform.machine()} {flags}"
