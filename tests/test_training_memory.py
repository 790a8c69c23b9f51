"""What training holds in memory: sender features stored in fp16, calibration statistics freed once the starting
map is fitted (together 6 GB of the 16.9 GB a SmolLM2 -> Gemma 3 run on 320 windows peaked at), and training
batches prepared only after that (statistics beside batches were the 13 GB peak of a 400-window run)."""

import gc
import weakref

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import _stored, prepare_batch
from heterofold_hub.data.windows import make_windows
from heterofold_hub.methods import get_method
from heterofold_hub.methods.fitting import TRAINING_FEATURES_DTYPE, fit_methods
from heterofold_hub.transfer.forward import native_logits, transferred_logits
from heterofold_hub.trainers.calibrate import calibrate
from heterofold_hub.trainers.module import kl_to_teacher

from conftest import tiny_model
from helpers import small_calibration, texts


@pytest.fixture(scope="module")
def pair(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    return sender, receiver


def test_fp16_features_give_the_fp32_transfer(pair):
    sender, receiver = pair
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    adapter = get_method("kv-ridge").fit(calib)
    full, half = (prepare_batch(windows, sender, receiver, dtype=d) for d in (torch.float32, torch.float16))
    assert {x.dtype for kv in half.features for x in kv} == {torch.float16}
    with torch.no_grad():
        teacher = native_logits(receiver, full)
        kl_full = kl_to_teacher(transferred_logits(adapter, receiver, full), teacher)
        kl_half = kl_to_teacher(transferred_logits(adapter, receiver, half), teacher)
    # fp16 keeps ~3 significant digits per feature; on this near-perfect tiny fit the KL itself is ~1e-4, so its
    # change is judged relative to it (a 1e-3 bound failed at 1.5e-3 on another CPU's kernels). A wrong cast (bf16
    # storage, a lost scale) moves it by far more than a percent.
    assert abs(kl_half - kl_full) < 1e-2 * kl_full, (kl_full, kl_half)
    logits_full, logits_half = (transferred_logits(adapter, receiver, b) for b in (full, half))
    assert torch.allclose(logits_half, logits_full, atol=1e-2 * logits_full.abs().max().item())


def test_a_layer_that_would_overflow_fp16_stays_fp32():
    big = torch.tensor([[1.0, 7e4]])
    assert _stored(big, torch.float16).dtype == torch.float32
    assert _stored(torch.tensor([[1.0, 6e4]]), torch.float16).dtype == torch.float16


def test_statistics_are_freed_only_by_their_last_reader(pair):
    sender, receiver = pair
    windows = make_windows(texts(), receiver, context_tokens=32, continuation_tokens=8, max_windows=4)
    seen = []

    def heterofold(calib, **kwargs):  # the trainer's fitter, recording what the statistics held around it
        before = len(calib.sender)
        adapter = calibrate(calib, **kwargs)
        seen.append((before, len(calib.sender), {x.dtype for b in kwargs["batches"] for kv in b.features for x in kv}))
        return adapter

    options = {"heterofold": {"steps": 2, "init": "recolor"}}
    fit = dict(batch_size=2, progress=False, fitters={"heterofold": heterofold}, options=options)
    adapters = fit_methods(sender, receiver, ["heterofold", "kv-ridge"], windows, **fit)
    assert seen[-1][:2] == (3, 3) and set(adapters) == {"heterofold", "kv-ridge"}  # kv-ridge still read them
    fit_methods(sender, receiver, ["kv-ridge", "heterofold"], windows, **fit)
    assert seen[-1] == (3, 0, {TRAINING_FEATURES_DTYPE})


def test_training_batches_are_freed_when_the_fit_returns(pair):
    """Not at some later garbage collection: Lightning keeps them in reference cycles."""
    sender, receiver = pair
    windows = make_windows(texts(), receiver, context_tokens=32, continuation_tokens=8, max_windows=4)
    held = []

    def heterofold(calib, **kwargs):
        held.append(weakref.ref(kwargs["batches"][0].features[0][0]))
        return calibrate(calib, **kwargs)

    gc.disable()
    try:
        fit_methods(sender, receiver, ["heterofold"], windows, batch_size=2, progress=False,
                    fitters={"heterofold": heterofold}, options={"heterofold": {"steps": 2, "init": "recolor"}})
        assert held[0]() is None
    finally:
        gc.enable()


def test_training_batches_are_prepared_after_the_statistics_are_freed(pair):
    sender, receiver = pair
    windows = make_windows(texts(), receiver, context_tokens=32, continuation_tokens=8, max_windows=6)
    at_free = []

    def heterofold(calib, **kwargs):
        batches, free = kwargs["batches"], calib.free
        calib.free = lambda: (at_free.append((len(calib.sender), batches.prepared)), free())
        assert not batches.prepared and len(batches) == 3
        adapter = calibrate(calib, **kwargs)
        assert batches.prepared and calib.sender == []
        return adapter

    fit_methods(sender, receiver, ["heterofold"], windows, batch_size=2, progress=False,
                fitters={"heterofold": heterofold}, options={"heterofold": {"steps": 2, "init": "auto"}})
    assert at_free[0] == (3, False)  # the statistics went (auto's scoring reads batches) before any batch existed


def test_offloaded_features_give_the_same_fit_and_leave_no_files(pair, tmp_path):
    """``--offload-features``: the batches hold no features in memory, each read brings its own back from a
    safetensors file, the fit is the same to the bit, and the folder is gone when the fit returns."""
    sender, receiver = pair
    windows = make_windows(texts(), receiver, context_tokens=32, continuation_tokens=8, max_windows=6)
    seen = []

    def heterofold(calib, **kwargs):
        batches = kwargs["batches"]
        adapter = calibrate(calib, **kwargs)
        files = sorted(p.name for p in tmp_path.glob("hf-fold-features-*/*"))
        seen.append((files, [b.features is None for b in batches._batches], batches[1].features, batches[:2]))
        return adapter

    fit = dict(batch_size=2, progress=False, fitters={"heterofold": heterofold},
               options={"heterofold": {"steps": 3, "init": "auto"}})
    in_memory = fit_methods(sender, receiver, ["heterofold"], windows, **fit)["heterofold"]
    offloaded = fit_methods(sender, receiver, ["heterofold"], windows, offload_features=tmp_path, **fit)["heterofold"]

    files, held, features, first_two = seen[1]
    assert files == [f"batch-{i:06d}.safetensors" for i in range(3)] and held == [True] * 3
    assert seen[0][1] == [False] * 3  # in memory, as before
    for (k, v), (k0, v0) in zip(features, seen[0][2]):  # what a step reads is what was prepared
        assert k.dtype == TRAINING_FEATURES_DTYPE and torch.equal(k, k0) and torch.equal(v, v0)
    assert len(first_two) == 2 and first_two[1].features is not None
    assert list(tmp_path.iterdir()) == []
    for name, weight in in_memory.state_dict().items():
        assert torch.equal(weight, offloaded.state_dict()[name]), name


def test_offloaded_features_are_removed_when_the_fit_fails(pair, tmp_path):
    sender, receiver = pair
    windows = make_windows(texts(), receiver, context_tokens=32, continuation_tokens=8, max_windows=4)

    def failing(calib, **kwargs):
        kwargs["batches"][0]  # prepares them, writing the files
        assert len(list(tmp_path.glob("hf-fold-features-*/*.safetensors"))) == 2
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        fit_methods(sender, receiver, ["heterofold"], windows, batch_size=2, progress=False,
                    fitters={"heterofold": failing}, offload_features=tmp_path)
    assert list(tmp_path.iterdir()) == []
