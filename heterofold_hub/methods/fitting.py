"""Fitting the baseline transfer methods on calibration windows (same data and budget for all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from heterofold_hub.progress import progress_bar
from heterofold_hub.methods.features import collect
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods import get_method
from heterofold_hub.methods.offload import FeatureFolder
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import Batch, prepare_batch
from heterofold_hub.data.windows import Window

CLOSED_FORM = ("recolor", "kv-ridge")
# Training batches hold every window's sender features for the whole run, the largest thing a fit keeps; fp16 halves
# that, and the map reads them back in its own dtype, where fp16's rounding is far below the map's own error
# (docs/training.md).
TRAINING_FEATURES_DTYPE = torch.float16


class TrainingBatches(Sequence):
    """The training batches of ``windows`` (sender prefill, alignment, features in ``TRAINING_FEATURES_DTYPE``),
    prepared on first read: a fit reads its calibration statistics first and frees them before these exist, so the
    two largest things a fit holds are never alive together (docs/training.md has the memory figures). With
    ``offload`` (a folder) the features are kept in files there, and each batch read gets its own back."""

    def __init__(self, windows: list[Window], sender: Side, receiver: Side, *, batch_size: int, progress: bool = True,
                 offload: Path | None = None):
        self.windows, self.sender, self.receiver, self.batch_size, self.progress = windows, sender, receiver, batch_size, progress
        self._batches: list[Batch] | None = None
        self._offload, self._files = offload, None

    def __len__(self) -> int:
        return -(-len(self.windows) // self.batch_size)

    @property
    def prepared(self) -> bool:
        return self._batches is not None

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if self._batches is None:
            self._batches = self._prepare()
        batch = self._batches[index]
        return batch if self._files is None else replace(batch, features=self._files.get(range(len(self))[index]))

    def _prepare(self) -> list[Batch]:
        batches = []
        self._files = None if self._offload is None else FeatureFolder(self._offload)
        where = "" if self._files is None else f", features to {self._files.folder}"
        with progress_bar(self.progress) as bar:
            task = bar.add_task(f"training batches (sender prefill{where})", total=len(self.windows))
            for i in range(0, len(self.windows), self.batch_size):
                part = self.windows[i : i + self.batch_size]
                batch = prepare_batch(part, self.sender, self.receiver, dtype=TRAINING_FEATURES_DTYPE)
                if self._files is not None:
                    self._files.put(len(batches), batch.features)
                    if not batches:
                        self._files.check_room(0, len(self) - 1)
                    batch = replace(batch, features=None)  # read back per step (__getitem__)
                batches.append(batch)
                bar.advance(task, len(part))
        return batches

    def close(self) -> None:
        """Remove the offloaded features' folder (nothing to do when they are in memory)."""
        if self._files is not None:
            self._files.close()


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
    offload_features: Path | None = None,
) -> dict[str, PairAdapter]:
    """One adapter per method, all fitted on the same ``windows``: closed-form statistics from the first
    ``calib_windows`` of them (default all; they keep at most 32768 positions anyway), training on all.

    ``options[name]``: that method's options (its ``MethodOptions`` fields; an unknown one is an error).
    ``fitters`` maps a method name to a function used instead of its class's ``fit`` (same arguments): how the
    trainer supplies HeteroFold's calibration without the library importing the trainer. ``offload_features``: a
    folder where the training batches keep their sender features instead of memory (removed when the fits return)."""
    fitters, options = fitters or {}, options or {}
    stray = sorted(set(options) - set(methods))
    if stray:
        raise HeteroFoldError(f"Options given for {', '.join(stray)}, which is not being fitted ({', '.join(methods)}).")
    classes = {name: get_method(name) for name in methods}
    calib = collect(sender, receiver, windows[:calib_windows], batch_size=batch_size, seed=seed, progress=progress)
    batches = None
    adapters = {}
    try:
        for index, (name, cls) in enumerate(classes.items()):
            if name not in CLOSED_FORM and batches is None:
                batches = TrainingBatches(windows, sender, receiver, batch_size=batch_size, progress=progress,
                                          offload=offload_features)
            fit = fitters.get(name, cls.fit)
            calib.disposable = index == len(classes) - 1  # no later method reads the statistics
            adapters[name] = fit(calib, batches=batches, receiver=receiver, seed=seed, progress=progress,
                                 **options.get(name, {}))
    finally:
        if batches is not None:
            batches.close()
    return adapters
