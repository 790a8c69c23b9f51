"""Lightning's progress off a terminal: its bar redraws with carriage returns, which a log or a pipe shows as one
endless line (or not at all until the run ends). ``PlainTrainingProgress`` writes ``step i/n kl=...`` lines to
stderr instead, at most every few seconds plus the last step's."""

from __future__ import annotations

import sys

from lightning.pytorch.callbacks import Callback

from heterofold_hub.progress import PLAIN_EVERY_S, PlainLines


class PlainTrainingProgress(Callback):
    def __init__(self, stream=None, every_s: float = PLAIN_EVERY_S):
        self.stream, self.every_s = stream, every_s
        self.lines = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.lines = PlainLines(self.stream or sys.stderr, self.every_s)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero:  # one line per step, not one per process
            self.lines.offer(self._line(trainer), final=trainer.global_step >= trainer.max_steps)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and trainer.global_step < trainer.max_steps:  # stopped early (--max-minutes)
            self.lines.offer(self._line(trainer) + " (stopped)", final=True)

    @staticmethod
    def _line(trainer) -> str:
        metrics = " ".join(f"{name}={float(value):.4g}" for name, value in trainer.callback_metrics.items())
        return f"step {trainer.global_step}/{trainer.max_steps}" + (f" {metrics}" if metrics else "")
