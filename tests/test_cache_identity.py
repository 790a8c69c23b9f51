"""A sender cache knows its texts; a transferred cache carries its identity (issue: caches that know their text)."""

import json

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import PairMismatchError
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill
from heterofold_hub.transfer.sender import prefill_sender

from conftest import tiny_model
from helpers import random_affine, texts

LONG, SHORT = texts()[1][:300], texts()[2][:120]


@pytest.fixture(scope="module")
def pair(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    return sender, receiver


def test_rows_in_another_order_are_refused_naming_the_row(pair):
    sender, receiver = pair
    pipe = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver)
    prefill = prefill_sender(sender, [LONG, SHORT])
    with pytest.raises(PairMismatchError, match=r"Row 0 .* \(it is the cache of text 1\)"):
        pipe.transfer(prefill, [SHORT, LONG])


def test_the_cache_of_another_text_of_the_same_length_is_refused(pair):
    sender, receiver = pair
    pipe = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver)
    prefill = prefill_sender(sender, [LONG])
    # another text of the same token count (the sample text is this project's source, so find one, don't assume it)
    edits = (LONG[:i] + c + LONG[i + 1:] for i in range(len(LONG) - 1, 0, -1) for c in "etaoinsr" if c != LONG[i])
    other = next(t for t in edits if prefill_sender(sender, [t]).input_ids.shape == prefill.input_ids.shape)
    with pytest.raises(PairMismatchError, match="Row 0 of the sender cache was computed from another text"):
        pipe.transfer(prefill, [other])
    assert pipe.transfer(prefill.cache, [other]).input_ids.shape[0] == 1  # a plain cache: only its shape is checked


def test_two_adapters_never_share_a_key_and_mapped_never_meets_native(pair):
    sender, receiver = pair
    prefill = prefill_sender(sender, [LONG, SHORT])
    one = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver, source="a@v1")
    two = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=4), sender, receiver, source="a@v1")
    r1, r2 = one.transfer(prefill, [LONG, SHORT]), two.transfer(prefill, [LONG, SHORT])
    assert r1.identity["adapter"]["weights_sha256"] != r2.identity["adapter"]["weights_sha256"]
    assert r1.cache_key() != r2.cache_key() and r1.cache_key(0) != r2.cache_key(0)
    assert one.transfer(prefill, [LONG, SHORT]).cache_key() == r1.cache_key()  # deterministic
    assert r1.cache_key(0) != r1.cache_key(1)  # rows of other text
    recomputed = one.transfer(prefill, [LONG, SHORT], config=TransferConfig(recompute=0.1, select="tail"))
    assert recomputed.identity["recompute"]["recompute"] == 0.1 and recomputed.cache_key() != r1.cache_key()
    native = native_prefill(receiver, [LONG, SHORT])
    assert native.identity["kind"] == "native" and r1.identity["kind"] == "mapped"
    assert native.identity["receiver_tokens"] == r1.identity["receiver_tokens"]  # same tokens ...
    assert native.cache_key(0) != r1.cache_key(0)  # ... yet never the same key
    want = torch.tensor(receiver.tokenizer(LONG).input_ids[:-1])
    from heterofold_hub.transfer.sender import token_digest

    assert r1.identity["receiver_tokens"][0] == token_digest(want.tolist())
    assert json.loads(json.dumps(r1.identity)) == r1.identity  # plain JSON
    assert r1.identity["sender"]["id"] == sender.name and r1.identity["receiver"]["id"] == receiver.name
