"""`hf-fold train` end to end on local model folders: a complete adapter package, and refusals."""

import json

import torch

from heterofold_hub.saving import load_adapter

from helpers import hf_fold


def train_args(pair_dirs, out, *extra):
    return ("train", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
            "--data", str(pair_dirs / "calib.txt"), "--heldout", str(pair_dirs / "heldout.jsonl"), "--out", str(out),
            "--context-tokens", "48", "--continuation-tokens", "8", "--windows", "8", "--eval-windows", "4",
            "--batch-size", "4", "--max-steps", "3", *extra)


def test_train_writes_a_complete_adapter_package(pair_dirs, tmp_path):
    out = tmp_path / "adapter"
    run = hf_fold(*train_args(pair_dirs, out))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    adapter, metadata = load_adapter(out)
    assert adapter.config.method == "heterofold" and adapter.config.receiver == str(pair_dirs / "receiver")
    assert metadata["sender_tokenizer"].startswith("sha256:") and metadata["sender_tokenizer"] != metadata["receiver_tokenizer"]
    assert metadata["training_args"]["max_steps"] == 3
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["methods"]) == {"native", "no-context", "heterofold"}
    assert all(torch.isfinite(p).all() for p in adapter.state_dict().values())


def test_train_refuses_to_overwrite_a_different_adapter(pair_dirs, tmp_path):
    out = tmp_path / "adapter"
    assert hf_fold(*train_args(pair_dirs, out, "--method", "kv-ridge")).returncode == 0
    run = hf_fold(*train_args(pair_dirs, out))
    assert run.returncode == 2 and "already holds a different adapter" in run.stdout


def test_train_argument_problems_are_gathered_before_loading(tmp_path):
    run = hf_fold("train", "--method", "magic", "--precision", "fp7", "--continuation-tokens", "600", "--sender", "x", "--receiver", "x")
    assert run.returncode == 2
    for flag in ("--method", "--precision", "--continuation-tokens", "--sender and --receiver"):
        assert flag in run.stdout
