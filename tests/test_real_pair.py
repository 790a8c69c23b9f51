"""The real pair, SmolLM2-135M (Llama family) and Gemma 3 270M, loaded from their PyPI GGUF packages.

Each model is loaded once per session (converted to safetensors under HF_FOLD_HOME on first use). These tests
check what only real models show: their layouts and revisions, the sink token, and that a transfer into Gemma 3
is exact across its 512-token sliding window (identity) and continues with the receiver's own cache classes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from heterofold_hub.data.texts import read_texts
from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill
from heterofold_hub.base_models.gguf import PACKAGED

from helpers import ROOT, IdentityAdapter

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
REAL_ADAPTERS = {(SMOL, GEMMA): "heterofold/smollm2-135m-to-gemma3-270m",
                 (GEMMA, SMOL): "heterofold/gemma3-270m-to-smollm2-135m"}


@pytest.fixture(scope="session")
def long_text() -> str:
    """Unseen-source text longer than Gemma 3's 512-token window (about 800 tokens)."""
    return read_texts("bundled:unseen-code")[0][:3200]


def test_both_ids_load_with_their_layouts_and_revisions(smol, gemma):
    assert (smol.spec.model_type, smol.spec.num_layers, smol.spec.kv_heads, smol.spec.head_dim) == ("llama", 30, 3, 64)
    assert smol.spec.layer_types is None and smol.spec.sliding_window is None
    assert (gemma.spec.model_type, gemma.spec.num_layers, gemma.spec.kv_heads, gemma.spec.head_dim) == \
        ("gemma3_text", 18, 1, 256)
    assert gemma.spec.sliding_window == 512 and gemma.spec.full_layers == [5, 11, 17]
    # the revision an adapter records is the GGUF file's hash: other weights of the same name never match
    assert smol.revision == f"sha256:{PACKAGED[SMOL].sha256}" and gemma.revision == f"sha256:{PACKAGED[GEMMA].sha256}"


def test_the_sink_token_of_each_model(smol, gemma):
    """SmolLM2's texts start with <|endoftext|> (its pretraining separator; the GGUF's BOS <|im_start|> is a chat
    marker), Gemma 3's with <bos>: that first token's KV is computed natively by a receiver."""
    assert smol.tokenizer.convert_ids_to_tokens(smol.prefix_ids().tolist()) == ["<|endoftext|>"]
    assert gemma.tokenizer.convert_ids_to_tokens(gemma.prefix_ids().tolist()) == ["<bos>"]
    assert smol.tokenizer("def f(): pass")["input_ids"][0] == 0


def test_identity_into_gemma3_is_exact_across_its_sliding_window(gemma, long_text):
    """Gemma 3 -> Gemma 3 through the identity map: the cache has the receiver's own layer classes (sliding layers
    keep 511 positions), and the receiver continues exactly as after its own prefill."""
    tokens = gemma.tokenizer(long_text, return_tensors="pt")
    assert tokens.input_ids.shape[1] > 600  # well past the window
    pipe = TransferPipeline(IdentityAdapter.for_side(GEMMA, gemma.spec), gemma, gemma)
    with torch.no_grad():
        sender_cache = gemma.model(**tokens, use_cache=True, cache=full_cache()).cache
    result = pipe.transfer(sender_cache, long_text)
    native = native_prefill(gemma, long_text)
    for mapped, own in zip(result.cache.layers, native.cache.layers, strict=True):
        assert type(mapped) is type(own) and mapped.keys.shape == own.keys.shape
        assert mapped.get_seq_length() == own.get_seq_length()
        assert torch.allclose(mapped.keys, own.keys, atol=1e-3) and torch.allclose(mapped.values, own.values, atol=1e-3)
    assert [layer.keys.shape[2] for layer in result.cache.layers].count(511) == 15
    new = pipe.generate(result, max_new_tokens=8, do_sample=False)
    reference = gemma.model.generate(**tokens, max_new_tokens=8, do_sample=False)[:, tokens.input_ids.shape[1]:]
    assert new.tolist() == reference.tolist()


@pytest.mark.parametrize("sender,receiver", [(SMOL, GEMMA), (GEMMA, SMOL)], ids=["smollm2-to-gemma3", "gemma3-to-smollm2"])
def test_from_pretrained_resolves_the_shipped_adapter_offline_in_a_fresh_process(sender, receiver, long_text):
    """What application code does: resolve the registered adapter for the pair with no network, map the sender's
    cache (a full one: a Gemma 3 sender's default cache keeps only the window of its sliding layers) and generate."""
    code = f"""
import torch
from heterofold_hub import HeteroFoldModel
from heterofold_hub.transfer.kvcache import full_cache
text = {long_text[:2000]!r}
model = HeteroFoldModel.from_pretrained({sender!r}, {receiver!r}, load_sender=True, local_files_only=True)
inputs = model.sender.tokenizer(text, return_tensors="pt")
with torch.no_grad():
    cache = model.sender.model(**inputs, use_cache=True, cache=full_cache()).cache
result = model.transfer(cache, text)
new = model.generate(result, max_new_tokens=5, min_new_tokens=5, do_sample=False)
print(model.resolved.repo_id, model.resolved.version, result.prefilled, "x".join(map(str, new.shape)),
      type(result.cache.layers[0]).__name__)
"""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    repo_id, version, prefilled, shape, layer = run.stdout.split()[-5:]
    assert repo_id == REAL_ADAPTERS[(sender, receiver)] and version.startswith("v") and prefilled == "False"
    assert shape == "1x5"
    assert layer == ("DynamicSlidingWindowLayer" if receiver == GEMMA else "DynamicLayer")


def test_tiny_llama_reaches_gemma3_through_the_smollm2_pivot(gemma, long_text):
    """No adapter maps tiny-llama-code into Gemma 3; the registry has tiny-llama-code -> SmolLM2 and SmolLM2 ->
    Gemma 3, so pivot="auto" composes them into one map per Gemma 3 layer, and Gemma 3 generates from it."""
    from heterofold_hub import HeteroFoldModel
    from heterofold_hub.hub.registry import NoAdapterError

    sender = "heterofold/tiny-llama-code"
    with pytest.raises(NoAdapterError, match=f"a path exists via {SMOL}"):
        HeteroFoldModel.from_pretrained(sender, gemma, local_files_only=True)
    model = HeteroFoldModel.from_pretrained(sender, gemma, pivot="auto", local_files_only=True, load_sender=True)
    assert model.resolved.path.pivot == SMOL and model.adapter.config.method == "composed"
    assert [p.repo_id for p in model.adapter.parents] == ["heterofold/tiny-llama-code-to-smollm2-135m",
                                                          REAL_ADAPTERS[(SMOL, GEMMA)]]
    text = long_text[:1500]
    with torch.no_grad():
        cache = model.sender.model(**model.sender.tokenizer(text, return_tensors="pt"), use_cache=True).cache
    result = model.transfer(cache, text)
    assert model.generate(result, max_new_tokens=4, min_new_tokens=4, do_sample=False).shape == (1, 4)


def test_gemma3_reaches_tiny_llama_through_smollm2_with_a_least_squares_first_leg(gemma, long_text):
    """The registry holds two Gemma 3 -> SmolLM2 legs: heterofold v1.1.0 (recorded 0.677) and KV Ridge (0.388).
    The path takes KV Ridge, which reproduces SmolLM2's own K/V that SmolLM2 -> tiny-llama-code reads (measured
    0.775 composed, against -7.5 through the heterofold leg: README "A first leg that reproduces the pivot")."""
    from heterofold_hub import HeteroFoldModel

    receiver = "heterofold/tiny-llama-code"
    model = HeteroFoldModel.from_pretrained(gemma, receiver, pivot="auto", local_files_only=True)
    assert model.resolved.path.pivot == SMOL and model.resolved.path.faithful_first
    assert [p.repo_id for p in model.adapter.parents] == ["heterofold/gemma3-270m-to-smollm2-135m-kv-ridge",
                                                          "heterofold/smollm2-135m-to-tiny-llama-code"]
    text = long_text[:1500]
    with torch.no_grad():
        cache = gemma.model(**gemma.tokenizer(text, return_tensors="pt"), use_cache=True).cache
    result = model.transfer(cache, text)
    assert model.generate(result, max_new_tokens=4, min_new_tokens=4, do_sample=False).shape == (1, 4)


def test_the_readme_hand_off_example_runs_and_answers(capsys):
    """README's hand-off example, executed as written: the receiver answers the fact the document states."""
    from helpers import ROOT

    readme = (ROOT / "README.md").read_text()
    code = readme.split("<!-- handoff-example -->\n```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md (hand-off example)", "exec"), {})
    assert capsys.readouterr().out.strip().splitlines()[-1].strip() == "73914"


def test_recompute_everything_into_gemma3_past_its_window_is_native_prefill(smol, gemma, long_text):
    """The shipped SmolLM2 -> Gemma 3 adapter with recompute=1: the cache (sliding layers included) and the greedy
    continuation after a receiver-read prompt are those of Gemma 3's own prefill; recompute=0 is the pure transfer."""
    from heterofold_hub import HeteroFoldModel

    model = HeteroFoldModel.from_pretrained(smol, gemma, local_files_only=True)
    prefill = model.prefill_sender(long_text)
    full = model.transfer(prefill, long_text, recompute=1.0, select="tail")
    native = native_prefill(gemma, long_text)
    for mapped, own in zip(full.cache.layers, native.cache.layers, strict=True):
        assert type(mapped) is type(own) and mapped.get_seq_length() == own.get_seq_length()
        assert torch.allclose(mapped.keys, own.keys, atol=1e-3) and torch.allclose(mapped.values, own.values, atol=1e-3)
    kw = dict(prompt="\n# the function above", max_new_tokens=6, do_sample=False)
    assert model.generate(full, **kw).tolist() == model.generate(native, **kw).tolist()
    pure, zero = model.transfer(prefill, long_text), model.transfer(prefill, long_text, recompute=0)
    assert all(torch.equal(a.keys, b.keys) for a, b in zip(pure.cache.layers, zero.cache.layers))


def test_a_deferred_statement_recompute_is_the_one_made_with_the_question_known(smol, gemma):
    """The question unknown at hand-off time: the statement recompute made when Gemma 3 reads its prompt is the
    cache made with query= at transfer time, past Gemma 3's sliding window (the fact opens a 900-token document),
    and the receiver answers the stated fact from it."""
    from heterofold_hub import HeteroFoldModel

    model = HeteroFoldModel.from_pretrained(smol, gemma, local_files_only=True)
    helpers = "".join(f"def scale_{i}(values):\n    return [v * {i} for v in values]\n\n" for i in range(2, 40))
    document = "# facts\n# the code of amber-falcon is 73914\n# the code of quiet-river is 50218\n\n" + helpers
    question = "# recall: the code of amber-falcon is "
    prefill = model.prefill_sender(document)
    deferred = model.transfer(prefill, document, recompute=0.05, select="statement")
    asked = model.transfer(prefill, document, recompute=0.05, select="statement", query=question)
    assert deferred.recompute["deferred"] and 0 < asked.recompute["share"] <= 0.05
    for made, want in zip(deferred.deferred.apply(question).cache.layers, asked.cache.layers, strict=True):
        assert torch.equal(made.keys, want.keys) and torch.equal(made.values, want.values)
    answer = model.generate(deferred, prompt=question, max_new_tokens=6, do_sample=False)
    assert gemma.tokenizer.decode(answer[0], skip_special_tokens=True).strip().startswith("73914")


def test_three_questions_of_one_real_hand_off_are_each_answered_as_from_a_fresh_transfer(smol, gemma):
    """SmolLM2 -> Gemma 3 as in the README (a statement recompute for the first question): one result asked three
    different questions answers each as a fresh transfer does, and is unchanged after."""
    from heterofold_hub import HeteroFoldModel

    model = HeteroFoldModel.from_pretrained(smol, gemma, local_files_only=True)
    document = ("# facts\n# the code of amber-falcon is 73914\n# the code of quiet-river is 50218\n"
                "# the code of stone-heron is 66031\n\n"
                + "".join(f"def scale_{i}(values):\n    return [v * {i} for v in values]\n\n" for i in range(2, 20)))
    prefill = model.prefill_sender(document)
    hand_off = dict(recompute=0.05, select="statement", query="# recall: the code of amber-falcon is ")
    result = model.transfer(prefill, document, **hand_off)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in result.cache.layers]
    kw = dict(max_new_tokens=6, do_sample=False)
    for name in ("amber-falcon", "quiet-river", "stone-heron"):
        question = f"# recall: the code of {name} is "
        reused = model.generate(result, prompt=question, **kw)
        fresh = model.generate(model.transfer(prefill, document, **hand_off), prompt=question, **kw)
        assert reused.tolist() == fresh.tolist(), name
    assert all(torch.equal(layer.keys, k) and torch.equal(layer.values, v)
               for layer, (k, v) in zip(result.cache.layers, before, strict=True))
