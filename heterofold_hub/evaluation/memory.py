"""Peak extra memory of a call: the most bytes its temporaries held at once, beyond what it returns."""

from __future__ import annotations

import contextlib
import os
import sys

import torch


@contextlib.contextmanager
def _quiet_native_stderr():
    """Send file descriptor 2 to /dev/null for the block (C++ logging bypasses ``sys.stderr``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_extra_bytes(fn, device: torch.device | str = "cpu"):
    """Run ``fn()`` and return ``(result, bytes)``: the peak of bytes allocated during the call minus the bytes
    still held when it returns (its result). On CUDA from the allocator's peak counter; on CPU from the
    profiler's allocation/free events, replayed in order (the CPU allocator keeps no counters)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - torch.cuda.memory_allocated(device)
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_native_stderr():  # kineto logs start/stop lines from C++
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_native_stderr():
            prof.stop()
    # the public event list folds allocations into their ops; the raw kineto events keep each one, in order
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type().name == "CPU")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return result, peak - live
