"""Fit a HeteroFold adapter: a closed-form map from calibration statistics, then calibration on receiver logits."""

from __future__ import annotations

import gc
import logging
import sys
import warnings
from dataclasses import dataclass

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.forward import native_logits, transferred_logits
from heterofold_hub.methods import get_method
from heterofold_hub.adapter.config import MethodOptions

from .checkpoint_io import AtomicCheckpointIO
from .data import WindowDataModule
from .faults import GoodCheckpoint, training_faults
from .module import CalibrationModule, kl_to_teacher
from .progress import TrainingProgress
from .unfolded import UnfoldedAffine

# Lightning's start-up chatter (accelerator summary, product tips) and a deprecation inside Lightning
# itself would bury the progress bar and the results table; real warnings still show.
logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


# Closed-form starting points, as (method, options): moment matching of the sender features, moment matching of
# ridge's prediction from the best-correlated sender layers, or ridge itself (KV Ridge). "auto" fits each and starts
# from the one whose receiver KL on the first training batches is lowest: which is best depends on the pair.
INITS = {"recolor": ("recolor", {}), "ridge-recolor": ("recolor", {"base": "ridge", "layers": "correlated"}),
         "kv-ridge": ("kv-ridge", {})}
# Starting from a given affine package (options["start"]): a composition of two adapters ("composed"), or any
# adapter of the pair, a published version say, whose calibration goes on ("adapter").
GIVEN_STARTS = ("composed", "adapter")
INIT_CHOICES = ("auto", *INITS, *GIVEN_STARTS)
AUTO_BATCHES = 4  # training batches that score the candidate starting points


@dataclass
class CalibrationOptions(MethodOptions):
    """HeteroFold's training options: ``steps`` optimizer steps (or fewer, ``max_minutes``) of AdamW at peak ``lr``
    on full-rank (``lora_rank=0``) or LoRA corrections, from the ``init`` starting map over ``sender_layers``;
    Lightning's ``precision``, ``devices``, ``strategy`` and ``accumulate``; a loss weighted ``1 + copy_weight`` on
    targets copyable from the context, against the teacher's full distribution or (``teacher_top_k``) its top k
    tokens and the rest, kept from a window's first visit; checkpoints in ``default_root_dir``, resumed from
    ``ckpt_path``."""

    steps: int = 100
    lr: float = 3e-4  # the real pair's rate: higher ones diverged or did worse there (docs/training.md)
    lora_rank: int = 0
    init: str = "auto"
    sender_layers: str = "all"
    sources_per_layer: int = 2  # sender layers each receiver layer of the starting map reads
    max_minutes: float | None = None
    precision: str = "32-true"
    devices: int | str = 1
    strategy: str = "auto"
    accumulate: int = 1
    copy_weight: float = 0.0  # extra loss weight on targets copyable from the context (Batch.copied_targets)
    teacher_top_k: int = 0  # 0: the teacher's full distribution, every step; k: its top k + the rest, kept (teacher.py)
    default_root_dir: str | None = None
    ckpt_path: str | None = None
    start: object = None  # init in GIVEN_STARTS: the affine adapter to start from

    def __post_init__(self):
        if self.init not in INIT_CHOICES:
            raise HeteroFoldError(f"heterofold: init={self.init!r}; choose from {', '.join(INIT_CHOICES)}")
        if not self.copy_weight >= 0:
            raise HeteroFoldError(f"heterofold: copy_weight={self.copy_weight}; give 0 (a plain mean) or a positive weight")
        if self.teacher_top_k < 0:
            raise HeteroFoldError(f"heterofold: teacher_top_k={self.teacher_top_k}; give 0 (the full distribution, "
                                  "computed every step) or a positive number of tokens kept per position")
        if (self.init in GIVEN_STARTS) != (self.start is not None):
            raise HeteroFoldError(f"heterofold: init in {GIVEN_STARTS} needs start=<an affine adapter> (and start "
                                  f"needs one of them); got init={self.init!r}, start={type(self.start).__name__}")


def calibrate(calib, batches=None, receiver=None, *, seed: int = 0, progress: bool = True, callbacks=None, **options):
    """The folded HeteroFold adapter fitted on ``calib`` statistics and ``batches`` through the frozen ``receiver``;
    ``options`` are :class:`CalibrationOptions` (an unknown one is an error)."""
    o = CalibrationOptions.from_kwargs("heterofold", options)
    L.seed_everything(seed, workers=True, verbose=False)
    callbacks, guard = list(callbacks or []), None
    if o.default_root_dir is not None:  # epochs never end (endless sampler): checkpoint by step
        guard = GoodCheckpoint(o.default_root_dir)
        callbacks += [ModelCheckpoint(dirpath=o.default_root_dir, save_last=True, save_top_k=0,
                                      every_n_train_steps=max(1, o.steps // 10)), guard]
    if o.start is not None:  # already a full map for this pair
        start = o.start
        start.config.extra = {**start.config.extra, "init": o.init}
    else:
        start = starting_map(calib, batches, receiver, init=o.init, sender_layers=o.sender_layers,
                             sources_per_layer=o.sources_per_layer, progress=progress)
    if calib is not None:
        calib.free()  # only if its holder is done with it (starting_map already has)
    module = CalibrationModule(UnfoldedAffine.from_affine(start, lora_rank=o.lora_rank), receiver, lr=o.lr,
                               max_steps=o.steps, copy_weight=o.copy_weight, teacher_top_k=o.teacher_top_k)
    if progress:  # our own, in steps and on stderr, instead of Lightning's epoch bar on stdout
        callbacks.append(TrainingProgress())
    trainer = L.Trainer(
        accelerator="auto", devices=o.devices, strategy=o.strategy, precision=o.precision, max_steps=o.steps,
        max_time={"minutes": o.max_minutes} if o.max_minutes else None, accumulate_grad_batches=o.accumulate,
        enable_progress_bar=False, enable_model_summary=False, logger=False,
        enable_checkpointing=o.default_root_dir is not None, default_root_dir=o.default_root_dir, deterministic=True,
        callbacks=callbacks, num_sanity_val_steps=0, use_distributed_sampler=False, plugins=[AtomicCheckpointIO()],
    )
    settings = {"--accumulate": o.accumulate, "--batch-size": len(batches[0]) if batches else None}
    with training_faults(lr=o.lr, precision=o.precision, guard=guard, settings=settings):
        # weights_only: resuming reads tensors and plain containers only, never unpickles arbitrary objects
        trainer.fit(module, datamodule=WindowDataModule(lambda: batches, seed=seed), ckpt_path=o.ckpt_path,
                    weights_only=True)
    adapter = module.adapter.fold()
    # --max-minutes can stop a run before --max-steps: the steps it ran are part of what made the adapter
    adapter.config.extra = {**adapter.config.extra, "calibration_steps": trainer.global_step}
    # The trainer holds the datamodule, and so the prepared batches (GBs on real pairs), in reference cycles:
    # break them now, so the batches go when their caller lets go, not at some later collection (which would
    # leave them alive through `hf-fold train`'s held-out evaluation).
    del trainer, module
    gc.collect()
    return adapter


def starting_map(calib, batches, receiver, *, init: str, sender_layers: str = "all", sources_per_layer: int = 2,
                 progress: bool = True):
    """The closed-form affine map calibration starts from, each receiver layer reading ``sources_per_layer`` sender
    layers; with ``init="auto"`` the candidate whose receiver KL on the first ``AUTO_BATCHES`` training batches is
    lowest (recorded in its config as ``extra["init"]``)."""
    names = list(INITS) if init == "auto" else [init]
    candidates = {name: get_method(INITS[name][0]).fit(calib, sender_layers=sender_layers,
                                                       sources_per_layer=sources_per_layer, **INITS[name][1])
                  for name in names}
    calib.free()  # before the batches are read: fit_methods' TrainingBatches are prepared on first read
    scores = {}
    if len(candidates) > 1:
        with torch.no_grad():
            for name, adapter in candidates.items():
                kls = [kl_to_teacher(transferred_logits(adapter, receiver, b), native_logits(receiver, b))
                       for b in batches[:AUTO_BATCHES]]
                scores[name] = float(torch.stack(kls).mean())
        if progress:  # a message, not data: stderr
            print("starting maps, receiver KL on training batches: "
                  + ", ".join(f"{name} {kl:.3f}" for name, kl in scores.items()), file=sys.stderr)
    chosen = min(scores, key=scores.get) if scores else names[0]
    start = candidates[chosen]
    start.config.extra = {**start.config.extra, "init": chosen, "init_kl": scores}
    return start
