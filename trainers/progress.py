"""Calibration progress on stderr, in optimizer steps (``--max-steps``), not Lightning's epochs, which never end here
(the sampler is endless): a rich bar on a terminal; off one (a log, a pipe), where a bar's redraws come out as one
endless line, plain ``step i/n kl=...`` lines at most every few seconds plus the last step's."""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback
from rich.console import Console
from rich.progress import Progress, TextColumn

from heterofold_hub.progress import PLAIN_EVERY_S, PlainLines, stderr_console


class TrainingProgress(Callback):
    def __init__(self, console: Console | None = None, every_s: float = PLAIN_EVERY_S):
        self.console, self.every_s = console, every_s
        self.bar = self.task = self.lines = None

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:  # one report, not one per process
            return
        console = self.console or stderr_console()
        if console.is_terminal:
            self.bar = Progress(*Progress.get_default_columns(), TextColumn("{task.fields[metrics]}"), console=console,
                                transient=True)
            self.task = self.bar.add_task("calibration", total=trainer.max_steps, completed=trainer.global_step,
                                          metrics="")
            self.bar.start()
        else:
            self.lines = PlainLines(console.file, self.every_s)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=trainer.global_step, metrics=metrics(trainer))
        elif self.lines is not None:
            self.lines.offer(line(trainer), final=trainer.global_step >= trainer.max_steps)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.lines is not None and trainer.global_step < trainer.max_steps:  # stopped early (--max-minutes)
            self.lines.offer(line(trainer) + " (stopped)", final=True)
        self.close()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar = self.lines = None


def metrics(trainer) -> str:
    return " ".join(f"{name}={float(value):.4g}" for name, value in trainer.callback_metrics.items())


def line(trainer) -> str:
    return " ".join(filter(None, (f"step {trainer.global_step}/{trainer.max_steps}", metrics(trainer))))
