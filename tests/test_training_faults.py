"""Training faults end as clear errors that name the flags to change, and lose nothing: a loss driven to NaN by
an absurd learning rate (real `hf-fold train`), weights pushed to inf, and real allocation failures."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from heterofold_hub.errors import HeteroFoldError, TrainingError
from heterofold_hub.methods.fitting import fit_methods
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side
from heterofold_hub.adapter.save_and_load import save_adapter
from heterofold_hub.transfer.batches import prepare_batch
from heterofold_hub.data.windows import make_windows
from heterofold_hub.trainers.calibrate import calibrate
from heterofold_hub.trainers.faults import training_faults
from heterofold_hub.trainers.train import TrainArgs

from conftest import tiny_model
from helpers import hf_fold, small_calibration


def train_args(pair_dirs, out, *extra):
    return ("train", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
            "--data", str(pair_dirs / "calib.txt"), "--heldout", str(pair_dirs / "heldout.jsonl"), "--out", str(out),
            "--context-tokens", "48", "--continuation-tokens", "8", "--windows", "8", "--eval-windows", "4",
            "--batch-size", "4", *extra)


def earlier_package(pair_dirs, out):
    """A finished package of this pair already in --out (recoloring, labelled heterofold): a failed run must
    leave it exactly as it was."""
    sender, receiver = Side.load(str(pair_dirs / "sender")), Side.load(str(pair_dirs / "receiver"))
    windows = make_windows([(pair_dirs / "calib.txt").read_text()], receiver, context_tokens=48,
                           continuation_tokens=8, max_windows=4)
    recolor = fit_methods(sender, receiver, ["recolor"], windows, progress=False)["recolor"]
    adapter = get_method("heterofold")(replace(recolor.config, method="heterofold"))
    adapter.load_state_dict(recolor.state_dict())
    save_adapter(adapter, out)
    (out / "metrics.json").write_text(json.dumps({"methods": {}}))
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def test_a_loss_driven_to_nan_stops_with_the_step_and_keeps_the_last_good_checkpoint(pair_dirs, tmp_path):
    out = tmp_path / "adapter"
    before = earlier_package(pair_dirs, out)
    # --max-steps 10 checkpoints every step, so the checkpoint of the diverging step itself gets written
    run = hf_fold(*train_args(pair_dirs, out, "--lr", "1e36", "--max-steps", "10"))
    text = " ".join((run.stdout + run.stderr).split())  # rich wraps long lines
    assert run.returncode == 1 and "Traceback" not in text, text[-3000:]  # a failure, not a usage error
    step = int(re.search(r"Training diverged: the calibration loss became nan at step (\d+)", text).group(1))
    assert "Lower --lr (it is 1e+36" in text and "without --resume" in text and "No adapter was saved" in text
    assert f"The last good checkpoint (step {step - 1}) is kept at {out / 'checkpoints' / 'last.ckpt'}" in text

    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # the package is untouched
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    last = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)
    diverged = torch.load(out / "checkpoints" / "diverged.ckpt", weights_only=True)
    assert (last["global_step"], diverged["global_step"]) == (step - 1, step)  # the bad one was set aside
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values())


@pytest.fixture(scope="module")
def setup(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=8)
    return calib, [prepare_batch(windows[i : i + 4], sender, receiver) for i in range(0, 8, 4)], receiver


class NanGradient(Callback):
    """A backward pass that yields a NaN gradient while the loss stays finite (e.g. sqrt at 0 in a custom loss)."""

    def on_after_backward(self, trainer, module):
        if trainer.global_step == 2:
            next(p for p in module.adapter.parameters() if p.requires_grad).grad.view(-1)[0] = float("nan")


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_an_update_that_leaves_nan_weights_stops_before_they_are_checkpointed(setup, tmp_path, precision):
    calib, batches, receiver = setup
    with pytest.raises(TrainingError) as err:
        calibrate(calib, batches, receiver, steps=6, progress=False, default_root_dir=str(tmp_path),
                  precision=precision, callbacks=[NanGradient()])
    message = str(err.value)
    assert "the update of step 2 left NaN/inf in the weights ['k_maps.0.weight']" in message and "Lower --lr" in message
    assert ("or train in --precision 32-true (bf16-mixed overflows sooner)" in message) == (precision == "bf16-mixed")
    assert f"The last good checkpoint (step 2) is kept at {tmp_path / 'last.ckpt'}" in message
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 2 and all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


def test_an_lr_that_overflows_float32_is_refused_before_loading(tmp_path):
    with pytest.raises(HeteroFoldError, match=r"--lr: 1e\+39 is too large \(at most 1e\+37\)"):
        TrainArgs(sender="a", receiver="b", out=tmp_path, lr=1e39).validate()


class Allocate(Callback):
    """Asks for ``nbytes`` at the start of step 1, inside Lightning's training loop, like an oversized batch."""

    def __init__(self, nbytes: int, device: str = "cpu"):
        self.nbytes, self.device = nbytes, device

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == 1:
            torch.empty(self.nbytes, dtype=torch.uint8, device=self.device)


def test_cpu_out_of_memory_names_the_flags_to_change(setup):
    calib, batches, receiver = setup
    with pytest.raises(TrainingError) as err:  # 16 TiB: the CPU allocator really refuses it
        calibrate(calib, batches, receiver, steps=4, progress=False, accumulate=2, callbacks=[Allocate(2**44)])
    message = str(err.value)
    assert "Out of CPU memory during training" in message and "can't allocate memory" in message
    for flag in ("--batch-size (now 4)", "--accumulate (now 2)", "--context-tokens", "--precision bf16-mixed (now 32-true)"):
        assert flag in message
    assert isinstance(err.value.__cause__, RuntimeError)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_out_of_memory_names_the_flags_to_change(setup):
    calib, batches, receiver = setup
    with pytest.raises(TrainingError, match=r"Out of GPU memory during training: CUDA out of memory.*--batch-size"):
        calibrate(calib, batches, receiver, steps=4, progress=False, callbacks=[Allocate(2**47, "cuda")])


def test_other_errors_pass_through_untranslated():
    with pytest.raises(RuntimeError, match="shape mismatch"):
        with training_faults(lr=1e-3, precision="32-true"):
            raise RuntimeError("shape mismatch")


@pytest.mark.parametrize("links", [True, False])
def test_the_previous_checkpoint_is_kept_beside_last_without_moving_it(tmp_path, monkeypatch, links):
    """A hard link where the filesystem has them, a copy where it does not; last.ckpt never disappears."""
    from heterofold_hub.trainers import faults

    if not links:
        def no_links(*_):
            raise OSError("hard links are not supported on this filesystem")

        monkeypatch.setattr(faults.os, "link", no_links)
    last, previous = tmp_path / "last.ckpt", tmp_path / "previous.ckpt"
    previous.write_bytes(b"older")
    last.write_bytes(b"newer")
    faults._keep_as(last, previous)
    assert last.read_bytes() == previous.read_bytes() == b"newer"
    assert last.samefile(previous) == links
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "previous.ckpt"]
