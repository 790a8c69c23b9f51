"""Prepared (context, continuation) window batches as a LightningDataModule.

Token alignment and sender features are computed once in ``setup`` and reused every epoch: the frozen
sender never runs inside the training loop. Batch order is a pure function of (seed, step, rank), so a
run resumed from a checkpoint sees exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

from typing import Callable

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from heterofold_hub.transfer.batches import Batch


class _Batches(Dataset):
    def __init__(self, batches: list[Batch]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> tuple[int, Batch]:
        return index, self.batches[index]  # the index keys what a step keeps per batch (the top-k teacher)


class StepSampler(Sampler[int]):
    """Endless batch indices: pass ``p`` over the data is a seeded permutation; rank ``r`` of ``w`` takes
    every ``w``-th draw. Iteration starts at draw ``start()`` (the batches already consumed)."""

    def __init__(self, size: int, *, seed: int, start: Callable[[], int], rank: int = 0, world: int = 1):
        self.size, self.seed, self.start, self.rank, self.world = size, seed, start, rank, world

    def _draw(self, k: int) -> int:
        perm = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + k // self.size))
        return int(perm[k % self.size])

    def __iter__(self):
        k = self.start()
        while True:
            yield self._draw(k * self.world + self.rank)
            k += 1


class WindowDataModule(L.LightningDataModule):
    """``prepare()`` returns the training batches (each a :class:`Batch` of windows); it runs in ``setup``. The loader
    yields ``(index, batch)``."""

    def __init__(self, prepare: Callable[[], list[Batch]], *, seed: int = 0):
        super().__init__()
        self._prepare, self.seed, self.batches = prepare, seed, None

    def setup(self, stage: str) -> None:
        if self.batches is None:
            self.batches = self._prepare()

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        consumed = lambda: trainer.global_step * trainer.accumulate_grad_batches  # noqa: E731
        sampler = StepSampler(len(self.batches), seed=self.seed, start=consumed, rank=trainer.global_rank, world=trainer.world_size)
        return DataLoader(_Batches(self.batches), batch_size=None, sampler=sampler)
