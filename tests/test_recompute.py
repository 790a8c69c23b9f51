"""Selective native recompute, the sender helper and the receiver reading its own prompt, on real tiny models.

The checks hold against the receiver's own prefill: recompute=1 gives native prefill's cache and continuation,
recompute=0 leaves the transfer untouched, a recomputed position's first-layer K/V is native (it depends on the token
alone there) while every other position keeps its mapped K/V.
"""

import dataclasses

import pytest
import torch

from heterofold_hub.base_models.arch import SUPPORTED_ARCHITECTURES
from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.fast import map_every_position
from heterofold_hub.transfer.kvcache import build_cache, cache_layers
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.recompute import apply_recompute, choose_before_map, selection_inputs, window_rows
from heterofold_hub.transfer.selection import (SELECTORS, ChunkStart, Deviation, Digits, SelectionInputs, choose,
                                              spread_back, spread_in_line)
from heterofold_hub.transfer.sender import prefill_sender

from conftest import GEMMA3_WINDOW, tiny_model
from helpers import random_affine, texts

ARCHS = sorted(SUPPORTED_ARCHITECTURES)
CONTEXTS = [texts()[1][:260], texts()[2][:140]]  # two rows of different lengths: left padding is exercised


def pipeline(receiver_arch: str, bpe, unigram) -> TransferPipeline:
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model(receiver_arch, len(unigram), layers=3, seed=2), unigram)
    return TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver)


def real_rows(result):
    """``[B, 1, T, 1]`` mask of a result's real (not padding) cached positions, to compare caches on."""
    return result.attention_mask[:, None, :-1, None].bool()


def layer_pairs(a, b):
    """Per layer, the two caches' keys and values over the positions both keep (a sliding layer its window)."""
    for (ka, va), (kb, vb) in zip(cache_layers(a.cache), cache_layers(b.cache), strict=True):
        kept = ka.shape[2]
        assert kb.shape[2] == kept
        yield (ka, kb), (va, vb), real_rows(a)[:, :, -kept:]


@pytest.mark.parametrize("arch", ARCHS)
def test_recompute_everything_is_native_prefill(arch, bpe, unigram):
    pipe = pipeline(arch, bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    native = native_prefill(pipe.receiver, CONTEXTS)
    full = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=1.0, select="tail"))
    assert full.recompute["share"] == 1.0
    if arch == "gemma3_text":  # the contexts run past the sliding window, so that path is the one tested
        assert len(unigram(CONTEXTS[0]).input_ids) > 4 * GEMMA3_WINDOW
    for (k, nk), (v, nv), rows in layer_pairs(full, native):
        for got, want in ((k, nk), (v, nv)):
            assert torch.allclose(got * rows, want * rows, atol=1e-4), (got * rows - want * rows).abs().max()
    kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert torch.equal(pipe.generate(full, prompt="\ndef f", **kw), pipe.generate(native, prompt="\ndef f", **kw))


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_recompute_zero_is_the_pure_transfer(arch, bpe, unigram):
    pipe = pipeline(arch, bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    pure = pipe.transfer(prefill.cache, CONTEXTS)
    zero = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.0, select="query"))
    assert zero.recompute is None
    for (k, k0), (v, v0), _ in layer_pairs(pure, zero):
        assert torch.equal(k, k0) and torch.equal(v, v0)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_partial_recompute_replaces_exactly_the_chosen_rows(arch, bpe, unigram):
    """At layer 0 a position's K/V depend on its token alone, so a recomputed row there is native exactly; every
    row not chosen keeps the mapped K/V it had, at every layer."""
    pipe = pipeline(arch, bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    pure = pipe.transfer(prefill, CONTEXTS)
    part = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.25, select="tail"))
    native = native_prefill(pipe.receiver, CONTEXTS)
    assert 0.2 < part.recompute["share"] < 0.3
    plan = pipe.plan(CONTEXTS)
    columns = plan.cache_tokens
    counts = plan.alignment.mapped_mask.sum(1)
    chosen = torch.zeros((len(CONTEXTS), columns), dtype=torch.bool)
    for row, count in enumerate(counts.tolist()):  # "tail": the last quarter of each row's mapped positions
        chosen[row, columns - round(count * 0.25):] = True
    for i, ((k, kp), (v, vp), rows) in enumerate(layer_pairs(part, pure)):
        kept = k.shape[2]
        picked = chosen[:, -kept:][:, None, :, None] & rows
        untouched = ~chosen[:, -kept:][:, None, :, None] & rows
        for got, mapped in ((k, kp), (v, vp)):
            assert torch.equal(got * untouched, mapped * untouched)
            assert not torch.allclose(got * picked, mapped * picked)
        if i == 0:
            nk, nv = (x[:, :, -kept:] for x in cache_layers(native.cache)[0])
            assert torch.allclose(k * picked, nk * picked, atol=1e-5)
            assert torch.allclose(v * picked, nv * picked, atol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_mapped_key_scale_scales_only_the_keys_left_mapped(arch, bpe, unigram):
    """After the recompute, the keys of rows still mapped are the unscaled ones times the factor; recomputed rows,
    native-prefix rows and every value are untouched (past Gemma 3's window too). On its own, the factor scales the
    pure transfer's mapped keys."""
    pipe = pipeline(arch, bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    plain = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.25, select="tail"))
    scaled = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.25, select="tail", mapped_key_scale=0.5))
    assert scaled.recompute == {**plain.recompute, "mapped_key_scale": 0.5}
    assert plain.recompute["mapped_key_scale"] == 1.0  # a record names every field of the config it ran
    plan = pipe.plan(CONTEXTS)
    columns = plan.cache_tokens
    left = plan.alignment.mapped_mask.clone()
    for row, count in enumerate(plan.alignment.mapped_mask.sum(1).tolist()):  # "tail": the last quarter recomputed
        left[row, columns - round(count * 0.25):] = False
    assert left.any() and (plan.alignment.native_mask & ~left).any()
    scaled_any = False
    for (k, kp), (v, vp), rows in layer_pairs(scaled, plain):
        kept = k.shape[2]
        mapped = left[:, -kept:][:, None, :, None] & rows
        other = ~left[:, -kept:][:, None, :, None] & rows
        assert torch.allclose(k * mapped, 0.5 * kp * mapped, atol=1e-6)  # a sliding window may hold none of them
        assert torch.equal(k * other, kp * other) and torch.equal(v, vp)
        scaled_any = scaled_any or bool((kp * mapped).abs().max() > 0)
    assert scaled_any
    pure, alone = pipe.transfer(prefill, CONTEXTS), pipe.transfer(prefill, CONTEXTS, config=TransferConfig(mapped_key_scale=2.0))
    assert alone.recompute["share"] == 0.0
    rows_mapped = plan.alignment.mapped_mask
    for (k, kp), (v, vp), rows in layer_pairs(alone, pure):
        kept = k.shape[2]
        mapped = rows_mapped[:, -kept:][:, None, :, None] & rows
        assert torch.allclose(k * mapped, 2.0 * kp * mapped, atol=1e-5)
        assert torch.equal(k * (rows & ~mapped), kp * (rows & ~mapped)) and torch.allclose(v * rows, vp * rows)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_a_recomputed_tail_is_the_receivers_own_continuation_of_the_mapped_rest(arch, bpe, unigram):
    """Recomputing the last positions is, at every layer, what the receiver computes when it reads those tokens after
    a cache holding the mapped rest: a plain transformers forward, with its own masks and sliding windows, is the
    reference for the recompute's masks, for a sliding layer reading only the columns its windows cover, and for the
    forward that stops after the last layer's K/V."""
    pipe = pipeline(arch, bpe, unigram)
    context = CONTEXTS[0]
    prefill = prefill_sender(pipe.sender, [context])
    part = pipe.transfer(prefill, [context], config=TransferConfig(recompute=0.25, select="tail"))
    plan = pipe.plan([context])
    columns, tail = plan.cache_tokens, round(int(plan.alignment.mapped_mask.sum()) * 0.25)
    if arch == "gemma3_text":  # the recomputed rows reach back past a window, and a window spans fewer columns
        assert tail > GEMMA3_WINDOW and columns > 2 * GEMMA3_WINDOW + tail
    mapped = map_every_position(pipe.adapter, plan, cache_layers(prefill.cache), dtype=torch.float32)
    rest = build_cache([(k[:, :, :columns - tail].clone(), v[:, :, :columns - tail].clone()) for k, v in mapped])
    ids = plan.alignment.receiver_ids[:, columns - tail:]
    with torch.no_grad():
        pipe.receiver.model(input_ids=ids, position_ids=torch.arange(columns - tail, columns)[None], cache=rest,
                            use_cache=True)
    for (k, v), layer in zip(cache_layers(part.cache), rest.layers, strict=True):
        kept = min(tail, k.shape[2])  # a sliding layer's final cache keeps only its window of the tail
        for got, want in ((k, layer.keys), (v, layer.values)):
            got, want = got[:, :, -kept:], want[:, :, -kept:]
            assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_sliding_layers_map_only_the_windows_a_recompute_reads(bpe, unigram):
    """Positions are chosen before the map, so a sliding layer maps only its final window and the window up to each
    chosen position: the cache equals the one recomputed over a working cache mapped at every row."""
    pipe = pipeline("gemma3_text", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    plan, layers = pipe.plan(CONTEXTS), cache_layers(prefill.cache)
    spans = [[(40, 43), (80, 83)], [(30, 33)]]  # a few tokens mid-context, far from the final window and each other
    settings = TransferConfig(select="oracle")
    selector, inputs = selection_inputs(settings, receiver=pipe.receiver, sender=pipe.sender, alignment=plan.alignment,
                                        sender_layers=layers, sender_mask=prefill.attention_mask, surprisal=None,
                                        query=None, spans=spans, texts=CONTEXTS)
    choice = choose_before_map(selector, inputs, plan.alignment, settings)
    windows = pipe.receiver.spec.windows
    needed = window_rows(choice, plan.cache_tokens, windows)
    run = lambda rows: apply_recompute(settings, selector, inputs, receiver=pipe.receiver, alignment=plan.alignment,  # noqa: E731
                                       working=map_every_position(pipe.adapter, plan, layers, dtype=torch.float32,
                                                                  needed=rows), choice=choice)
    (part, _), (full, again) = run(needed), run(None)
    kept = max(w for w in windows if w is not None)  # a sliding layer's cache keeps this many last positions
    assert torch.equal(choice.index, again.index)
    want = torch.zeros_like(needed)
    want[:, -kept:] = True
    for row in range(len(CONTEXTS)):
        for column in choice.index[row][choice.valid[row]].tolist():
            want[row, max(column - kept, 0):column + 1] = True  # what a chosen position attends to in a sliding layer
    assert torch.equal(needed, want) and not needed.all()  # rows are left unmapped
    for a, b in zip(cache_layers(build_cache(part, windows=windows, tokens=plan.cache_tokens)),
                    cache_layers(build_cache(full, windows=windows, tokens=plan.cache_tokens))):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, atol=1e-6), (x - y).abs().max()


def test_repair_layers_makes_the_first_layers_native_everywhere(bpe, unigram):
    pipe = pipeline("llama", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    native = native_prefill(pipe.receiver, CONTEXTS)
    repaired = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(repair_layers=2))
    pure = pipe.transfer(prefill, CONTEXTS)
    pairs = list(layer_pairs(repaired, native))
    for (k, nk), (v, nv), rows in pairs[:2]:
        assert torch.allclose(k * rows, nk * rows, atol=1e-5) and torch.allclose(v * rows, nv * rows, atol=1e-5)
    (k, k0), _, _ = list(layer_pairs(repaired, pure))[2]
    assert torch.equal(k, k0)  # the third layer stays mapped


@pytest.mark.parametrize("select", sorted(SELECTORS))
def test_every_strategy_runs_and_recomputes_its_share(select, bpe, unigram):
    pipe = pipeline("qwen2", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS, surprisal=True)
    spans = [[(10, 40)], [(0, 25)]]
    result = pipe.transfer(prefill, CONTEXTS, query="def answer():", spans=spans, config=TransferConfig(recompute=0.1, select=select))
    share = result.recompute["share"]
    assert (0 < share < 0.2) if select in ("oracle", "statement") else abs(share - 0.1) < 0.02  # the others fill it
    assert all(torch.isfinite(k).all() for k, _ in cache_layers(result.cache))


def test_bad_settings_name_the_value_and_the_choices(bpe, unigram):
    pipe = pipeline("llama", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    with pytest.raises(HeteroFoldError, match=r"recompute=1\.5.*\[0, 1\]"):
        pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=1.5))
    with pytest.raises(HeteroFoldError, match=r"select='nearest'.*content.*oracle"):
        pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.1, select="nearest"))
    for bad in (0, -0.5, True, "0.7"):
        with pytest.raises(HeteroFoldError, match=r"mapped_key_scale=.*\(0, 4\].*mapped_key_scale=0\.7"):
            pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.1, mapped_key_scale=bad))
    with pytest.raises(HeteroFoldError, match="3 queries for 2 contexts"):
        pipe.transfer(prefill, CONTEXTS, query=["a", "b", "c"], config=TransferConfig(recompute=0.1, select="query"))


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_a_recompute_that_reads_the_prompt_waits_for_it(arch, bpe, unigram):
    """Asked for without query=, a prompt-reading recompute keeps the pure transfer's cache until the receiver reads
    its prompt, then gives what transfer(..., query=prompt) gives: the same cache (past Gemma 3's window too) and
    the same continuation, whether it reuses the pure transfer's mapped rows or (that cache grown by generation)
    maps afresh. Without a prompt it continues from the pure transfer."""
    pipe = pipeline(arch, bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    prompt, kw = ["def answer():", "return"], dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    deferred = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.1, select="statement"))
    pure = pipe.transfer(prefill, CONTEXTS)
    assert deferred.recompute == {"recompute": 0.1, "select": "statement", "repair_layers": 0,
                                  "mapped_key_scale": 1.0, "share": 0.0, "deferred": True}
    for (k, k0), (v, v0), _ in layer_pairs(deferred, pure):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    asked = pipe.transfer(prefill, CONTEXTS, query=prompt, config=TransferConfig(recompute=0.1, select="statement"))
    applied = deferred.deferred.apply(prompt)
    assert applied.recompute == asked.recompute and 0 < asked.recompute["share"] <= 0.1
    for (k, k0), (v, v0), _ in layer_pairs(applied, asked):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    for (k, k0), (v, v0), _ in layer_pairs(deferred, pure):  # the pure cache it started from is left as it was
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert torch.equal(pipe.generate(deferred, prompt=prompt, **kw), pipe.generate(asked, prompt=prompt, **kw))
    again = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.1, select="statement"))
    assert torch.equal(pipe.generate(again, **kw), pipe.generate(pipe.transfer(prefill, CONTEXTS), **kw))
    for (k, k0), (v, v0), _ in layer_pairs(again.deferred.apply(prompt), asked):  # its cache grew: mapped afresh
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_keywords_runs_no_model_where_query_reads_the_senders_attention(bpe, unigram):
    """keywords chooses from the words alone, so it needs no sender model; attention does, and says so; with the
    sender unloaded, query falls back to the same words and chooses what keywords chooses."""
    pipe = pipeline("llama", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    pipe.sender = dataclasses.replace(pipe.sender, model=None)
    kw = dict(query="def answer():")
    keywords = pipe.transfer(prefill, CONTEXTS, **kw, config=TransferConfig(recompute=0.2, select="keywords"))
    query = pipe.transfer(prefill, CONTEXTS, **kw, config=TransferConfig(recompute=0.2, select="query"))
    for (k, k0), (v, v0), _ in layer_pairs(keywords, query):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert keywords.recompute["share"] == pytest.approx(0.2, abs=0.02)
    with pytest.raises(HeteroFoldError, match="not loaded"):
        pipe.transfer(prefill, CONTEXTS, **kw, config=TransferConfig(recompute=0.2, select="attention"))


def test_statement_takes_only_the_best_matching_lines_within_the_share(unigram):
    """Two fact lines sharing a word, and filler: statement scores the asked line's tokens (and no other line's, not
    the sibling's) above 0, and
    choose(positive_only=True) takes them and nothing else, however large the share, or fewer when the share is
    smaller than the line."""
    document = ("# the code of amber-falcon is 73914\n# the code of quiet-falcon is 50218\n"
                "def f(x):\n    return x + 1\n")
    encoded = unigram(document, return_offsets_mapping=True)
    ids, offsets = torch.tensor(encoded.input_ids), torch.tensor(encoded.offset_mapping)
    mapped = torch.ones(1, len(ids), dtype=torch.bool)
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=mapped, tokenizer=unigram,
                             query_ids=[torch.tensor(unigram("# recall: the code of amber-falcon is ",
                                                             add_special_tokens=False).input_ids)])
    scores = SELECTORS["statement"]().scores(inputs)[0]
    first_line = (offsets[:, 1] <= document.index("\n") + 1) & (offsets[:, 1] > offsets[:, 0])
    assert (scores[first_line] > 0).all() and (scores[~first_line] == 0).all()
    everything = choose(scores[None], mapped, 0.9, positive_only=True)
    assert everything.index[0].tolist() == first_line.nonzero().flatten().tolist()
    assert choose(scores[None], mapped, 0.9).index.shape[1] > first_line.sum()  # filling the share takes more
    assert choose(scores[None], mapped, 2 / len(ids), positive_only=True).index.shape[1] == 2


def test_statement_tail_takes_the_asked_line_then_the_most_recent_positions(unigram):
    """statement-tail: the asked line first (not its sibling), then the share filled from the end of the context."""
    document = ("# the code of amber-falcon is 73914\n# the code of quiet-falcon is 50218\n"
                "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n")
    encoded = unigram(document, return_offsets_mapping=True)
    ids, offsets = torch.tensor(encoded.input_ids), torch.tensor(encoded.offset_mapping)
    mapped = torch.ones(1, len(ids), dtype=torch.bool)
    asked = torch.tensor(unigram("# recall: the code of amber-falcon is ", add_special_tokens=False).input_ids)
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=mapped, tokenizer=unigram, query_ids=[asked])
    first_line = ((offsets[:, 1] <= document.index("\n") + 1) & (offsets[:, 1] > offsets[:, 0])).nonzero().flatten()
    extra = 5
    chosen = choose(SELECTORS["statement-tail"]().scores(inputs), mapped, (len(first_line) + extra) / len(ids))
    assert chosen.index[0].tolist() == first_line.tolist() + list(range(len(ids) - extra, len(ids)))
    only_line = choose(SELECTORS["statement-tail"]().scores(inputs), mapped, 3 / len(ids))
    assert set(only_line.index[0].tolist()) < set(first_line.tolist())  # a share below the line: the line's tokens


def test_content_tail_takes_half_its_share_from_the_fact_lines_and_half_from_the_end(unigram):
    """content-tail, query-agnostic: the lines holding digits (both facts, no question needed) and the most recent
    positions, about half the share each, and no filler from the middle."""
    document = ("# the code of amber-falcon is 73914\n# the code of quiet-falcon is 50218\n"
                + "def f(x):\n    return x + y\n" * 6 + "def g(y):\n    return y\n")
    encoded = unigram(document, return_offsets_mapping=True)
    ids, offsets = torch.tensor(encoded.input_ids), torch.tensor(encoded.offset_mapping)
    mapped = torch.ones(1, len(ids), dtype=torch.bool)
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=mapped, tokenizer=unigram)
    facts = ((offsets[:, 1] <= document.index("def") ) & (offsets[:, 1] > offsets[:, 0])).nonzero().flatten().tolist()
    k = len(facts)
    assert 2 * k < len(ids) - 4  # room for filler between the two halves
    chosen = choose(SELECTORS["content-tail"]().scores(inputs), mapped, 2 * k / len(ids)).index[0].tolist()
    assert chosen == facts + list(range(len(ids) - k, len(ids)))
    # A smaller share keeps the balance: the first fact line's digit peak and the last positions.
    small = choose(SELECTORS["content-tail"]().scores(inputs), mapped, 6 / len(ids)).index[0].tolist()
    assert small[-3:] == list(range(len(ids) - 3, len(ids))) and all(i in facts for i in small[:3])


def test_choose_takes_each_rows_top_share_in_position_order():
    scores = torch.tensor([[0.0, 5.0, 1.0, 4.0, 3.0, 2.0], [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]])
    mapped = torch.tensor([[False, True, True, True, True, True], [False, False, False, True, True, True]])
    choice = choose(scores, mapped, 0.4)  # row 0: 5 mapped -> 2 (cols 1, 3); row 1: 3 mapped -> 1 (col 3)
    assert choice.index[0].tolist() == [1, 3] and choice.valid[0].tolist() == [True, True]
    assert choice.index[1][choice.valid[1]].tolist() == [3]
    assert choice.share == pytest.approx(3 / 8)
    assert spread_back(torch.tensor([[0.0, 0.0, 0.0, 7.0, 0.0]]), 2).tolist() == [[0.0, 7.0, 7.0, 7.0, 0.0]]


def test_prefill_sender_surprisal_is_the_models_own(bpe):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=2, seed=1), bpe)
    prefill = prefill_sender(sender, CONTEXTS, surprisal=True)
    ids = prefill.input_ids
    logits = sender.model(input_ids=ids, attention_mask=prefill.attention_mask).logits.float()
    want = -logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1) * prefill.attention_mask[:, 1:]
    assert torch.allclose(prefill.surprisal[:, 1:], want, atol=1e-4)
    assert prefill.surprisal[:, 0].eq(0).all()
    assert prefill.row_ids(1) == bpe(CONTEXTS[1]).input_ids  # the special prefix included, no padding


def test_prompts_of_different_lengths_answer_as_each_row_alone(bpe, unigram):
    """Batched generate(prompt=) with prompts of different token counts equals each row transferred alone."""
    pipe = pipeline("gemma3_text", bpe, unigram)
    prompts = ["\ndef f(x):", "\n# a much longer question about the context above"]
    assert len(set(len(unigram(p, add_special_tokens=False).input_ids) for p in prompts)) == 2
    kw = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False)
    batched = pipe.generate(pipe.transfer(prefill_sender(pipe.sender, CONTEXTS), CONTEXTS), prompt=prompts, **kw)
    for row, (context, prompt) in enumerate(zip(CONTEXTS, prompts)):
        alone = pipe.generate(pipe.transfer(prefill_sender(pipe.sender, [context]), [context]), prompt=prompt, **kw)
        assert torch.equal(batched[row], alone[0])


def test_spread_in_line_stays_on_the_peaks_line():
    score = torch.tensor([[0.0, 0.0, 9.0, 0.0, 0.0, 0.0]])
    lines = torch.tensor([[0, 0, 0, 0, 1, 1]])
    assert spread_in_line(score, lines, 2).tolist() == [[9.0, 9.0, 9.0, 9.0, 0.0, 0.0]]
    two = torch.tensor([[1.0, 0.0, 1.0, 0.0, 5.0, 0.0]])
    assert spread_in_line(two, lines, 1).tolist() == [[1.0, 2.0, 1.0, 1.0, 5.0, 5.0]]


@pytest.mark.parametrize("select", ["keywords", "statement", "query", "content"])
def test_query_and_content_find_the_asked_fact_line(select, unigram):
    """On a document whose one stated fact sits mid-filler, the top-scored positions are that line's tokens."""
    filler = texts()[3][:600]
    fact = "# the code of amber-falcon is 73914\n"
    cut = filler.index("\n", 300) + 1
    document = filler[:cut] + fact + filler[cut:]
    ids, offsets = (torch.tensor(x) for x in (lambda e: (e.input_ids, e.offset_mapping))(
        unigram(document, return_offsets_mapping=True)))
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=torch.ones(1, len(ids), dtype=torch.bool),
                             tokenizer=unigram,
                             query_ids=[torch.tensor(unigram("# recall: the code of amber-falcon is ",
                                                             add_special_tokens=False).input_ids)])
    scores = SELECTORS[select]().scores(inputs)[0]
    in_line = (offsets[:, 0] >= cut) & (offsets[:, 1] <= cut + len(fact)) & (offsets[:, 1] > offsets[:, 0])
    top = scores.topk(12).indices  # this character-level tokenizer spends 26 tokens on the line
    assert in_line[top].all(), [document[a:b] for a, b in offsets[top].tolist()]


def test_chunk_start_takes_the_first_position_of_every_chunk_of_its_knob(unigram):
    """chunk-start with chunk=k: a share of one position per chunk takes exactly the first mapped position of each
    k-token chunk (counted from the first mapped position), for the default knob and another."""
    ids = torch.tensor(unigram("def f(x):\n    return x + 1\n" * 8).input_ids)
    mapped = torch.ones(1, len(ids), dtype=torch.bool)
    mapped[0, :3] = False  # the native prefix is never chosen; chunks count from the first mapped position
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=mapped, tokenizer=unigram)
    for selector in (ChunkStart(), ChunkStart(chunk=8)):
        starts = list(range(3, len(ids), selector.chunk))
        chosen = choose(selector.scores(inputs), mapped, len(starts) / (len(ids) - 3))
        assert chosen.index[0].tolist() == starts, selector


def test_digits_takes_digit_tokens_and_the_span_before_each(unigram):
    """digits: each token holding a digit and the span_before tokens before it, nothing else (no surprisal)."""
    document = "x = 1\n" + "def f(a):\n    return a\n" * 3 + "y = 42\n"
    ids = torch.tensor(unigram(document).input_ids)
    mapped = torch.ones(1, len(ids), dtype=torch.bool)
    inputs = SelectionInputs(receiver_ids=ids[None], mapped_mask=mapped, tokenizer=unigram)
    digit = [i for i, t in enumerate(ids.tolist()) if any(c.isdigit() for c in unigram.decode([t]))]
    for span in (4, 1):
        want = sorted({j for i in digit for j in range(max(i - span, 0), i + 1)})
        chosen = choose(Digits(span_before=span).scores(inputs), mapped, 0.99, positive_only=True)
        assert chosen.index[0].tolist() == want, span


def test_deviation_ranks_positions_by_how_far_the_mapped_first_layer_is_from_native():
    """deviation: the position whose mapped first-layer K/V is furthest (relatively) from native ranks first."""
    torch.manual_seed(0)
    native = [(torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8))]
    off = torch.zeros(1, 2, 10, 8)
    off[:, :, 6] = 3.0  # position 6 far off, position 2 a little
    off[:, :, 2] = 0.5
    mapped = [(native[0][0] + off, native[0][1] + off)]
    inputs = SelectionInputs(receiver_ids=torch.zeros(1, 10, dtype=torch.long), mapped_mask=torch.ones(1, 10, dtype=torch.bool),
                             tokenizer=None, native_first=native, mapped_first=mapped)
    scores = Deviation().scores(inputs)[0]
    assert scores.argsort(descending=True)[:2].tolist() == [6, 2] and scores[[0, 1, 3]].abs().max() < 1e-6


def test_a_selector_is_a_dataclass_of_its_knobs_and_its_name_means_the_defaults(bpe, unigram):
    """A selector's knobs are validated fields; with default knobs it is its name (one setting, one key), with
    others it is recorded with them, changes the cache key and round-trips through the record."""
    assert TransferConfig(select=ChunkStart()) == TransferConfig(select="chunk-start")
    odd = TransferConfig(recompute=0.2, select=ChunkStart(chunk=8))
    assert odd.to_dict()["select"] == {"name": "chunk-start", "chunk": 8}
    assert TransferConfig.from_dict(odd.to_dict()) == odd
    with pytest.raises(HeteroFoldError, match=r"ChunkStart\(chunk=0\): pass a number >= 1 \(default 64\)"):
        ChunkStart(chunk=0)
    with pytest.raises(HeteroFoldError, match="ChunkStart has no knob"):
        TransferConfig.from_dict({"recompute": 0.1, "select": {"name": "chunk-start", "size": 3}})
    pipe = pipeline("qwen2", bpe, unigram)
    prefill = prefill_sender(pipe.sender, CONTEXTS)
    default = pipe.transfer(prefill, CONTEXTS, config=TransferConfig(recompute=0.2, select="chunk-start"))
    knobbed = pipe.transfer(prefill, CONTEXTS, config=odd)
    assert knobbed.recompute["select"] == {"name": "chunk-start", "chunk": 8}
    assert default.cache_key() != knobbed.cache_key()
    assert any(not torch.equal(a.keys, b.keys) for a, b in zip(default.cache.layers, knobbed.cache.layers))


def test_a_recompute_leaves_the_receivers_own_attention_as_it_was(bpe, unigram):
    """The recompute's forward attends to grouped KV heads in place (its forward ends by an exception after the
    last layer's K/V); the receiver's own attention is back for whatever runs next."""
    pipe = pipeline("llama", bpe, unigram)
    config = pipe.receiver.model.config
    assert config._attn_implementation == "sdpa"
    pipe.transfer(prefill_sender(pipe.sender, CONTEXTS), CONTEXTS, config=TransferConfig(recompute=0.25, select="tail"))
    assert config._attn_implementation == "sdpa"
