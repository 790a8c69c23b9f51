"""Small builders shared by tests (not fixtures, so parametrised tests can call them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from heterofold_hub.methods.features import collect
from heterofold_hub.transfer.kvcache import cache_layers, full_cache
from heterofold_hub.transfer.reference import assemble, native_prefix_kv, sender_features
from heterofold_hub.methods.affine import AffineAdapter
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.arch import kv_spec
from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.windows import make_windows

from conftest import TRAIN_TEXT


class IdentityAdapter(AffineAdapter):
    """Receiver layer r reads sender layer r unchanged: only valid for identical models."""

    @classmethod
    def for_calibration(cls, calib) -> "IdentityAdapter":
        return cls.for_side(calib.sender_name, calib.sender_spec)

    @classmethod
    def for_side(cls, name: str, spec) -> "IdentityAdapter":
        layers = spec.num_layers
        config = AdapterConfig(method="identity", sender=name, receiver=name, sender_spec=spec.to_dict(),
                               receiver_spec=spec.to_dict(), layer_sources=[[i] for i in range(layers)])
        adapter = cls(config)
        eye, zero = torch.eye(adapter.config.in_features), torch.zeros(adapter.config.out_features)
        for layer in range(layers):
            for kind in "kv":
                adapter.set_layer(layer, kind, eye, zero)
        return adapter


def random_affine(sender_model, receiver_model, sources_per_layer: int, seed: int, method: str = "kv-ridge",
                  sources: list[list[int]] | None = None):
    """An affine adapter with random weights and biases between two models' KV layouts, reading ``sources`` per
    receiver layer (default: ``sources_per_layer`` random sender layers each)."""
    g = torch.Generator().manual_seed(seed)
    send, recv = kv_spec(sender_model), kv_spec(receiver_model)
    if sources is None:
        sources = [sorted(torch.randperm(send.num_layers, generator=g)[:sources_per_layer].tolist())
                   for _ in range(recv.num_layers)]
    config = AdapterConfig(method=method, sender=sender_model.name_or_path, receiver=receiver_model.name_or_path,
                           sender_spec=send.to_dict(), receiver_spec=recv.to_dict(), layer_sources=sources)
    adapter = get_method(method)(config)
    with torch.no_grad():
        for p in adapter.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-2] ** 0.5 if p.dim() == 3 else 1.0))
    return adapter


def texts(n: int = 6, size: int = 2500) -> list[str]:
    return [TRAIN_TEXT[i * size : (i + 1) * size] for i in range(n)]


def small_calibration(sender: Side, receiver: Side, context_tokens: int = 48, windows: int = 6):
    w = make_windows(texts(), receiver, context_tokens=context_tokens, continuation_tokens=8, max_windows=windows)
    return w, collect(sender, receiver, w, progress=False)


ROOT = Path(__file__).resolve().parents[1]


def hf_fold(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, offline, as a user would (``env``: extra environment variables)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200", **(env or {}))  # wide: tables keep ids on one line
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, env=env, cwd=ROOT)


def reference_layers(pipe, cache, plan):
    """The reference path (what training differentiates through) on the plan's alignment."""
    adapter, layers = pipe.adapter, cache_layers(cache)
    used = {s for sources in adapter.config.layer_sources for s in sources}
    with torch.no_grad():
        features = sender_features(layers, plan.alignment, pipe.sender.rope, used)
        native = native_prefix_kv(pipe.receiver.model, plan.alignment)
        return assemble(adapter, features, plan.alignment, pipe.receiver.rope, native, dtype=torch.float32)


def assert_same_cache(fast, reference, atol=1e-5):
    """The fast path's cache equals the reference layers (to ``atol`` times the largest value, at least 1); a
    sliding-window layer holds the reference's last ``window`` positions and counts all of them."""
    assert len(fast.layers) == len(reference)
    for layer, (k, v) in zip(fast.layers, reference):
        window = getattr(layer, "sliding_window", None)
        if window is not None:
            assert layer.keys.shape[2] == min(window - 1, k.shape[2]) and layer.get_seq_length() == k.shape[2]
            k, v = k[:, :, -layer.keys.shape[2]:], v[:, :, -layer.keys.shape[2]:]
        assert layer.keys.shape == k.shape and layer.keys.dtype == k.dtype
        for got, want in ((layer.keys, k), (layer.values, v)):  # float32 rounding grows with the values' scale
            tolerance = atol * max(1.0, want.abs().max().item())
            assert torch.allclose(got, want, atol=tolerance, rtol=0), ((got - want).abs().max(), tolerance)


def kernels_or_skip():
    """The C kernels, or a skip saying why they legitimately do not run here (turned off, or no C compiler). On a
    machine with a compiler a kernel that fails to build fails the test instead of hiding behind a skip."""
    import pytest

    from heterofold_hub.transfer import kernels

    built, status = kernels.load(), kernels.status()
    if built is None:
        if status.startswith(("off (HF_FOLD_KERNELS=0)", "no C compiler")):
            pytest.skip(f"C kernels not used here: {status}")
        pytest.fail(f"the C kernels should build here but did not: {status}")
    return built


def sender_cache(sender: Side, batch: list[str]):
    """The sender's prefill of ``batch``, right-padded as the pipeline expects."""
    inputs = sender.tokenizer(batch, return_tensors="pt", padding=True, padding_side="right")
    with torch.no_grad():
        return sender.model(**inputs, use_cache=True, cache=full_cache()).cache
