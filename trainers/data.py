"""Prepared (context, continuation) window batches as a LightningDataModule.

Token alignment and sender features are computed once in ``setup`` and reused every epoch: the frozen
sender never runs inside the training loop.
"""

from __future__ import annotations

from typing import Callable

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from heterofold_hub.windows import Batch


class _Batches(Dataset):
    def __init__(self, batches: list[Batch]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Batch:
        return self.batches[index]


class WindowDataModule(L.LightningDataModule):
    """``prepare()`` returns the training batches (each a :class:`Batch` of windows); it runs in ``setup``."""

    def __init__(self, prepare: Callable[[], list[Batch]], *, seed: int = 0):
        super().__init__()
        self._prepare, self.seed, self.batches = prepare, seed, None

    def setup(self, stage: str) -> None:
        if self.batches is None:
            self.batches = self._prepare()

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(_Batches(self.batches), batch_size=None, shuffle=True, generator=generator)
