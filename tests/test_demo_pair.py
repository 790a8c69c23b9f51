"""The shipped demo pair loads by id, transfers, and its context benefit is real."""

import pytest
import torch

from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.fidelity import evaluate
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.methods.fitting import fit_methods
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.kvcache import cache_layers
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill
from heterofold_hub.hub.resolve import resolve_adapter
from heterofold_hub.data.windows import make_windows
from heterofold_hub.zoo import DEMO_PAIR

from helpers import assert_same_cache, reference_layers


@pytest.fixture(scope="module")
def demo():
    return Side.load(DEMO_PAIR[0]), Side.load(DEMO_PAIR[1])


def test_demo_ids_load_by_name_offline(demo):
    llama, qwen = demo
    assert llama.spec.model_type == "llama" and qwen.spec.model_type == "qwen2"
    assert llama.name == DEMO_PAIR[0]


@pytest.mark.parametrize("direction", [0, 1])
def test_recolor_and_shipped_adapter_keep_context_benefit_on_heldout(demo, direction):
    """A small version of `hf-fold eval`: held-out windows, recolor fitted on the calibration split, and
    the registered HeteroFold adapter of this direction (trained by `hf-fold train` on the train split)."""
    sender, receiver = demo if direction == 0 else demo[::-1]
    cut = dict(context_tokens=256, continuation_tokens=32)
    calib = make_windows(read_texts("bundled:calib"), receiver, max_windows=16, **cut)
    heldout = make_windows(read_texts("bundled:heldout"), receiver, max_windows=24, **cut)
    adapters = fit_methods(sender, receiver, ["recolor"], calib, progress=False)
    shipped = resolve_adapter(sender, receiver)  # through registry.json and the embedded hub
    assert shipped.repo_id == f"{sender.name}-to-{receiver.name.split('/')[1]}" and shipped.version == "v1.1.0"
    adapters["heterofold"] = shipped.adapter
    result = evaluate(sender, receiver, adapters, heldout, progress=False)
    methods = result["methods"]
    assert result["benefit"] > 3 * result["benefit_se"]  # context helps, clearly above noise
    assert methods["recolor"]["recovered"] > 0.5
    assert methods["recolor"]["kl"] < 0.5 * methods["no-context"]["kl"]
    # Calibration on the receiver's logits beats moment matching alone on the same windows.
    assert methods["heterofold"]["kl"] < methods["recolor"]["kl"]
    assert methods["heterofold"]["recovered"] > 0.7


def error_against_native(result, native, prefix: int) -> list[float]:
    """Per receiver layer, the squared error of the transferred keys and values against the receiver's own cache
    of the same text, relative to that cache's squared norm, over the mapped positions (past the native
    ``prefix``). A map that outputs zeros scores exactly 1."""
    errors = []
    for (k, v), (nk, nv) in zip(cache_layers(result.cache), native, strict=True):
        for got, want in ((k, nk), (v, nv)):
            got, want = got[:, :, prefix:], want[:, :, prefix:]
            errors.append(float((got - want).pow(2).sum() / want.pow(2).sum()))
    return errors


def test_fitted_saved_loaded_adapter_transfers_as_fitted_then_generates(demo, tmp_path):
    """An adapter fitted here, saved and loaded back transfers with the values of the reference path (what training
    differentiates through) run on the adapter as fitted; a zeroed adapter has the same shapes and fails both
    value checks."""
    sender, receiver = demo
    calib = make_windows(read_texts("bundled:calib"), receiver, context_tokens=128, continuation_tokens=16, max_windows=8)
    fitted = fit_methods(sender, receiver, ["kv-ridge"], calib, progress=False)["kv-ridge"]
    loaded = PairAdapter.from_pretrained(fitted.save_pretrained(tmp_path / "kv-ridge"))
    pipe = TransferPipeline(loaded, sender, receiver)
    text = read_texts("bundled:heldout")[0][:1500]
    with torch.no_grad():
        cache = sender.model(**sender.tokenizer(text, return_tensors="pt"), use_cache=True).cache
    plan = pipe.plan(text)
    reference = reference_layers(TransferPipeline(fitted, sender, receiver), cache, plan)
    native = cache_layers(native_prefill(receiver, text).cache)
    prefix = plan.alignment.native_prefix

    result = pipe.transfer(cache, text)
    assert result.cache.layers[0].keys.shape[2] == len(receiver.tokenizer(text).input_ids) - 1
    assert_same_cache(result.cache, reference)
    # Held-out text, 8 short calibration windows: the ridge map's error against the receiver's own K/V is 0.13 to
    # 0.59 of their norm per layer (measured), where a zero map's is 1.
    assert max(error_against_native(result, native, prefix)) < 0.75
    shapes = [(layer.keys.shape, layer.values.shape) for layer in result.cache.layers]
    assert pipe.generate(result, max_new_tokens=8, min_new_tokens=8, do_sample=False).shape == (1, 8)

    with torch.no_grad():
        for weight in loaded.parameters():
            weight.zero_()
    zeroed = pipe.transfer(cache, text)
    assert [(layer.keys.shape, layer.values.shape) for layer in zeroed.cache.layers] == shapes
    with pytest.raises(AssertionError):
        assert_same_cache(zeroed.cache, reference)
    assert error_against_native(zeroed, native, prefix) == pytest.approx([1.0] * 2 * len(native))
