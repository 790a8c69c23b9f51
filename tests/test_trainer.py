"""Output-aware calibration: folding is exact, training is deterministic, resumable and runs under DDP."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from safetensors.torch import load_file

from heterofold_hub.transfer.forward import transferred_logits
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import prepare_batch
from heterofold_hub.trainers.calibrate import calibrate
from heterofold_hub.trainers.module import kl_to_teacher
from heterofold_hub.trainers.unfolded import UnfoldedAffine

from conftest import tiny_model
from helpers import small_calibration


@pytest.fixture(scope="module")
def setup(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=8)
    batches = [prepare_batch(windows[i : i + 4], sender, receiver) for i in range(0, 8, 4)]
    return calib, batches, receiver


@pytest.mark.parametrize("rank", [0, 4])
def test_folded_adapter_gives_the_unfolded_logits(setup, rank):
    calib, batches, receiver = setup
    unfolded = UnfoldedAffine.from_affine(get_method("recolor").fit(calib), lora_rank=rank)
    with torch.no_grad():  # stand-in for training: move every trainable tensor
        for p in unfolded.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
        a = transferred_logits(unfolded, receiver, batches[0])
        b = transferred_logits(unfolded.fold(), receiver, batches[0])
    assert (a - b).abs().max() < 1e-4


def weights(adapter):
    return {k: v.clone() for k, v in adapter.state_dict().items()}


def test_calibration_lowers_kl_and_is_deterministic(setup):
    calib, batches, receiver = setup
    kw = dict(steps=12, lr=3e-3, progress=False, seed=3)
    first, second = calibrate(calib, batches, receiver, **kw), calibrate(calib, batches, receiver, **kw)
    assert all(torch.equal(first.state_dict()[k], v) for k, v in weights(second).items())
    from heterofold_hub.transfer.forward import native_logits

    recolor = get_method("recolor").fit(calib)
    with torch.no_grad():
        kl = lambda adapter: sum(kl_to_teacher(transferred_logits(adapter, receiver, b), native_logits(receiver, b)) for b in batches)
        before, after = kl(recolor), kl(first)
    assert after < 0.9 * before, (before, after)


class Crash(Callback):
    def __init__(self, at: int):
        self.at = at

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.at:
            raise RuntimeError("killed")  # the run dies here; checkpoints already written stay


def test_killed_run_resumes_to_the_same_adapter(setup, tmp_path):
    calib, batches, receiver = setup
    kw = dict(steps=6, lr=1e-2, progress=False, seed=5)
    straight = calibrate(calib, batches, receiver, default_root_dir=str(tmp_path / "a"), **kw)
    with pytest.raises(RuntimeError, match="killed"):
        calibrate(calib, batches, receiver, default_root_dir=str(tmp_path / "b"), callbacks=[Crash(3)], **kw)
    assert (tmp_path / "b" / "last.ckpt").is_file()
    resumed = calibrate(calib, batches, receiver, default_root_dir=str(tmp_path / "b"), ckpt_path="last", **kw)
    for k, v in straight.state_dict().items():
        assert torch.allclose(resumed.state_dict()[k], v, atol=1e-6), k



class UnwritableSave(Callback):
    """The save at step ``at`` fails while being written (torch.save cannot pickle a lambda), as a kill would."""

    def __init__(self, at: int):
        self.at = at

    def on_save_checkpoint(self, trainer, module, checkpoint):
        if trainer.global_step == self.at:
            checkpoint["unpicklable"] = lambda: None


def test_a_failed_save_leaves_the_last_checkpoint_whole_and_resumable(setup, tmp_path, monkeypatch):
    calib, batches, receiver = setup
    # No system temp folder: checkpoints must be written beside their final name, not moved in from elsewhere.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-folder"))
    out = tmp_path / "run"
    kw = dict(steps=6, lr=1e-2, progress=False, seed=5, default_root_dir=str(out))
    with pytest.raises(Exception, match="pickle"):
        calibrate(calib, batches, receiver, callbacks=[UnwritableSave(3)], **kw)
    assert sorted(p.name for p in out.iterdir()) == ["last.ckpt", "previous.ckpt"]  # no temporary left behind
    assert torch.load(out / "last.ckpt", weights_only=True)["global_step"] == 2
    assert torch.load(out / "previous.ckpt", weights_only=True)["global_step"] == 2  # kept just before the failed write
    resumed = calibrate(calib, batches, receiver, ckpt_path="last", **kw)
    straight = calibrate(calib, batches, receiver, **{**kw, "default_root_dir": str(tmp_path / "straight")})
    for k, v in straight.state_dict().items():
        assert torch.allclose(resumed.state_dict()[k], v, atol=1e-6), k

def test_two_process_ddp_on_cpu_ends_with_identical_weights(tmp_path):
    script = Path(__file__).parent / "ddp_fit.py"
    run = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    rank0, rank1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
