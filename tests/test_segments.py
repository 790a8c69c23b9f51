"""A receiver cache made of native and mapped segments (issue: agents), held to references: native segments equal the
receiver's own prefill, one mapped segment equals today's transfer, a mapped segment after others sits at the right
positions (identity map, layer 0), turn-by-turn appends equal composing at once, and several senders share a cache."""

from __future__ import annotations

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.kvcache import cache_layers
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill
from heterofold_hub.transfer.segments import Mapped, Native, append, compose
from heterofold_hub.transfer.sender import prefill_sender

from conftest import GEMMA3_WINDOW, tiny_model
from helpers import IdentityAdapter, random_affine

FIRST = "def add(a, b):\n    return a + b\n"
SECOND = "def sub(a, b):\n    return a - b\n"
THIRD = "# the code of amber is 73914\n"


def joins(tokenizer, *texts) -> bool:
    """Whether the receiver tokenizes the texts laid end to end as their tokenizations laid end to end."""
    parts = tokenizer(texts[0]).input_ids + sum((tokenizer(t, add_special_tokens=False).input_ids for t in texts[1:]), [])
    return parts == tokenizer("".join(texts)).input_ids


def same(result, layers, *, exact: bool, atol: float = 2e-5) -> bool:
    close = torch.equal if exact else (lambda a, b: a.shape == b.shape and torch.allclose(a, b, atol=atol))
    return all(close(k, k0) and close(v, v0) for (k, v), (k0, v0) in zip(cache_layers(result.cache), layers, strict=True))


@pytest.fixture(scope="module")
def model():
    return HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")


@pytest.fixture(scope="module", params=["qwen2", "gemma3_text"])
def identity(request, bpe):
    """A receiver mapped into itself through the identity: a mapped row is the receiver's own K/V of its token, computed
    without the segments before it. Gemma 3 with a sliding window shorter than the test texts."""
    model = tiny_model(request.param, len(bpe), layers=2, seed=2)
    side = Side.from_model(model, bpe)  # byte-level: texts split at line ends tokenize as their parts
    return TransferPipeline(IdentityAdapter.for_side(side.name, side.spec), side, side)


def test_native_segments_are_the_receivers_own_prefill(identity):
    texts = (FIRST, SECOND * 3, THIRD)  # the middle one is longer than the tiny Gemma 3's window
    assert joins(identity.receiver.tokenizer, *texts)
    composed = compose(identity, [Native(t) for t in texts])
    native = native_prefill(identity.receiver, "".join(texts))
    assert composed.input_ids.tolist() == native.input_ids.tolist()
    assert same(composed, cache_layers(native.cache), exact=False)
    assert [type(layer) for layer in composed.cache.layers] == [type(layer) for layer in native.cache.layers]
    kw = dict(prompt="def ", max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert TransferPipeline.continue_from(identity.receiver.model, composed, tokenizer=identity.receiver.tokenizer,
                                          **kw).tolist() == TransferPipeline.continue_from(
        identity.receiver.model, native, tokenizer=identity.receiver.tokenizer, **kw).tolist()


def test_one_mapped_segment_is_todays_transfer_bit_for_bit(model):
    prefill = model.prefill_sender(FIRST + SECOND)
    composed = model.compose([Mapped(prefill)])
    assert same(composed, cache_layers(model.transfer(prefill, FIRST + SECOND, recompute=0).cache), exact=True)
    assert composed.identity["kind"] == "segments" and composed.segments[0]["segment"] == "mapped"


def test_a_mapped_segment_after_native_text_sits_at_its_positions(identity):
    """Layer 0's K/V of a token do not depend on the tokens before it, only on its position: through the identity map
    a mapped segment after native text has exactly the receiver's own layer-0 K/V of the whole text (past Gemma 3's
    window too), so its keys were rotated at the positions the segment takes."""
    before, handed = FIRST + SECOND * 2, THIRD + SECOND
    assert joins(identity.receiver.tokenizer, before, handed)
    prefill = prefill_sender(identity.sender, handed)
    composed = compose(identity, [Native(before), Mapped(prefill)])
    native = native_prefill(identity.receiver, before + handed)
    assert composed.input_ids.tolist() == native.input_ids.tolist()
    (k, v), (k0, v0) = cache_layers(composed.cache)[0], cache_layers(native.cache)[0]
    assert k.shape == k0.shape and torch.allclose(k, k0, atol=2e-5) and torch.allclose(v, v0, atol=2e-5)


def test_a_later_segment_recomputed_whole_is_the_receivers_own_prefill(identity):
    """recompute=1 in a mapped segment after native text: each of its rows recomputed by the receiver, reading what
    came before, gives the receiver's own prefill of the whole text (every layer, past Gemma 3's window)."""
    before, handed = FIRST + SECOND * 2, THIRD + SECOND
    prefill = prefill_sender(identity.sender, handed)
    composed = compose(identity, [Native(before), Mapped(prefill, config=TransferConfig(recompute=1.0, select="tail"))])
    native = native_prefill(identity.receiver, before + handed)
    assert same(composed, cache_layers(native.cache), exact=False, atol=1e-4)
    pure = compose(identity, [Native(before), Mapped(prefill)])
    assert not same(pure, cache_layers(native.cache), exact=False, atol=1e-4)  # the pure map is not native past layer 0
    assert composed.segments[1]["share"] == 1.0 and composed.cache_key() != pure.cache_key()


def test_a_later_segment_recomputes_the_asked_line_and_appending_equals_composing(model):
    document = "def add(a, b):\n    return a + b\n# the code of amber is 73914\n# the code of river is 50218\n"
    question = "# the code of river is "
    asked = TransferConfig(recompute=0.3, select="statement")
    turns = [Native(FIRST), Mapped(model.prefill_sender(document))]
    at_once = model.compose(turns, config=asked, query=question)
    step = model.append(model.compose(turns[:1]), turns[1], config=asked, query=question)
    assert same(step, cache_layers(at_once.cache), exact=True)
    assert 0 < at_once.segments[1]["share"] <= 0.3 and "query" in at_once.segments[1]["read"]
    other = model.compose(turns, config=asked, query="# the code of amber is ")
    assert other.cache_key() != at_once.cache_key()
    with pytest.raises(HeteroFoldError, match="pass query="):
        model.compose(turns, config=asked)


def test_turn_by_turn_appends_equal_composing_at_once_and_leave_earlier_results_alone(model):
    turns = [Native(FIRST), Mapped(model.prefill_sender(SECOND)), Native(THIRD), Mapped(model.prefill_sender(FIRST))]
    at_once = model.compose(turns)
    step = model.compose(turns[:1])
    for turn in turns[1:]:
        before = [(k.clone(), v.clone()) for k, v in cache_layers(step.cache)]
        grown = model.append(step, turn)
        assert same(step, before, exact=True)  # the earlier result is as it was
        step = grown
    assert step.input_ids.tolist() == at_once.input_ids.tolist()
    assert same(step, cache_layers(at_once.cache), exact=True) and step.cache_key() == at_once.cache_key()
    assert [part["segment"] for part in step.segments] == ["native", "mapped", "native", "mapped"]


def test_two_senders_share_one_receiver_cache_each_through_its_own_adapter(bpe, unigram):
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    planner = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    coder = Side.from_model(tiny_model("mistral", len(bpe), layers=2, seed=3), bpe)
    via_planner = TransferPipeline(random_affine(planner.model, receiver.model, 2, seed=3), planner, receiver,
                                   source="planner@v1")
    via_coder = TransferPipeline(random_affine(coder.model, receiver.model, 2, seed=4), coder, receiver,
                                 source="coder@v1")
    notes, code = prefill_sender(planner, SECOND), prefill_sender(coder, THIRD)
    both = compose(via_planner, [Native(FIRST), Mapped(notes), Mapped(code, via=via_coder)])
    assert [p.get("adapter", {}).get("source") for p in both.segments] == [None, "planner@v1", "coder@v1"]
    alone = compose(via_planner, [Native(FIRST), Mapped(notes)])
    grown = append(via_planner, alone, Mapped(code, via=via_coder))
    assert same(grown, cache_layers(both.cache), exact=True)
    with pytest.raises(PairMismatchError, match="made by .tiny-mistral-3.*but the sender here is .tiny-llama-1."):
        compose(via_planner, [Native(FIRST), Mapped(notes), Mapped(code)])  # the coder's cache, the planner's map


def test_bad_segments_are_refused_clearly(model, bpe, unigram):
    prefill = model.prefill_sender(SECOND)
    with pytest.raises(HeteroFoldError, match="No segments given"):
        model.compose([])
    with pytest.raises(HeteroFoldError, match="native segment covers no characters"):
        Native("")
    with pytest.raises(HeteroFoldError, match="Segment 1 is a str"):
        model.compose([Native(FIRST), SECOND])
    with pytest.raises(HeteroFoldError, match="A mapped segment is one text; this prefill holds 2"):
        Mapped(model.prefill_sender([FIRST, SECOND]))
    with pytest.raises(HeteroFoldError, match="compose\\(\\) \\(or of append\\(\\)\\)"):
        model.append(model.transfer(prefill, SECOND), Native(THIRD))
    other = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=5), unigram)
    elsewhere = TransferPipeline(random_affine(model.sender.model, other.model, 2, seed=3), model.sender, other)
    with pytest.raises(PairMismatchError, match="Segment 1 is mapped by an adapter into"):
        model.compose([Native(FIRST), Mapped(prefill, via=elsewhere)])
    with pytest.raises(PairMismatchError, match="This result is a cache for receiver"):
        append(elsewhere, model.compose([Native(FIRST)]), Native(THIRD))


def test_a_later_segments_key_covers_its_map_dtype(model):
    narrow = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code",
                                             map_dtype=torch.bfloat16)
    prefill = model.prefill_sender(SECOND)
    plain, bf16 = (m.compose([Native(FIRST), Mapped(prefill)]) for m in (model, narrow))
    assert bf16.segments[1]["dtypes"]["map"] == "torch.bfloat16" and plain.cache_key() != bf16.cache_key()
    with pytest.raises(HeteroFoldError, match="a cache needs one token to hold and one to continue from"):
        model.compose([Native("d")])
