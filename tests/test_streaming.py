"""The fast transfer path (plan + layer stream) against the reference path, its memory bound, and its API."""

from dataclasses import replace

import pytest
import torch

from heterofold_hub.transfer import kernels
from heterofold_hub.evaluation.bench import text_of_length
from heterofold_hub.data.texts import read_texts
from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.transfer.kvcache import build_cache, cache_layers
from heterofold_hub.evaluation.memory import peak_extra_bytes
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.hub.resolve import resolve_adapter
from heterofold_hub.transfer.fast import LayerStream, map_cache
from heterofold_hub.zoo import DEMO_PAIR

from conftest import tiny_model
from helpers import assert_same_cache, random_affine, reference_layers, sender_cache, small_calibration, texts


@pytest.fixture(scope="module", params=["l2q", "q2l"])
def demo(request):
    """(pipeline, sender) of a shipped demo adapter, in each direction."""
    names = DEMO_PAIR if request.param == "l2q" else DEMO_PAIR[::-1]
    sender, receiver = Side.load(names[0]), Side.load(names[1])
    return TransferPipeline(resolve_adapter(sender, receiver).adapter, sender, receiver), sender


@pytest.mark.parametrize("chunk_tokens", [None, 50])
def test_fast_path_equals_reference_on_a_padded_batch(demo, chunk_tokens, path):
    pipe, sender = demo
    batch = [texts()[0][:1500], texts()[1][:600]]  # different lengths: left-padded receiver rows
    cache, plan = sender_cache(sender, batch), pipe.plan(batch)
    assert plan.attention_mask[1, 0] == 0  # the short row really is padded
    fast = map_cache(pipe.adapter, plan, cache_layers(cache), dtype=torch.float32, chunk_tokens=chunk_tokens)
    assert_same_cache(fast, reference_layers(pipe, cache, plan))


@pytest.mark.parametrize("sender_arch,receiver_arch", [("gpt_neox", "phi3"), ("phi3", "llama"), ("gpt2", "qwen2"), ("llama", "gpt2"),
                                                        ("gemma3_text", "llama"), ("llama", "gemma3_text")])
def test_fast_path_equals_reference_with_partial_or_no_rotary(sender_arch, receiver_arch, bpe, unigram, path):
    sender = Side.from_model(tiny_model(sender_arch, len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model(receiver_arch, len(unigram), layers=2, seed=2), unigram)
    _, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    pipe = TransferPipeline(get_method("recolor").fit(calib), sender, receiver)
    batch = [texts()[2][:300], texts()[4][:40]]  # the short row fits in a tiny Gemma 3 window, padding and all
    cache, plan = sender_cache(sender, batch), pipe.plan(batch)
    for chunk_tokens in (None, 16):
        fast = map_cache(pipe.adapter, plan, cache_layers(cache), dtype=torch.float32, chunk_tokens=chunk_tokens)
        assert_same_cache(fast, reference_layers(pipe, cache, plan))


def test_fast_path_equals_reference_for_a_map_that_does_not_fold(path):
    """Dense Latent's MLP cannot be split by source, so it runs through ``map_layer`` on the gathered inputs."""
    bpe_sender = Side.load(DEMO_PAIR[0])
    receiver = Side.load(DEMO_PAIR[1])
    _, calib = small_calibration(bpe_sender, receiver, context_tokens=32, windows=4)
    adapter = get_method("dense-latent").fit(calib, hidden=32, mse_steps=5, nll_steps=0, progress=False)
    assert adapter.affine_maps(0) is None
    pipe = TransferPipeline(adapter, bpe_sender, receiver)
    batch = [texts()[0][:900], texts()[3][:400]]
    cache, plan = sender_cache(bpe_sender, batch), pipe.plan(batch)
    for chunk_tokens in (None, 37):
        fast = map_cache(adapter, plan, cache_layers(cache), dtype=torch.float32, chunk_tokens=chunk_tokens)
        assert_same_cache(fast, reference_layers(pipe, cache, plan))


def test_a_plan_for_another_sender_layout_is_refused(demo):
    pipe, _ = demo
    plan = pipe.plan(texts()[1][:200])
    plan.sender_rows = plan.sender_rows.repeat(1, 2)  # as if planned for a sender with twice the KV heads
    with pytest.raises(PairMismatchError, match="KV heads"):
        LayerStream(pipe.adapter, plan, dtype=torch.float32)


def test_peak_extra_memory_stays_within_two_receiver_layers(demo, path):
    pipe, sender = demo
    text = text_of_length(read_texts("bundled:heldout"), pipe.receiver, 2048)
    cache, plan = sender_cache(sender, [text]), pipe.plan(text)
    layers = cache_layers(cache)
    result, extra = peak_extra_bytes(lambda: map_cache(pipe.adapter, plan, layers, dtype=torch.float32))
    one_layer = 2 * result.layers[0].keys.nelement() * result.layers[0].keys.element_size()
    assert plan.cache_tokens == 2047
    assert 0 < extra <= 2 * one_layer, f"peak extra {extra / one_layer:.2f} receiver layers"


def test_peak_extra_bytes_counts_temporaries_not_the_result():
    def work():
        scratch = torch.empty(1000, 1000)  # 4 MB, freed before returning
        kept = torch.empty(250, 1000)  # 1 MB, returned
        del scratch
        return kept

    kept, extra = peak_extra_bytes(work)
    assert kept.shape == (250, 1000) and extra == 4_000_000


def test_layer_stream_maps_each_receiver_layer_once_its_sources_arrived(demo):
    pipe, sender = demo
    text = texts()[3][:800]
    cache, plan = sender_cache(sender, [text]), pipe.plan(text)
    layers = cache_layers(cache)
    sources = pipe.adapter.config.layer_sources
    stream = LayerStream(pipe.adapter, plan, dtype=torch.float32)
    with pytest.raises(HeteroFoldError, match="still wait for sender layers"):
        stream.cache()
    arrived, seen = set(), []
    for i in reversed(range(len(layers))):  # any order
        arrived.add(i)
        done = stream.push(i, *layers[i])
        expected = sorted(r for r, src in enumerate(sources) if set(src) <= arrived and r not in seen)
        assert [r for r, _ in done] == expected
        seen += expected
    assert stream.done and sorted(seen) == list(range(len(sources)))
    assert_same_cache(stream.cache(), [(l.keys, l.values) for l in map_cache(pipe.adapter, plan, layers, dtype=torch.float32).layers], atol=0)


def test_layer_stream_refuses_a_layer_of_the_wrong_shape(demo):
    pipe, sender = demo
    text = texts()[3][:400]
    cache, plan = sender_cache(sender, [text]), pipe.plan(text)
    keys, values = cache_layers(cache)[0]
    stream = LayerStream(pipe.adapter, plan, dtype=torch.float32)
    with pytest.raises(PairMismatchError, match=r"expects \(1, "):
        stream.push(0, keys[:, :, :-3], values[:, :, :-3])
    with pytest.raises(PairMismatchError, match="does not exist"):
        stream.push(99, keys, values)


def test_a_plan_is_reusable_and_checked_against_the_cache(demo):
    pipe, sender = demo
    text = texts()[4][:700]
    cache = sender_cache(sender, [text])
    plan = pipe.plan(text)
    assert_same_cache(pipe.transfer(cache, plan=plan).cache, [(l.keys, l.values) for l in pipe.transfer(cache, text).cache.layers], atol=0)
    with pytest.raises(HeteroFoldError, match="not both or neither"):
        pipe.transfer(cache, text, plan=plan)
    with pytest.raises(PairMismatchError, match="tokenizes"):
        pipe.transfer(cache, plan=pipe.plan(text[:300]))


def assert_same_plan(got, want):
    """Two plans of the same texts agree: token indices exactly, RoPE tables and native K/V to float rounding."""
    for name in ("input_ids", "attention_mask", "sender_rows", "native_rows", "padding_rows"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert torch.equal(got.alignment.sender_index, want.alignment.sender_index)
    for kind in ("unrotate", "rotate"):
        for a, b in zip(getattr(got, kind), getattr(want, kind), strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.rotary_dim == b.rotary_dim
                torch.testing.assert_close(a.cos, b.cos)
                torch.testing.assert_close(a.sin, b.sin)
    for got_kv, want_kv in zip(got.native, want.native, strict=True):
        for a, b in zip(got_kv, want_kv):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("sender_arch,receiver_arch", [("gpt_neox", "phi3"), ("phi3", "llama"), ("gpt2", "qwen2"),
                                                        ("llama", "gemma3_text"), ("gemma3_text", "gpt2")])
def test_plans_reuse_the_pipelines_pair_constants_and_equal_a_fresh_pipelines(sender_arch, receiver_arch, bpe,
                                                                               unigram, monkeypatch):
    """A second plan reuses the first's native-prefix K/V and RoPE tables (no forward, no rotary call); a longer
    batch regrows the tables and computes only its new prefix; every plan, and its transfer, equals a fresh
    pipeline's, and the plan equals the rotary module's own tables and a native forward at its positions (what a
    plan computed before the cache): partial rotary, no rotary and Gemma 3's per-layer-type tables."""
    import heterofold_hub.transfer.plan as plan_module
    from heterofold_hub.transfer.reference import native_prefix_kv

    forwards = []
    counted = lambda model, ids: forwards.append(ids) or prefix_kv(model, ids)  # noqa: E731
    prefix_kv = plan_module.prefix_kv
    monkeypatch.setattr(plan_module, "prefix_kv", counted)
    sender = Side.from_model(tiny_model(sender_arch, len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model(receiver_arch, len(unigram), layers=2, seed=2), unigram)
    pipe = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver)
    constants, text = pipe.plan_cache, texts()[2]
    first = pipe.plan(text[:300])
    tables = constants.unrotate.turns, constants.rotate.turns
    second = pipe.plan(text[:250])  # shorter, same first token (this receiver has no BOS): all reused
    assert len(forwards) == 1 and (constants.unrotate.turns, constants.rotate.turns) == tables
    assert all(a[i].data_ptr() == b[i].data_ptr() for a, b in zip(first.native, second.native) for i in (0, 1))
    starts = (texts()[4][k:k + 120] for k in range(0, 1200, 7))  # a row whose first token (the prefix) differs
    batch = [text[:600], next(t for t in starts if unigram(t).input_ids[0] != unigram(text).input_ids[0])]
    longer = pipe.plan(batch)
    assert constants.rotate.length >= longer.alignment.receiver_positions.max() + 1 and len(forwards) == 2
    for plan, planned in ((second, text[:250]), (longer, batch)):
        fresh = TransferPipeline(pipe.adapter, sender, receiver)
        assert_same_plan(plan, fresh.plan(planned))
        a = plan.alignment
        assert_same_plan(plan, replace(plan, unrotate=plan_module._turns(sender, a.sender_index, inverse=True),
                                       rotate=plan_module._turns(receiver, a.receiver_positions, inverse=False),
                                       native=native_prefix_kv(receiver.model, a)))
    cache = sender_cache(sender, batch)
    got, want = pipe.transfer(cache, plan=longer).cache, fresh.transfer(cache, batch).cache
    for a, b in zip(got.layers, want.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys)
        torch.testing.assert_close(a.values, b.values)


def test_a_rope_that_rescales_with_the_longest_position_is_asked_afresh(bpe, unigram):
    """Dynamic NTK (and longrope) rescale their frequencies by the longest position asked for, so rows of a longer
    table could differ: such a side's plans call its rotary module at their own positions."""
    from transformers import AutoModelForCausalLM

    from conftest import tiny_config

    config = tiny_config("llama", len(unigram))
    config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    receiver = Side.from_model(AutoModelForCausalLM.from_config(config).eval(), unigram)
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    assert not receiver.rope.tables_fixed and sender.rope.tables_fixed
    pipe = TransferPipeline(random_affine(sender.model, receiver.model, 2, seed=3), sender, receiver)
    plan = pipe.plan(texts()[2][:300])
    assert pipe.plan_cache.rotate.length == 0 and pipe.plan_cache.unrotate.length > 0  # no receiver table kept
    assert_same_plan(plan, TransferPipeline(pipe.adapter, sender, receiver).plan(texts()[2][:300]))


def test_cache_dtype_is_kept(demo):
    pipe, sender = demo
    text = texts()[5][:600]
    cache, plan = sender_cache(sender, [text]), pipe.plan(text)
    layers = cache_layers(cache)
    half = map_cache(pipe.adapter, plan, [(k.bfloat16(), v.bfloat16()) for k, v in layers], dtype=torch.bfloat16)
    full = map_cache(pipe.adapter, plan, layers, dtype=torch.float32)
    for a, b in zip(half.layers, full.layers):
        assert a.keys.dtype == a.values.dtype == torch.bfloat16
        scale = b.keys.abs().max()
        assert (a.keys.float() - b.keys).abs().max() < 0.05 * scale


def test_a_bfloat16_adapter_maps_in_bfloat16(demo):
    """``adapter.to(torch.bfloat16)`` (what eval and bench --dtype bfloat16 do): the fast path maps in bf16 and agrees
    with the reference path in bf16. (What bf16 costs in quality is measured by ``hf-fold eval --dtype``.)"""
    import copy

    from heterofold_hub.commands.placement import place

    pipe, sender = demo
    text = texts()[5][:600]
    plan = pipe.plan(text)
    half_layers = [(k.bfloat16(), v.bfloat16()) for k, v in cache_layers(sender_cache(sender, [text]))]
    half = place([], {"a": copy.deepcopy(pipe.adapter)}, dtype="bfloat16")["a"]
    assert half.compute_dtype == torch.bfloat16 and pipe.adapter.compute_dtype == torch.float32
    fast = map_cache(half, plan, half_layers, dtype=torch.bfloat16)
    reference = reference_layers(type(pipe)(half, pipe.sender, pipe.receiver), build_cache(half_layers), plan)
    for a, (k, v) in zip(fast.layers, reference):
        assert a.keys.dtype == a.values.dtype == torch.bfloat16
        # bf16 turns round twice where the reference's fp32 ones round once; the map amplifies input rounding: over
        # 18 slices of these texts (which are alignment.py's own source, so they change with it) the worst layer
        # ranged 0.034-0.070 of its largest value
        assert (a.keys.float() - k).abs().max() < 0.1 * k.abs().max()
        assert (a.values.float() - v).abs().max() < 0.1 * v.abs().max()


def test_a_bfloat16_map_beside_a_float32_cache_multiplies_in_bfloat16_and_does_the_rest_in_float32(demo):
    """``--map-dtype bfloat16`` / ``from_pretrained(map_dtype=torch.bfloat16)`` with a float32 receiver: only the
    products are bf16. The gathers and turns stay float32 (in the C kernels when they load), so the cache is the
    reference path's for the same bf16 adapter, whose products round at the same two points."""
    from heterofold_hub.commands.placement import map_dtype_row, with_map_dtype

    pipe, sender = demo
    text = texts()[5][:600]
    cache, plan = sender_cache(sender, [text]), pipe.plan(text)
    layers = cache_layers(cache)
    half = with_map_dtype({"a": pipe.adapter}, ["a"], "bfloat16")[map_dtype_row("a", "bfloat16")]
    assert half.compute_dtype == torch.bfloat16 and pipe.adapter.compute_dtype == torch.float32  # a copy, not moved
    stream = LayerStream(half, plan, dtype=torch.float32)
    assert (stream.compute_dtype, stream.map.matmul_dtype) == (torch.float32, torch.bfloat16)
    assert (stream.kernels is not None) == (kernels.load() is not None)
    # with the kernels, the gather rounds straight to bf16 and the widening turns the keys: no conversion passes
    assert stream.map.narrow_gathers(stream.kernels) == (stream.kernels is not None)
    fast = map_cache(half, plan, layers, dtype=torch.float32)
    full = map_cache(pipe.adapter, plan, layers, dtype=torch.float32)
    reference = reference_layers(type(pipe)(half, pipe.sender, pipe.receiver), cache, plan)
    for a, (k, v), b in zip(fast.layers, reference, full.layers):
        assert a.keys.dtype == a.values.dtype == torch.float32
        for got, want, exact in ((a.keys, k, b.keys), (a.values, v, b.values)):
            scale = exact.abs().max()
            assert (got - want).abs().max() <= 1e-3 * scale  # the same roundings (equal here; sums may reorder)
            assert 1e-4 * scale < (got - exact).abs().max() < 0.1 * scale  # bf16 products, not float32 ones


def test_build_cache_adopts_layers_without_copying():
    layers = [(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)) for _ in range(3)]
    cache = build_cache(layers)
    assert all(l.keys.data_ptr() == k.data_ptr() and l.values.data_ptr() == v.data_ptr()
               for l, (k, v) in zip(cache.layers, layers))
    assert cache.get_seq_length() == 5


def test_heterofold_model_plans_once_and_streams_layers():
    """App code: plan while the sender prefills, then map layer by layer; same cache as one transfer."""
    from heterofold_hub import HeteroFoldModel

    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, local_files_only=True)
    sender = Side.load(DEMO_PAIR[0])
    text = texts()[2][:900]
    plan = model.plan(text)
    layers = cache_layers(sender_cache(sender, [text]))
    stream = model.stream(plan)
    finished = [r for i, (k, v) in enumerate(layers) for r, _ in stream.push(i, k, v)]
    assert sorted(finished) == list(range(model.receiver.spec.num_layers))
    whole = model.transfer(sender_cache(sender, [text]), plan=plan)
    assert_same_cache(stream.cache(), [(l.keys, l.values) for l in whole.cache.layers], atol=0)
    assert model.generate(whole, max_new_tokens=4, min_new_tokens=4, do_sample=False).shape == (1, 4)


@pytest.mark.parametrize("sources", [[[0, 2]] * 6, [[0, 2], [1, 2], [0, 2], [1, 2], [0, 2], [0, 2]]], ids=["all-shared", "mixed"])
def test_receiver_layers_sharing_sources_equal_the_reference(sources, bpe, unigram, path):
    """Receiver layers reading the same sender layers are mapped from one gathered input; sliding-window and
    full-attention layers among them keep different rows, so they must still come out as the reference's."""
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("gemma3_text", len(unigram), layers=6, seed=2), unigram)
    adapter = random_affine(sender.model, receiver.model, 0, seed=3, method="heterofold", sources=sources)
    pipe = TransferPipeline(adapter, sender, receiver)
    batch = [texts()[2][:300], texts()[4][:120]]
    cache, plan = sender_cache(sender, batch), pipe.plan(batch)
    stream = LayerStream(adapter, plan, dtype=torch.float32, chunk_tokens=16)
    done = [r for i, kv in enumerate(cache_layers(cache)) for r, _ in stream.push(i, *kv)]
    assert sorted(done) == list(range(6))
    assert_same_cache(stream.cache(), reference_layers(pipe, cache, plan))
