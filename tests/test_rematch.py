"""Moment re-matching at the pivot (``hf-fold compose --rematch-data``), on real tiny models and tokenizers."""

import json

import pytest
import torch

from heterofold_hub import compose
from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.config import METRICS_NAME
from heterofold_hub.adapter.save_and_load import save_adapter
from heterofold_hub.methods import get_method
from heterofold_hub.methods.composed import Parent, training_data
from heterofold_hub.methods.composed.rematch import rematch

from conftest import bpe_tokenizer, tiny_model, unigram_tokenizer
from helpers import hf_fold, small_calibration


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """Folders A (llama), P (Gemma 3) and B (qwen2); kv-ridge legs A -> P and P -> B saved as packages, with A -> P's
    maps shrunk and shifted so its predicted pivot K/V have the wrong moments, as a weak first leg's do."""
    root = tmp_path_factory.mktemp("rematch")
    specs = {"a": ("llama", bpe_tokenizer(), 3), "p": ("gemma3_text", bpe_tokenizer(260, bos=False), 4),
             "b": ("qwen2", unigram_tokenizer(), 2)}
    for i, (name, (arch, tok, layers)) in enumerate(specs.items()):
        tiny_model(arch, len(tok), layers=layers, seed=i).save_pretrained(root / name)
        tok.save_pretrained(root / name)
    sides = {name: Side.load(str(root / name)) for name in specs}
    calib = {}
    for leg, (s, r) in {"first": ("a", "p"), "second": ("p", "b")}.items():
        _, calib[leg] = small_calibration(sides[s], sides[r], context_tokens=32, windows=6)
        adapter = get_method("kv-ridge").fit(calib[leg])
        if leg == "first":
            with torch.no_grad():
                adapter.k_weight.mul_(0.3), adapter.v_weight.mul_(0.3), adapter.k_bias.add_(0.5)
        save_adapter(adapter, root / leg)
    return root, sides, calib["first"]


def moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    return x.mean(0), torch.cov(x.T, correction=0)


def test_rematched_first_leg_has_the_pivots_moments(trio):
    root, _, calib = trio
    first = load_adapter(root / "first")
    fixed = rematch(first, calib)
    for p, sources in enumerate(first.config.layer_sources):
        for j, kind in enumerate("kv"):
            x = torch.cat([calib.sender[s][j] for s in sources], -1)
            mean, cov = moments(calib.receiver[p][j])
            before_mean, before_cov = moments(first.map_layer(p, x, x)[j])
            after_mean, after_cov = moments(fixed.map_layer(p, x, x)[j])
            scale = cov.diagonal().mean().sqrt()
            assert (after_mean - mean).abs().max() < 1e-3 * scale < (before_mean - mean).abs().max()
            assert (after_cov - cov).norm() < 0.05 * cov.norm() < (before_cov - cov).norm()


def test_compose_rematches_but_records_the_published_parent(trio):
    root, sides, calib = trio
    first, second = load_adapter(root / "first"), load_adapter(root / "second")
    composed = compose(first, second, rematch_on=calib)
    by_hand = compose(rematch(first, calib), second)
    assert all(torch.equal(a, b) for a, b in zip(composed.parameters(), by_hand.parameters()))
    assert not torch.equal(composed.k_weight, compose(first, second).k_weight)
    assert composed.parents[0].weights_sha256 == Parent.of("sender->pivot", first).weights_sha256
    assert composed.config.extra["rematch_tokens"] == calib.tokens
    _, other = small_calibration(sides["p"], sides["b"], context_tokens=32, windows=2)
    with pytest.raises(HeteroFoldError, match="needs calibration features of that pair"):
        rematch(first, other)


def test_compose_cli_rematches_on_text_it_records_and_keeps_out_of_scoring(trio, tmp_path):
    root, _, _ = trio
    # the first form of compose (positional SENDER RECEIVER, --via): kept working, with a warning each
    args = ["compose", str(root / "a"), str(root / "b"), "--via", str(root / "p"), "--first", str(root / "first"),
            "--second", str(root / "second"), "--eval-windows", "2", "--context-tokens", "32",
            "--continuation-tokens", "8", "--rematch-windows", "4"]
    clash = hf_fold(*args, "--out", str(tmp_path / "x"), "--rematch-data", "bundled:unseen", "--heldout", "bundled:unseen")
    assert clash.returncode == 2 and "--rematch-data 'bundled:unseen' shares text with --heldout" in clash.stderr
    out = tmp_path / "a2b"
    run = hf_fold(*args, "--out", str(out), "--rematch-data", "bundled:calib", "--heldout", "bundled:unseen-prose")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "--via is deprecated; use --pivot" in run.stderr and "positional SENDER RECEIVER is deprecated" in run.stderr
    composed = load_adapter(out)
    assert composed.config.extra["rematch_tokens"] > 0 and "bundled:calib" in training_data(composed.config)
    assert json.loads((out / METRICS_NAME).read_text())["methods"]["composed"]["kl"] >= 0
