"""llama.cpp as `hf-fold bench`'s optional baseline: which GGUF file it reads, what a bench records without it, and
(when llama-cpp-python is installed) a real prefill of SmolLM2's GGUF."""

from __future__ import annotations

import pytest

from heterofold_hub.base_models.gguf import PACKAGED, sha256_of
from heterofold_hub.base_models.loading import Side
from heterofold_hub.commands.bench import results_tables
from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation import llamacpp as llamacpp_module
from heterofold_hub.evaluation.bench import hand_off, run_bench, text_of_length
from heterofold_hub.evaluation.llamacpp import LlamaCppPrefill, gguf_file, llamacpp_baseline
from heterofold_hub.zoo import DEMO_PAIR

from helpers import random_affine, texts

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


@pytest.mark.parametrize("model_id", [SMOL, GEMMA])
def test_a_packaged_receiver_maps_to_its_gguf_file(model_id):
    """SmolLM2's file lies in its package; Gemma 3's chunks are joined once beside the converted models."""
    path = gguf_file(model_id)
    assert path.name.endswith(".gguf") and path.is_file()
    assert sha256_of(path) == PACKAGED[model_id].sha256
    assert gguf_file(model_id) == path  # the joined file is reused, not joined again


def test_a_gguf_path_is_itself_and_other_models_have_none(tmp_path):
    local = tmp_path / "model.gguf"
    local.write_bytes(b"GGUF")
    assert gguf_file(str(local)) == local.resolve()
    assert gguf_file(DEMO_PAIR[1]) is None and gguf_file("Qwen/Qwen2.5-0.5B") is None


@pytest.fixture(scope="module")
def demo_pair():
    """The shipped tiny pair, loaded as a user's ids are, with a random adapter (its cost is what is timed)."""
    sender, receiver = Side.load(DEMO_PAIR[0]), Side.load(DEMO_PAIR[1])
    return sender, receiver, random_affine(sender.model, receiver.model, 2, seed=0, method="heterofold")


def test_a_non_gguf_receiver_has_no_llamacpp_fields_and_says_why(demo_pair, monkeypatch):
    sender, receiver, adapter = demo_pair
    result = run_bench(sender, receiver, {"heterofold": adapter}, texts(), [32], repeats=1)
    why = result["llamacpp_absent"]
    assert "llamacpp" not in result and "\n" not in why
    assert "not a GGUF model" in why or "not installed" in why  # which depends on this machine
    row = result["rows"][0]
    assert "llamacpp_prefill_s" not in row and "vs_llamacpp" not in row["speedup"]
    times, ratios = results_tables(result)
    assert "llama.cpp" not in [c.header for c in times.columns] + [c.header for c in ratios.columns]
    monkeypatch.setattr(llamacpp_module, "llama_cpp_module", lambda: None)
    baseline, why = llamacpp_baseline(receiver, [32])
    assert baseline is None and why.startswith("llama-cpp-python is not installed")


def test_the_hand_off_against_llamacpp_is_its_prefill_over_the_end_to_end_sum():
    row = hand_off({"prefill_s": 2.0, "plan_s": 0.1, "plan_cold_s": 0.3, "transfer_s": {"heterofold": 0.1},
                    "llamacpp_prefill_s": 0.6})
    assert row["speedup"]["vs_llamacpp"]["heterofold"] == pytest.approx(3.0)
    assert "vs_llamacpp" not in hand_off({"prefill_s": 2.0, "plan_s": 0.1, "plan_cold_s": 0.3,
                                          "transfer_s": {"heterofold": 0.1}})["speedup"]


def test_the_tables_show_llamacpp_when_it_was_timed():
    row = hand_off({"context_tokens": 64, "prefill_s": 2.0, "plan_s": 0.1, "plan_cold_s": 0.3, "copy_s": 0.01,
                    "transfer_s": {"heterofold": 0.1}, "recompute_s": {}, "peak_extra_bytes": {"heterofold": 10},
                    "layer_bytes": 10, "llamacpp_prefill_s": 0.6, "llamacpp_tokens": 64})
    result = {"sender": "a", "receiver": "b", "repeats": 1, "threads": 2, "rows": [row],
              "llamacpp": {"version": "0.0.0"}}
    times, ratios = results_tables(result)
    headers = [c.header for c in times.columns]
    assert headers[1:3] == ["prefill", "llama.cpp"] and list(times.columns[2].cells) == ["600.0"]
    assert "vs llama.cpp" in [c.header for c in ratios.columns]
    assert "3.0x" in list(ratios.columns[2].cells)


def test_llamacpp_prefills_smollm2_gguf_as_transformers_tokenizes_it(smol):
    """A real prefill by llama.cpp: the same token count as the receiver's tokenizer (with its <|endoftext|>
    start), and a four times longer prefill is not faster than the shorter one (beyond noise)."""
    pytest.importorskip("llama_cpp")
    corpus = read_texts("bundled:unseen")
    baseline, why = llamacpp_baseline(smol, [256])
    assert why is None and isinstance(baseline, LlamaCppPrefill)
    try:
        short, long = (baseline.tokens(text_of_length(corpus, smol, n)) for n in (64, 256))
        assert len(short) == 64 and len(long) == 256
        assert short[0] == smol.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        import time

        def seconds(tokens):
            baseline.prefill(tokens)  # warm-up
            start = time.perf_counter()
            baseline.prefill(tokens)
            return time.perf_counter() - start

        t64, t256 = seconds(short), seconds(long)
        assert t256 > 0.5 * t64, (t64, t256)
        assert baseline.llm.n_tokens == 256  # the last prefill's cache holds the whole text
        record = baseline.record()
        assert record["version"] and record["system_info"] and record["threads"] >= 1
    finally:
        baseline.close()
