"""The plumbing is exact before anything is learned: identical models + identity adapter == native prefill."""

import pytest
import torch

from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.transfer.forward import native_logits, transferred_logits
from heterofold_hub.errors import PairMismatchError
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.transfer.batches import prepare_batch
from heterofold_hub.evaluation.retrieval import RetrievalPrompt, decode_answers

from conftest import GEMMA3_WINDOW, tiny_model
from helpers import IdentityAdapter, small_calibration, texts

ARCHS = ["llama", "mistral", "qwen2", "gemma", "gemma3_text", "phi3", "gpt_neox", "gpt2"]


@pytest.mark.parametrize("arch", ARCHS)
def test_identity_transfer_reproduces_native_logits(arch, bpe):
    model = tiny_model(arch, len(bpe))
    side = Side.from_model(model, bpe)
    windows, calib = small_calibration(side, side)
    adapter = IdentityAdapter.for_calibration(calib)
    batch = prepare_batch(windows, side, side)
    with torch.no_grad():
        diff = (native_logits(side, batch) - transferred_logits(adapter, side, batch)).abs().max()
    assert diff < 1e-4


@pytest.mark.parametrize("arch", ["llama", "gpt_neox", "gemma3_text"])
def test_identity_pipeline_generates_like_native(arch, unigram):
    """Through the public pipeline, for a batch of texts of different lengths (left padding)."""
    model = tiny_model(arch, len(unigram))
    side = Side.from_model(model, unigram)
    _, calib = small_calibration(side, side)
    pipe = TransferPipeline(IdentityAdapter.for_calibration(calib), side, side)
    contexts = [texts()[0][:300], texts()[1][:180]]
    enc = unigram(contexts, padding=True, padding_side="right", return_tensors="pt")
    with torch.no_grad():  # a cache that keeps every position (Gemma 3's default cache drops sliding layers' past)
        sender_cache = model(**enc, use_cache=True, cache=full_cache()).cache
    result = pipe.transfer(sender_cache, contexts)
    if side.spec.layer_types is not None:  # the receiver cache has the receiver's own layer classes
        native_cache = model(**unigram(contexts[0], return_tensors="pt"), use_cache=True).cache
        assert [type(layer) for layer in result.cache.layers] == [type(layer) for layer in native_cache.layers]
        kept = [layer.keys.shape[2] for layer in result.cache.layers]
        assert kept == [GEMMA3_WINDOW - 1 if w else result.input_ids.shape[1] - 1 for w in side.spec.windows]
    new = pipe.generate(result, max_new_tokens=5, do_sample=False)
    for row, text in enumerate(contexts):
        ids = unigram(text, return_tensors="pt").input_ids
        native = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
        assert new[row].tolist() == native[0, ids.shape[1] :].tolist()


def test_gemma3_sender_default_cache(bpe, unigram):
    """A Gemma 3 sender's default cache keeps only the window of its sliding layers: an adapter that reads them is
    refused with the fix named; one fitted from the full-attention layers maps it exactly as a full cache."""
    sender = Side.from_model(tiny_model("gemma3_text", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("llama", len(unigram), layers=2, seed=2), unigram)
    _, calib = small_calibration(sender, receiver)
    context = texts()[3][:300]
    with torch.no_grad():
        default = sender.model(**bpe(context, return_tensors="pt"), use_cache=True).cache
        full = sender.model(**bpe(context, return_tensors="pt"), use_cache=True, cache=full_cache()).cache
    assert default.layers[0].keys.shape[2] == GEMMA3_WINDOW - 1 < full.layers[0].keys.shape[2]
    every = TransferPipeline(get_method("recolor").fit(calib), sender, receiver)
    with pytest.raises(PairMismatchError, match=r"sliding-window layer .*--sender-layers full"):
        every.transfer(default, context)
    only_full = TransferPipeline(get_method("recolor").fit(calib, sender_layers="full"), sender, receiver)
    assert {s for sources in only_full.adapter.config.layer_sources for s in sources} == {2}
    a, b = only_full.transfer(default, context).cache, only_full.transfer(full, context).cache
    assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values) for x, y in zip(a.layers, b.layers))


def test_retrieval_decoding_keeps_gemma3_sliding_layers(unigram):
    """Retrieval stacks the native and transferred caches of a batch into one ``generate``: the stacked cache keeps
    Gemma 3's sliding layers (contexts here are longer than its window), so an identity transfer answers exactly as
    native prefill does, prompt by prompt."""
    side = Side.from_model(tiny_model("gemma3_text", len(unigram)), unigram)
    _, calib = small_calibration(side, side)
    prompts = [RetrievalPrompt(prompt=text[:n], answer="12345", name="x", question=text[n - 20:n], facts_end=0,
                               fact_index=0, n_facts=1, tokens=0, target=0)
               for text, n in zip(texts(), (300, 240, 300))]
    assert min(len(unigram(p.prompt)["input_ids"]) for p in prompts) > GEMMA3_WINDOW
    out = decode_answers(side, side, {"identity": IdentityAdapter.for_calibration(calib)}, prompts, batch_size=3)
    assert out["identity"] == out["native"] and len(out["native"]) == 3
