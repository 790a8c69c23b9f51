"""Calibration step time and page faults under glibc's default malloc and with large blocks kept in the heap.

    .venv/bin/python benchmarks/probes/train_page_faults.py default|heap [--steps 15] [--windows 16]

Each calibration step of SmolLM2 -> Gemma 3 allocates several 134 MB tensors (logits and their softmax over
Gemma 3's 262k vocabulary, and their gradients). glibc serves blocks over its mmap threshold (at most 32 MB) with
fresh mmap()s, so every step faults those pages in again. ``heap`` sets ``mallopt(M_MMAP_MAX, 0)`` and a high
``M_TRIM_THRESHOLD`` at start-up (what ``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=...``
does), so freed blocks are reused instead. Prints one line: mode, steps, seconds per step, minor faults per step,
peak RSS. Run the modes one after the other, never side by side.
"""

import argparse
import ctypes
import resource
import sys
import time

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["default", "heap"])
parser.add_argument("--steps", type=int, default=15)
parser.add_argument("--windows", type=int, default=16)
args = parser.parse_args()
if args.mode == "heap":
    libc = ctypes.CDLL("libc.so.6")
    assert libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1

import functools  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import lightning as L  # noqa: E402
from rich.console import Console  # noqa: E402

from heterofold_hub.trainers.train import TrainArgs, run_train  # noqa: E402

measured = {}
fit = L.Trainer.fit


@functools.wraps(fit)
def timed_fit(self, *a, **k):
    faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    fit(self, *a, **k)
    measured.update(seconds=time.perf_counter() - start, faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                    steps=self.global_step)


L.Trainer.fit = timed_fit
out = Path("/tmp/page-fault-probe")
shutil.rmtree(out, ignore_errors=True)
run_train(TrainArgs(sender="gguf/smollm2-135m-instruct-q4_1", receiver="gguf/gemma3-270m-q4_k_m", data="bundled:wide",
                    windows=args.windows, calib_windows=args.windows, max_steps=args.steps, eval_windows=4,
                    init="ridge-recolor", out=out), Console(quiet=True))
steps = measured["steps"]
print(f"{args.mode}: {steps} steps, {measured['seconds'] / steps:.2f} s/step, {measured['faults'] / steps / 1e3:.0f}k minor "
      f"faults/step, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB", file=sys.stderr)
