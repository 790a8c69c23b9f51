"""Fitting the baseline transfer methods on calibration windows (same data and budget for all)."""

from __future__ import annotations

import torch

from heterofold_hub.methods.features import collect
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods import get_method
from heterofold_hub.methods.base import PairAdapter
from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.windows import Window, prepare_batch

CLOSED_FORM = ("recolor", "kv-ridge")
# Training batches hold every window's sender features for the whole run (7.5 GB in fp32 for 320 SmolLM2 windows);
# fp16 halves that, and the map reads them back in its own dtype (relative rounding 5e-4, far below its error).
TRAINING_FEATURES_DTYPE = torch.float16


def fit_methods(
    sender: Side,
    receiver: Side,
    methods: list[str],
    windows: list[Window],
    *,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = True,
    calib_windows: int | None = None,
    fitters: dict | None = None,
    options: dict[str, dict] | None = None,
) -> dict[str, PairAdapter]:
    """One adapter per method, all fitted on the same ``windows``: closed-form statistics from the first
    ``calib_windows`` of them (default all; they keep at most 32768 positions anyway), training on all.

    ``options[name]``: that method's options (its ``MethodOptions`` fields; an unknown one is an error).
    ``fitters`` maps a method name to a function used instead of its class's ``fit`` (same arguments): how the
    trainer supplies HeteroFold's calibration without the library importing the trainer."""
    fitters, options = fitters or {}, options or {}
    stray = sorted(set(options) - set(methods))
    if stray:
        raise HeteroFoldError(f"Options given for {', '.join(stray)}, which is not being fitted ({', '.join(methods)}).")
    classes = {name: get_method(name) for name in methods}
    calib = collect(sender, receiver, windows[:calib_windows], batch_size=batch_size, seed=seed, progress=progress)
    batches = None
    adapters = {}
    for index, (name, cls) in enumerate(classes.items()):
        if name not in CLOSED_FORM and batches is None:
            batches = [prepare_batch(windows[i : i + batch_size], sender, receiver, dtype=TRAINING_FEATURES_DTYPE)
                       for i in range(0, len(windows), batch_size)]
        fit = fitters.get(name, cls.fit)
        calib.disposable = index == len(classes) - 1  # no later method reads the statistics
        adapters[name] = fit(calib, batches=batches, receiver=receiver, seed=seed, progress=progress,
                             **options.get(name, {}))
    return adapters
