"""Low-rank adapters: full rank is the parent, the fast path equals the reference path, the data-aware factors beat
plain SVD on held-out features, packages round-trip with their integrity checked, the CLI refuses bad ranks, and a
scored package pushes with its parent on its card."""

import json
from dataclasses import replace

import pytest
import torch

from heterofold_hub import HeteroFoldModel
from heterofold_hub.adapter.config import CONFIG_NAME, METRICS_NAME, WEIGHTS_NAME, AdapterConfig
from heterofold_hub.adapter.save_and_load import save_adapter
from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.data.windows import make_windows
from heterofold_hub.errors import HeteroFoldError, UsageError
from heterofold_hub.hub import LocalHub
from heterofold_hub.hub.resolve import resolve_adapter
from heterofold_hub.methods import get_method, load_adapter
from heterofold_hub.methods.features import collect
from heterofold_hub.methods.low_rank import LowRankAdapter, compress, input_moments, max_rank
from heterofold_hub.methods.low_rank.factor import data_aware, map_error, plain
from heterofold_hub.transfer.fast import map_cache
from heterofold_hub.transfer.kvcache import cache_layers
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.zoo import DEMO_PAIR

from helpers import assert_same_cache, hf_fold, reference_layers, sender_cache, texts

RANK = 8


@pytest.fixture(scope="module")
def pair():
    """(sender, receiver, the registered demo adapter and its folder, calibration windows of bundled:train)."""
    sender, receiver = Side.load(DEMO_PAIR[0]), Side.load(DEMO_PAIR[1])
    found = resolve_adapter(sender, receiver)
    windows = make_windows(read_texts("bundled:train"), receiver, context_tokens=64, continuation_tokens=8,
                           max_windows=24)
    return sender, receiver, found, windows


@pytest.fixture(scope="module")
def moments(pair):
    sender, receiver, found, windows = pair
    return input_moments(found.adapter, sender, receiver, windows[:12], progress=False)


def test_full_rank_reproduces_the_parents_transfer(pair, moments):
    sender, receiver, found, _ = pair
    full = compress(found.adapter, moments, max_rank(found.adapter.config))
    batch = [texts()[0][:1500], texts()[1][:600]]
    cache = cache_layers(sender_cache(sender, batch))
    plan = TransferPipeline(found.adapter, sender, receiver).plan(batch)
    want = map_cache(found.adapter, plan, cache, dtype=torch.float32)
    got = map_cache(full, plan, cache, dtype=torch.float32)
    assert_same_cache(got, [(layer.keys, layer.values) for layer in want.layers], atol=1e-4)


@pytest.mark.parametrize("chunk_tokens", [None, 50])
def test_low_rank_fast_path_equals_its_reference_path(pair, moments, chunk_tokens, path):
    sender, receiver, found, _ = pair
    low = compress(found.adapter, moments, RANK)
    pipe = TransferPipeline(low, sender, receiver)
    batch = [texts()[2][:1500], texts()[3][:700]]  # different lengths: a padded row
    cache, plan = sender_cache(sender, batch), pipe.plan(batch)
    fast = map_cache(low, plan, cache_layers(cache), dtype=torch.float32, chunk_tokens=chunk_tokens)
    assert_same_cache(fast, reference_layers(pipe, cache, plan))


def test_data_aware_factors_err_less_than_plain_svd_on_held_features(pair, moments):
    """Fitted on the first 12 calibration windows, scored on the 12 after them."""
    sender, receiver, found, windows = pair
    parent = found.adapter
    held = collect(sender, receiver, windows[12:], progress=False)
    errors = {"data-aware": 0.0, "plain": 0.0}
    for r, sources in enumerate(parent.config.layer_sources):
        for j, ((weight, bias), x) in enumerate(zip(parent.affine_maps(r), parent.layer_inputs(held.sender, r))):
            errors["data-aware"] += map_error(x, weight, bias, data_aware(weight, bias, moments[(tuple(sources), j)], RANK))
            errors["plain"] += map_error(x, weight, bias, plain(weight, bias, RANK))
    assert 0 < errors["data-aware"] <= errors["plain"], errors


def test_a_package_round_trips_with_its_parent_recorded_and_integrity_checked(pair, moments, tmp_path):
    *_, found, _ = pair
    low = compress(found.adapter, moments, RANK, parent_ref={"repo_id": found.repo_id, "version": found.version})
    folder = save_adapter(low, tmp_path / "low")
    loaded = load_adapter(folder)
    assert isinstance(loaded, LowRankAdapter) and loaded.rank == RANK
    assert loaded.parent.method == found.adapter.config.method and loaded.parent.repo_id == found.repo_id
    for name, tensor in low.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.k_a.shape == (len(low.config.layer_sources), low.config.in_features, RANK)
    weights = folder / WEIGHTS_NAME
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(HeteroFoldError):
        load_adapter(folder)
    config = json.loads((folder / CONFIG_NAME).read_text())
    config["extra"]["rank"] = 10_000
    save_adapter(low, tmp_path / "edited")
    (tmp_path / "edited" / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(HeteroFoldError, match="rank"):
        load_adapter(tmp_path / "edited")


def test_compress_refuses_a_non_affine_parent_and_a_rank_above_the_maps(pair, moments):
    *_, found, _ = pair
    c = found.adapter.config
    dense = get_method("dense-latent")(AdapterConfig(**{**c.to_dict(), "method": "dense-latent", "extra": {}}))
    with pytest.raises(UsageError, match="not one affine map"):
        compress(dense, moments, RANK)
    with pytest.raises(UsageError, match=f"--rank {max_rank(c) + 1}: choose 1..{max_rank(c)}"):
        compress(found.adapter, moments, max_rank(c) + 1)


def test_cli_compress_writes_a_package_and_refuses_a_bad_rank_with_exit_2(pair, tmp_path):
    *_, found, _ = pair
    bad = hf_fold("compress", "--adapter", str(found.folder), "--rank", "500", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2, bad.stderr
    assert "--rank 500" in bad.stderr and "choose 1..96" in bad.stderr and not bad.stdout
    assert not (tmp_path / "bad").exists()
    unscored = hf_fold("compress", "--adapter", str(found.folder), "--rank", str(RANK), "--out", str(tmp_path / "good"),
                       "--calib-windows", "4", "--context-tokens", "64", "--eval-windows", "0")
    assert unscored.returncode == 0, unscored.stderr
    assert "low rank" in unscored.stdout and "wrote low-rank adapter package" in unscored.stderr
    assert "not scored" in unscored.stderr and not (tmp_path / "good" / METRICS_NAME).exists()
    loaded = load_adapter(tmp_path / "good")
    assert loaded.rank == RANK and loaded.config.training_args["data"] == "bundled:train"
    evaluated = hf_fold("compress", "--adapter", str(found.folder), "--rank", "4", "--out", str(tmp_path / "x"),
                        "--calib-data", "bundled:unseen")
    assert evaluated.returncode == 2 and "--calib-data 'bundled:unseen'" in evaluated.stderr


def test_a_scored_compressed_package_pushes_with_its_parent_on_the_card_and_loads_by_repo_id(pair, tmp_path):
    sender, receiver, found, _ = pair
    out, registry, hub = tmp_path / "low", tmp_path / "registry.json", tmp_path / "hub"
    made = hf_fold("compress", "--adapter", str(found.folder), "--rank", "4", "--out", str(out), "--calib-windows", "4",
                   "--context-tokens", "64", "--eval-windows", "4", "--batch-size", "4")
    assert made.returncode == 0, made.stderr
    metrics = json.loads((out / METRICS_NAME).read_text())
    assert metrics["data"] == "bundled:unseen" and metrics["windows"] == 4
    assert {"native", "no-context", "low-rank"} <= set(metrics["methods"])
    assert 0 <= metrics["methods"]["low-rank"]["kl"] < float("inf")
    push = hf_fold("push", str(out), "--repo", "tester/q2l-rank4", "--version", "1.0.0", "--hub-dir", str(hub),
                   "--registry", str(registry))
    assert push.returncode == 0, push.stdout + push.stderr
    card = (LocalHub(hub).download("tester/q2l-rank4", version="v1.0.0") / "README.md").read_text()
    assert "factored to rank 4" in card and "## Factored from" in card and found.repo_id in card
    assert 'adapter="tester/q2l-rank4"' in card  # a low-rank adapter is not the pair's default: the usage names it
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, adapter="tester/q2l-rank4", registry=registry, hub_dir=hub)
    assert model.adapter.config.method == "low-rank" and model.adapter.rank == 4
