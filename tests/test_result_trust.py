"""A hand-off result stays valid and is keyed on everything that made it (issue: a result you can reuse and key on).

Each case here was a silent wrong result or a traceback: a result changed by ``generate``, a plan of another text
accepted, cache keys blind to dtypes, surprisal, the prompt and how a share was written, a select dropped without a
word, and bad input answered from deep inside torch. Every test runs the shipped tiny pair (real models, real
tokenizers, a real registry); the silent ones compare answers and cache contents.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.hub.registry import Registry
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.kvcache import cache_layers

from helpers import ROOT

SENDER, RECEIVER = "heterofold/tiny-llama-code", "heterofold/tiny-qwen-code"
REPO = "heterofold/tiny-llama-code-to-tiny-qwen-code"
TEXT = ("def add(a, b):\n    return a + b\n# the code of amber is 73914\n# the code of river is 50218\n"
        "# the code of stone is 11842\n")
QUESTIONS = ["# the code of amber is ", "# the code of river is ", "def sub(a, b):\n    return "]
GREEDY = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False)


@pytest.fixture(scope="module")
def model():
    return HeteroFoldModel.from_pretrained(SENDER, RECEIVER)


@pytest.fixture(scope="module")
def prefill(model):
    return model.prefill_sender(TEXT)


def snapshot(result) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(k.clone(), v.clone()) for k, v in cache_layers(result.cache)]


def same_cache(result, layers) -> bool:
    now = cache_layers(result.cache)
    return len(now) == len(layers) and all(torch.equal(k, k0) and torch.equal(v, v0)
                                           for (k, v), (k0, v0) in zip(now, layers))


@pytest.mark.parametrize("config", [TransferConfig(), TransferConfig(recompute=0.2, select="tail"),
                                    TransferConfig(recompute=0.2, select="statement")],
                         ids=["pure", "recomputed", "deferred"])
def test_three_questions_of_one_result_are_each_answered_as_from_a_fresh_transfer(model, prefill, config):
    result = model.transfer(prefill, TEXT, config=config)
    before, key = snapshot(result), result.cache_key()
    for question in [None, *QUESTIONS, None]:  # None: continue the context itself, no prompt
        reused = model.generate(result, prompt=question, **GREEDY)
        fresh = model.generate(model.transfer(prefill, TEXT, config=config), prompt=question, **GREEDY)
        assert reused.tolist() == fresh.tolist(), question
        assert same_cache(result, before) and result.cache_key() == key  # the result is as it was made


def test_a_plan_of_another_text_is_refused_like_the_text_itself(model, prefill):
    other = TEXT.replace("73914", "73915")
    with pytest.raises(PairMismatchError, match="Row 0 of the sender cache was computed from another text"):
        model.transfer(prefill, plan=model.plan(other))
    planned = model.transfer(prefill, plan=model.plan(TEXT))
    assert planned.cache_key() == model.transfer(prefill, TEXT).cache_key()


@pytest.mark.parametrize("config", [TransferConfig(), TransferConfig(recompute=0.2, select="tail")],
                         ids=["pure", "recomputed"])
def test_a_transfer_planned_from_the_prefills_tokens_is_the_transfer_planned_from_the_text(model, prefill, config):
    from_text = model.transfer(prefill, plan=model.plan(TEXT), config=config)  # tokenizes both sides afresh
    from_prefill = model.transfer(prefill, TEXT, config=config)  # reads the sender tokens the prefill carries
    assert same_cache(from_prefill, snapshot(from_text)) and from_prefill.cache_key() == from_text.cache_key()


def test_a_transfer_reads_the_prefills_tokens_and_refuses_offsets_outside_the_text(model, prefill):
    damaged = dataclasses.replace(prefill, offsets=[prefill.offsets[0] + len(TEXT)])
    with pytest.raises(HeteroFoldError, match=rf"sender tokens of text 0 .* do not lie within its {len(TEXT)} "
                                              "characters. Pass the prefill of these texts"):
        model.transfer(damaged, TEXT)
    with pytest.raises(HeteroFoldError, match="do not lie within"):
        model.plan(TEXT, prefill=damaged)
    with pytest.raises(PairMismatchError, match="Row 0 of the sender cache was computed from another text"):
        model.plan(TEXT.replace("73914", "73915"), prefill=prefill)  # a plan from a prefill of another text


def test_a_text_that_differs_in_one_character_is_shown_where_it_differs(model, prefill):
    with pytest.raises(PairMismatchError, match=rf"differ at character {len(TEXT)} of {len(TEXT)} \(cache\) and "
                                                rf"{len(TEXT) + 1} \(text\)"):
        model.transfer(prefill, TEXT + " ")


def test_the_cache_key_covers_the_dtypes_the_cache_was_made_in(prefill):
    plain = HeteroFoldModel.from_pretrained(SENDER, RECEIVER)
    keys = {"float32": plain.transfer(prefill, TEXT).cache_key()}
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        mapped = HeteroFoldModel.from_pretrained(SENDER, RECEIVER, map_dtype=dtype)
        result = mapped.transfer(prefill, TEXT)
        assert result.identity["dtypes"]["map"] == str(dtype)
        keys[str(dtype)] = result.cache_key()
    receiver_bf16 = HeteroFoldModel.from_pretrained(SENDER, RECEIVER, torch_dtype=torch.bfloat16)
    sender_bf16 = receiver_bf16.prefill_sender(TEXT)
    keys["receiver bf16"] = receiver_bf16.transfer(sender_bf16, TEXT).cache_key()
    assert len(set(keys.values())) == len(keys), keys


def test_the_cache_key_covers_what_a_recompute_read(model, prefill):
    with_surprisal = model.prefill_sender(TEXT, surprisal=True)
    for select in ("content", "content-tail"):
        config = TransferConfig(recompute=0.3, select=select)
        bare, scored = model.transfer(prefill, TEXT, config=config), model.transfer(with_surprisal, TEXT, config=config)
        assert bare.cache_key() != scored.cache_key()
        assert (bare.identity["read"], scored.identity["read"]) == ({"surprisal": False}, {"surprisal": True})
    asked = TransferConfig(recompute=0.2, select="statement")
    amber, river = (model.transfer(prefill, TEXT, config=asked, query=q) for q in QUESTIONS[:2])
    assert amber.cache_key() != river.cache_key()
    deferred = model.transfer(prefill, TEXT, config=asked).deferred.apply(QUESTIONS[0])
    assert deferred.cache_key() == amber.cache_key()  # made when the prompt came: the same cache, the same key


@pytest.mark.parametrize("one, other", [(1, 1.0), (np.float64(0.25), 0.25), (np.float32(0.5), 0.5)])
def test_one_share_written_two_ways_is_one_setting_and_one_key(model, prefill, one, other):
    a = model.transfer(prefill, TEXT, recompute=one, select="tail")
    b = model.transfer(prefill, TEXT, recompute=other, select="tail")
    assert a.config == b.config and a.cache_key() == b.cache_key()
    assert type(a.config.recompute) is float


@pytest.fixture
def recommending(tmp_path):
    """A copy of the registry whose tiny-pair version recommends statement@0.2 (the hub linked, not copied)."""
    shutil.copy(ROOT / "registry.json", tmp_path / "registry.json")
    (tmp_path / "hub").symlink_to(ROOT / "hub")
    registry = Registry.load(tmp_path / "registry.json")
    entry = next(e for e in registry.adapters if e.repo_id == REPO)
    registry.add_evaluation(repo_id=REPO, version=entry.versions[-1].version, evaluation={
        "task": "retrieval-handoff", "data": "bundled:unseen", "date": "2026-12-06", "commit": "0" * 40,
        "command": "test", "results": {"kept": 0.9}, "recommended": {"recompute": 0.2, "select": "statement",
                                                                     "repair_layers": 0}})
    registry.save(tmp_path / "registry.json")
    return tmp_path / "registry.json"


def test_a_select_without_a_share_takes_the_recommended_share_and_says_so(recommending, prefill):
    model = HeteroFoldModel.from_pretrained(SENDER, RECEIVER, registry=recommending)
    assert model.recommended == TransferConfig(recompute=0.2, select="statement")
    result = model.transfer(prefill, TEXT, select="statement-tail", query=QUESTIONS[0])
    assert result.config == TransferConfig(recompute=0.2, select="statement-tail")
    assert 0 < result.recompute["share"] <= 0.2
    scaled = model.transfer(prefill, TEXT, mapped_key_scale=0.6, query=QUESTIONS[0])
    assert scaled.config == TransferConfig(recompute=0.2, select="statement", mapped_key_scale=0.6)
    assert model.transfer(prefill, TEXT, recompute=0).config == TransferConfig()  # a share named: no recommendation
    assert model.transfer(prefill, TEXT, recompute=0).recompute is None


def test_a_select_without_a_share_or_a_recommendation_is_refused(model, prefill):
    assert model.recommended is None
    with pytest.raises(HeteroFoldError, match="select='statement-tail' chooses positions to recompute, but no share"):
        model.transfer(prefill, TEXT, select="statement-tail", query=QUESTIONS[0])
    with pytest.raises(HeteroFoldError, match="Pass config= or the fields recompute"):
        model.transfer(prefill, TEXT, config=TransferConfig(), recompute=0.1)


def test_a_result_for_another_receiver_is_refused_by_name(model, prefill):
    reverse = HeteroFoldModel.from_pretrained(RECEIVER, SENDER)
    result = model.transfer(prefill, TEXT)
    with pytest.raises(PairMismatchError, match=f"cache for receiver '{RECEIVER}'.*not for '{SENDER}'"):
        reverse.generate(result, prompt=QUESTIONS[0], **GREEDY)


@pytest.mark.parametrize("call, message", [
    (lambda m, p: m.transfer(p, TEXT, recompute=0.2, select="statement", query=""), "A query covers no characters"),
    (lambda m, p: m.generate(m.transfer(p, TEXT, recompute=0.2, select="statement"), prompt=""), "A prompt covers no characters"),
    (lambda m, p: m.transfer(p, TEXT, recompute=0.2, select="statement", query=123), "The query given is a int"),
    (lambda m, p: m.prefill_sender(123), "The context given is a int"),
    (lambda m, p: m.transfer(p, TEXT).cache_key(row=5), r"cache_key\(row=5\): this result holds 1 row"),
    (lambda m, p: m.transfer(p, TEXT, select="oracle", spans=[[(40, 10)]]), r"spans\[0\] holds \(40, 10\)"),
    (lambda m, p: m.transfer(p, TEXT, select="oracle", spans=[[(0, 10_000)]]), r"spans\[0\] holds \(0, 10000\)"),
    (lambda m, p: m.transfer(p, TEXT, recompute="0.1"), "recompute='0.1': pass a share"),
])
def test_bad_input_gets_a_clear_error(model, prefill, call, message):
    with pytest.raises(HeteroFoldError, match=message):
        call(model, prefill)
