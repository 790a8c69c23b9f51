"""Training batches' sender features kept on disk instead of in memory (``hf-fold train --offload-features DIR``).

A fit that keeps every window's features in memory grows with its windows (about 9-11 MB a window on the real
pair, in fp16), and on the real pair it peaked well above their sum (docs/results/levers.md). On disk, memory
stays at the models and one step, whatever the number of windows: each batch's features are one safetensors file,
read back when a step takes that batch (the OS's page cache keeps the recent ones), and the folder goes when the
fit is done.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.reference import Features

PREFIX = "hf-fold-features-"  # a run killed before its clean-up leaves such a folder; it can be deleted


class FeatureFolder:
    """One safetensors file per training batch under a fresh folder made in ``parent``; removed by :meth:`close`
    (or when this is garbage collected, or at interpreter exit)."""

    def __init__(self, parent: Path | str):
        parent = Path(parent).expanduser()
        parent.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)

    def _path(self, index: int) -> Path:
        return self.folder / f"batch-{index:06d}.safetensors"

    def put(self, index: int, features: Features) -> None:
        """Write batch ``index``'s features (per sender layer ``(keys, values)`` ``[B, Tr, H*D]``, or None for a layer
        not gathered)."""
        tensors = {f"{layer}.{part}": x.contiguous() for layer, kv in enumerate(features) if kv is not None
                   for part, x in zip(("keys", "values"), kv)}
        try:
            save_file(tensors, self._path(index), metadata={"layers": str(len(features))})
        except (OSError, SafetensorError) as error:
            raise HeteroFoldError(f"--offload-features: could not write {self._path(index)} ({error}). Free space "
                                  f"in {self.folder.parent}, give another folder, or leave the flag out to keep the "
                                  "features in memory.") from error

    def get(self, index: int) -> Features:
        """Batch ``index``'s features as :meth:`put` was given them."""
        with safe_open(self._path(index), framework="pt") as f:
            layers, names = int(f.metadata()["layers"]), set(f.keys())
            return [(f.get_tensor(f"{i}.keys"), f.get_tensor(f"{i}.values")) if f"{i}.keys" in names else None
                    for i in range(layers)]

    def check_room(self, index: int, batches_left: int) -> None:
        """Refuse, before the prefill goes on, when ``batches_left`` more batches the size of ``index`` would not fit
        on the folder's disk."""
        needed, free = self._path(index).stat().st_size * batches_left, shutil.disk_usage(self.folder).free
        if needed > free:
            raise HeteroFoldError(f"--offload-features {self.folder.parent}: the training features need about "
                                  f"{needed / 2**30:.1f} GiB more there and its disk has {free / 2**30:.1f} GiB free. "
                                  "Give a folder on a larger disk, or fewer --windows.")

    def close(self) -> None:
        self._cleanup()
