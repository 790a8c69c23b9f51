"""The neighbour-positions probes (benchmarks/probes/neighbour_positions.py, neighbour_calibrated.py): the views added
after the sender's layers are the sender token before / after the aligned one, and the aligned one on split rows only;
a map widened to read them starts as the map it widens, and a closed-form correction through them fits what it
leaves of the receiver's K/V."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.methods import get_method
from heterofold_hub.methods.features import collect
from heterofold_hub.transfer.forward import transferred_logits

from conftest import tiny_model
from helpers import small_calibration

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "neighbour_positions.py"
spec = importlib.util.spec_from_file_location("neighbour_positions", PROBE)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)
CALIBRATED = PROBE.with_name("neighbour_calibrated.py")
spec = importlib.util.spec_from_file_location("neighbour_calibrated", CALIBRATED)
calibrated = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calibrated)


@pytest.fixture(scope="module")
def pair(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    return sender, receiver, windows, get_method("recolor").fit(calib)


@pytest.fixture(scope="module")
def batch(pair):
    sender, receiver, windows, _ = pair
    return probe.with_views(probe.VIEWS)(windows[:2], sender, receiver)


def test_every_view_follows_the_sender_layers_in_order(batch):
    assert len(batch.features) == 3 * (len(probe.VIEWS) + 1)
    assert probe.read_also([[0, 2]], probe.VIEWS, ("prev", "split"), 3) == [[0, 2, 3, 5, 9, 11]]


def test_prev_and_next_read_the_neighbouring_sender_tokens(batch):
    index, mapped = batch.alignment.sender_index, batch.alignment.mapped_mask
    # where two mapped receiver tokens draw on consecutive sender tokens, the later one's "prev" is the earlier
    # one's own feature and the earlier one's "next" is the later one's (keys un-rotated at their own positions)
    step = mapped[:, 1:] & mapped[:, :-1] & (index[:, 1:] - index[:, :-1] == 1)
    assert step.sum() > 10
    for layer in range(3):
        for part in range(2):
            own = batch.features[layer][part]
            prev, nxt = batch.features[3 + layer][part], batch.features[6 + layer][part]
            assert torch.allclose(prev[:, 1:][step], own[:, :-1][step], atol=1e-5)
            assert torch.allclose(nxt[:, :-1][step], own[:, 1:][step], atol=1e-5)


def test_split_is_the_aligned_feature_on_rows_that_split_a_sender_token_and_zero_elsewhere(batch):
    index, mapped = batch.alignment.sender_index, batch.alignment.mapped_mask
    split = torch.zeros_like(mapped)
    split[:, 1:] = mapped[:, 1:] & (index[:, 1:] == index[:, :-1])
    assert split.any() and (mapped & ~split).any()
    for layer in range(3):
        own, gated = batch.features[layer][0], batch.features[9 + layer][0]
        assert torch.equal(gated[split], own[split]) and not gated[~split].any()


def test_a_widened_map_starts_as_the_map_it_widens(pair, batch):
    _, receiver, _, adapter = pair
    wide = calibrated.widened(adapter, ("prev", "split"))
    assert wide.config.in_features == 3 * adapter.config.in_features
    with torch.no_grad():
        assert torch.equal(transferred_logits(wide, receiver, batch), transferred_logits(adapter, receiver, batch))


@pytest.mark.parametrize("read", [(), ("split",), ("prev",)])
def test_a_correction_fits_what_the_map_leaves_of_the_receivers_kv(pair, read):
    sender, receiver, windows, adapter = pair
    calib = collect(sender, receiver, windows, prepare=probe.with_views(probe.VIEWS), progress=False)
    fixed = calibrated.corrected(adapter, calib, read)
    for r in range(len(calib.receiver)):
        for j, (before, after) in enumerate(zip(adapter.map_layer(r, *adapter.layer_inputs(calib.sender, r)),
                                                fixed.map_layer(r, *fixed.layer_inputs(calib.sender, r)))):
            target = calib.receiver[r][j]
            assert (after - target).pow(2).mean() < (before - target).pow(2).mean(), (read, r, "kv"[j])


def test_given_layers_only_the_features_named_are_made(pair):
    sender, receiver, windows, _ = pair
    # sender layer 0 alone, layer 1's previous token, layer 2 on split rows (3 sender layers: views start at 3, 6, 9)
    batch = probe.with_views(probe.VIEWS)(windows[:2], sender, receiver, layers={0, 3 + 1, 9 + 2})
    made = {i for i, kv in enumerate(batch.features) if kv is not None}
    assert made == {0, 1, 2, 4, 11}  # a view's sender layer is made too


def test_training_batches_hold_what_every_arm_reads(pair):
    from benchmarks.probes.layer_residual import training_batches

    sender, receiver, windows, adapter = pair
    arms = [calibrated.widened(adapter, ("prev",)), calibrated.widened(adapter, ("split",))]  # as wide as each other
    batches, _ = training_batches(windows[:2], sender, receiver, arms, 1, prepare=probe.with_views(probe.VIEWS))
    for arm in arms:
        with torch.no_grad():
            assert transferred_logits(arm, receiver, batches[0]).isfinite().all()
