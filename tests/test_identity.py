"""The plumbing is exact before anything is learned: identical models + identity adapter == native prefill."""

import pytest
import torch

from heterofold_hub.forward import native_logits, transferred_logits
from heterofold_hub.models import Side
from heterofold_hub.pipeline import TransferPipeline
from heterofold_hub.windows import prepare_batch

from conftest import tiny_model
from helpers import IdentityAdapter, small_calibration, texts

ARCHS = ["llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "gpt2"]


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


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_identity_pipeline_generates_like_native(arch, unigram):
    """Through the public pipeline, for a batch of texts of different lengths (left padding)."""
    model = tiny_model(arch, len(unigram))
    side = Side.from_model(model, unigram)
    _, calib = small_calibration(side, side)
    pipe = TransferPipeline(IdentityAdapter.for_calibration(calib), side, side)
    contexts = [texts()[0][:300], texts()[1][:180]]
    enc = unigram(contexts, padding=True, padding_side="right", return_tensors="pt")
    with torch.no_grad():
        sender_cache = model(**enc, use_cache=True).cache
    result = pipe.transfer(sender_cache, contexts)
    new = pipe.generate(result, max_new_tokens=5, do_sample=False)
    for row, text in enumerate(contexts):
        ids = unigram(text, return_tensors="pt").input_ids
        native = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
        assert new[row].tolist() == native[0, ids.shape[1] :].tolist()
