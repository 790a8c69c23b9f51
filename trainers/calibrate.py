"""Fit a HeteroFold adapter: recolor from calibration statistics, then calibrate on receiver logits."""

from __future__ import annotations

import logging
import warnings

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from heterofold_hub.methods import get_method

from .checkpoint_io import AtomicCheckpointIO
from .data import WindowDataModule
from .faults import GoodCheckpoint, training_faults
from .module import CalibrationModule
from .unfolded import UnfoldedAffine

# Lightning's start-up chatter (accelerator summary, product tips) and a deprecation inside Lightning
# itself would bury the progress bar and the results table; real warnings still show.
logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


def calibrate(calib, batches, receiver, *, steps: int = 100, lr: float = 3e-3, lora_rank: int = 0, seed: int = 0,
              progress: bool = True, precision: str = "32-true", devices: int | str = 1, strategy: str = "auto",
              accumulate: int = 1, default_root_dir: str | None = None, ckpt_path: str | None = None,
              callbacks=None, sender_layers: str = "all", **_):
    """Returns the folded adapter. ``lora_rank=0`` trains full-rank corrections of every map."""
    L.seed_everything(seed, workers=True, verbose=False)
    callbacks, guard = list(callbacks or []), None
    if default_root_dir is not None:  # epochs never end (endless sampler): checkpoint by step
        guard = GoodCheckpoint(default_root_dir)
        callbacks += [ModelCheckpoint(dirpath=default_root_dir, save_last=True, save_top_k=0,
                                      every_n_train_steps=max(1, steps // 10)), guard]
    init = get_method("recolor").fit(calib, sender_layers=sender_layers)
    module = CalibrationModule(UnfoldedAffine.from_affine(init, lora_rank=lora_rank), receiver, lr=lr, max_steps=steps)
    trainer = L.Trainer(
        accelerator="auto", devices=devices, strategy=strategy, precision=precision, max_steps=steps,
        accumulate_grad_batches=accumulate, enable_progress_bar=progress, enable_model_summary=False,
        logger=False, enable_checkpointing=default_root_dir is not None, default_root_dir=default_root_dir,
        deterministic=True, callbacks=callbacks, num_sanity_val_steps=0, use_distributed_sampler=False,
        plugins=[AtomicCheckpointIO()],
    )
    settings = {"--accumulate": accumulate, "--batch-size": len(batches[0]) if batches else None}
    with training_faults(lr=lr, precision=precision, guard=guard, settings=settings):
        # weights_only: resuming reads tensors and plain containers only, never unpickles arbitrary objects
        trainer.fit(module, datamodule=WindowDataModule(lambda: batches, seed=seed), ckpt_path=ckpt_path,
                    weights_only=True)
    return module.adapter.fold()
