"""The layer-residual probe's parts (benchmarks/probes/layer_residual.py): its residual arm starts as the affine
map it extends, and an arm with the affine map frozen trains only the residual, on the trainer's schedule."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.methods import get_method
from heterofold_hub.trainers.module import warmup_then_decay
from heterofold_hub.transfer.batches import prepare_batch
from heterofold_hub.transfer.forward import transferred_logits

from conftest import tiny_model
from helpers import small_calibration

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "layer_residual.py"
spec = importlib.util.spec_from_file_location("layer_residual", PROBE)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


@pytest.fixture(scope="module")
def setup(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    batches = [prepare_batch(windows[i:i + 2], sender, receiver) for i in range(0, 4, 2)]
    return get_method("recolor").fit(calib), batches, receiver


def test_the_residual_arm_starts_as_the_affine_map(setup):
    affine, batches, receiver = setup
    residual = probe.ResidualAffine.from_affine(affine, residual_layers=[1], rank=4)
    with torch.no_grad():
        assert torch.equal(transferred_logits(residual, receiver, batches[0]),
                           transferred_logits(affine, receiver, batches[0]))


def test_an_arm_with_the_affine_map_frozen_trains_only_its_residual(setup):
    affine, batches, receiver = setup
    residual = probe.ResidualAffine.from_affine(affine, residual_layers=[1], rank=4)
    before = {k: v.clone() for k, v in residual.state_dict().items()}
    log = probe.train(residual, batches, {}, receiver, [0, 1, 0, 1], lr=0.0, residual_lr=1e-2, name="test")
    after = residual.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all("_residual.1." in k for k in moved), moved
    assert {k for k in before if k.startswith("k_residual.1.2.")} <= moved  # the up-projection left zero
    assert len(log["losses"]) == 4


def test_the_schedule_warms_up_over_a_tenth_then_decays_to_a_tenth():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule = warmup_then_decay(optimizer, 100)
    rates = []
    for _ in range(100):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(0.91)  # (step + 1) / 10, times the decay
    assert rates[50] == pytest.approx(0.5) and rates[99] == pytest.approx(0.1)
