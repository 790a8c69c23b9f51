"""Training faults as clear errors: a diverged loss (NaN/inf) and running out of memory.

A diverged run keeps its last good checkpoint. Lightning overwrites ``last.ckpt`` every few steps, so when the
loss turns NaN at step k, ``last.ckpt`` may hold exactly the weights that diverged (saved at the end of step
k-1). ``GoodCheckpoint`` keeps the checkpoint before it as ``previous.ckpt`` and, on divergence, puts that one
back as ``last.ckpt``: every step from it on had a finite loss.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from heterofold_hub.errors import TrainingError

PREVIOUS = "previous.ckpt"  # no "last" in the name: Lightning's ckpt_path="last" must not pick it
DIVERGED = "diverged.ckpt"
_OOM_TYPES = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), torch.cuda.OutOfMemoryError, MemoryError) if t)
_OOM_TEXT = ("can't allocate memory", "cannot allocate memory", "out of memory", "not enough memory")


class Diverged(FloatingPointError):
    """Raised in the training loop. ``step``: the global step whose weights are bad (their loss was NaN/inf, or
    the update that made them left NaN/inf in them)."""

    def __init__(self, what: str, step: int):
        super().__init__(what)
        self.what, self.step = what, step


class GoodCheckpoint(Callback):
    """Keeps the checkpoint before ``last.ckpt`` as ``previous.ckpt``; restores it when training diverges."""

    def __init__(self, dirpath: str | os.PathLike):
        self.saved: dict[str, int | None] = {}  # file name -> global step of the weights in it (None: earlier run)
        self.last: Path | None = None  # set by this run's first save
        self.dirpath = Path(dirpath)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if not trainer.is_global_zero:
            return
        self.last = Path(trainer.checkpoint_callback.last_model_path)  # Lightning writes here right after this hook
        if self.last.is_file():  # keep it as previous.ckpt; last.ckpt stays until the new one replaces it
            _keep_as(self.last, self.last.with_name(PREVIOUS))
            self.saved[PREVIOUS] = self.saved.get(self.last.name)
        self.saved[self.last.name] = trainer.global_step

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if not isinstance(exception, Diverged) or not trainer.is_global_zero or self.last is None:
            return
        if self.saved.get(self.last.name) == exception.step:  # last.ckpt holds the very weights that diverged
            previous = self.last.with_name(PREVIOUS)
            os.replace(self.last, self.last.with_name(DIVERGED))
            if previous.is_file():
                os.replace(previous, self.last)
                self.saved[self.last.name] = self.saved.pop(PREVIOUS)
            else:
                self.saved.pop(self.last.name)

    def kept(self) -> str:
        """Which good checkpoint a diverged run left, for the error message."""
        if self.last is None and (self.dirpath / "last.ckpt").is_file():  # resumed, diverged before saving
            return f"The last good checkpoint (from an earlier run) is kept at {self.dirpath / 'last.ckpt'}."
        if self.last is None or not self.last.is_file():
            return "No checkpoint was kept: the loss diverged before the first good one was saved."
        step = self.saved.get(self.last.name)
        which = f"step {step}" if step is not None else "from an earlier run"
        return f"The last good checkpoint ({which}) is kept at {self.last}."


def _keep_as(source: Path, target: Path) -> None:
    """``target`` becomes a second name for ``source``'s bytes (a hard link; a copy where links are not supported).

    Moving ``source`` away instead would leave no ``last.ckpt`` until the next save lands, so a run killed in
    between could not resume. The link is safe because checkpoints are replaced by a rename
    (``AtomicCheckpointIO``), never rewritten in place."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copyfile(source, temporary)
    os.replace(temporary, target)


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError ("can't allocate memory")."""
    return isinstance(error, _OOM_TYPES) or (
        isinstance(error, RuntimeError) and any(text in str(error).lower() for text in _OOM_TEXT))


def out_of_memory_error(error: BaseException, *, where: str, settings: dict) -> TrainingError:
    """The error to show for ``error``; ``settings``: the flags' current values, e.g. {"--batch-size": 8}."""
    on_gpu = isinstance(error, torch.cuda.OutOfMemoryError) or "cuda" in str(error).lower()
    detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
    now = lambda flag: f" (now {settings[flag]})" if settings.get(flag) is not None else ""  # noqa: E731
    return TrainingError(
        f"Out of {'GPU' if on_gpu else 'CPU'} memory {where}: {detail[:300]}\n"
        f"Use less memory per step: lower --batch-size{now('--batch-size')} and raise --accumulate"
        f"{now('--accumulate')} to keep the same effective batch, shorten --context-tokens{now('--context-tokens')}, "
        f"or train in --precision bf16-mixed{now('--precision')}.")


def divergence_error(error: Diverged, *, lr: float, precision: str, guard: GoodCheckpoint | None) -> TrainingError:
    precision_hint = "" if precision == "32-true" else f" or train in --precision 32-true ({precision} overflows sooner)"
    kept = guard.kept() if guard is not None else "No checkpoints were being written."
    return TrainingError(
        f"Training diverged: {error.what}. Lower --lr (it is {lr:g}; the default is 3e-3){precision_hint} and start "
        f"again without --resume (a resumed run keeps the checkpoint's learning rate). {kept} No adapter was saved.")


@contextmanager
def training_faults(*, lr: float, precision: str, guard: GoodCheckpoint | None = None, settings: dict | None = None,
                    where: str = "during training"):
    """Turn a divergence or an out-of-memory error raised inside into a TrainingError naming the flags to change."""
    try:
        yield
    except Diverged as error:
        raise divergence_error(error, lr=lr, precision=precision, guard=guard) from error
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        raise out_of_memory_error(error, where=where, settings={"--precision": precision, **(settings or {})}) from error
