"""Checkpoints written next to their final name and renamed into place: a run killed mid-save keeps the old file."""

from __future__ import annotations

import io
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from heterofold_hub.io import write_bytes_atomic


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning writes a local checkpoint to a file in the system temp folder and then moves it; when that
    folder is on another filesystem the move is a copy, and a run killed during it leaves a truncated
    ``last.ckpt``. This writes the temporary file in the checkpoint's own folder, so the rename is atomic."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's own transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_bytes_atomic(path, buffer.getbuffer())
