"""The shipped demo pair loads by id, transfers, and its context benefit is real."""

import pytest
import torch

from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.fidelity import evaluate
from heterofold_hub.methods.fitting import fit_methods
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.hub.resolve import resolve_adapter
from heterofold_hub.data.windows import make_windows
from heterofold_hub.zoo import DEMO_PAIR


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


def test_transfer_then_generate_on_demo_pair(demo):
    sender, receiver = demo
    calib = make_windows(read_texts("bundled:calib"), receiver, context_tokens=128, continuation_tokens=16, max_windows=8)
    pipe = TransferPipeline(fit_methods(sender, receiver, ["kv-ridge"], calib, progress=False)["kv-ridge"], sender, receiver)
    text = read_texts("bundled:heldout")[0][:1500]
    with torch.no_grad():
        cache = sender.model(**sender.tokenizer(text, return_tensors="pt"), use_cache=True).cache
    result = pipe.transfer(cache, text)
    assert result.cache.layers[0].keys.shape[2] == len(receiver.tokenizer(text).input_ids) - 1
    assert pipe.generate(result, max_new_tokens=8, min_new_tokens=8, do_sample=False).shape == (1, 8)
