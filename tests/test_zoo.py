"""Fast checks of the bundled demo zoo: model folders, tokenizers and corpus."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from heterofold_hub.zoo.corpus import CORPUS_DIR, load_corpus, load_records
from heterofold_hub.zoo.retrieval import make_retrieval_doc

MODELS_DIR = Path(__file__).resolve().parents[1] / "heterofold_hub" / "zoo" / "models"
NAMES = ["tiny-llama-code", "tiny-qwen-code"]


@pytest.fixture(scope="module", params=NAMES)
def folder(request) -> Path:
    return MODELS_DIR / request.param


@pytest.fixture(scope="module")
def heldout_samples() -> list[str]:
    # A few code files and a retrieval doc; truncated to keep the test fast
    # (the per-character pitfall shows up on any length).
    recs = load_records("heldout")
    code = [r["text"][:4000] for r in recs if not r["source"].startswith("synthetic/")][:5]
    retr = [r["text"] for r in recs if r["source"].startswith("synthetic/")][:2]
    return code + retr + ["    def f(x):\n        return x  # tab\there\n\n\nclass A:\n    pass\n"]


def test_folder_loads_and_runs(folder):
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert next(model.parameters()).dtype == torch.float16  # shipped dtype
    ids = torch.tensor([tok("import os\n")["input_ids"]])
    with torch.no_grad():
        logits = model.float()(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_reloaded_tokenizer_matches_raw_exactly(folder, heldout_samples):
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(folder)
    for text in heldout_samples:
        for special in (True, False):
            want = raw.encode(text, add_special_tokens=special)
            got = tok(text, add_special_tokens=special, return_offsets_mapping=True)
            assert got["input_ids"] == want.ids
            assert [tuple(o) for o in got["offset_mapping"]] == want.offsets


def test_tokenizer_is_not_per_character(folder, heldout_samples):
    # Guards the transformers-5 pitfall where a vocab rebuilt under the wrong
    # class tokenizes almost per character.
    tok = AutoTokenizer.from_pretrained(folder)
    text = "".join(heldout_samples)
    assert len(text) / len(tok(text, add_special_tokens=False)["input_ids"]) > 2.0


def test_decode_keeps_code_layout(folder, heldout_samples):
    tok = AutoTokenizer.from_pretrained(folder)
    for text in heldout_samples:
        if text.isascii():
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.decode(ids) == text


def test_bos_conventions():
    llama = AutoTokenizer.from_pretrained(MODELS_DIR / "tiny-llama-code")
    qwen = AutoTokenizer.from_pretrained(MODELS_DIR / "tiny-qwen-code")
    ids = llama("x = 1")["input_ids"]
    assert ids[0] == llama.bos_token_id == llama.convert_tokens_to_ids("<s>")
    assert ids[1:] == llama("x = 1", add_special_tokens=False)["input_ids"]
    assert qwen.bos_token_id is None
    assert qwen("x = 1")["input_ids"] == qwen("x = 1", add_special_tokens=False)["input_ids"]
    assert qwen.eos_token == "<|endoftext|>" and llama.eos_token == "</s>"


def test_config_matches_tokenizer(folder):
    cfg = AutoConfig.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert cfg.max_position_embeddings >= 4096
    assert cfg.vocab_size == len(tok)
    assert cfg.eos_token_id == tok.eos_token_id
    assert cfg.pad_token_id == tok.pad_token_id
    assert cfg.bos_token_id == tok.bos_token_id
    assert getattr(cfg, "sliding_window", None) is None or not getattr(cfg, "use_sliding_window", False)


def test_folder_size(folder):
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < 20 * 2**20
    assert (folder / "README.md").exists() and (folder / "config.json").exists()


def _head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def test_models_really_differ():
    a, b = (AutoConfig.from_pretrained(MODELS_DIR / n) for n in NAMES)
    algos = [json.loads((MODELS_DIR / n / "tokenizer.json").read_text())["model"]["type"] for n in NAMES]
    assert (a.model_type, b.model_type) == ("llama", "qwen2")
    assert algos[0] != algos[1]
    assert a.vocab_size != b.vocab_size
    assert a.num_hidden_layers != b.num_hidden_layers
    assert a.num_attention_heads != b.num_attention_heads
    assert _head_dim(a) != _head_dim(b)
    ratios = [c.num_attention_heads // c.num_key_value_heads for c in (a, b)]
    assert ratios[0] != ratios[1] and max(ratios) >= 4
    assert a.rope_parameters["rope_theta"] != b.rope_parameters["rope_theta"]


def test_splits_are_disjoint():
    recs = {s: load_records(s) for s in ("train", "calib", "heldout")}
    texts = {s: {r["text"] for r in rs} for s, rs in recs.items()}
    sources = {s: {r["source"] for r in rs} for s, rs in recs.items()}
    for s in ("train", "calib"):
        assert not texts[s] & texts["heldout"]
        assert not sources[s] & sources["heldout"]
    assert not texts["train"] & texts["calib"] and not sources["train"] & sources["calib"]
    # Held-out retrieval facts must never have been seen in training.
    facts = lambda s: {ln for t in texts[s] for ln in t.splitlines() if ln.startswith("# the code of ")}  # noqa: E731
    assert facts("heldout") and not facts("heldout") & facts("train")


def test_corpus_files_and_splits():
    assert sum(p.stat().st_size for p in CORPUS_DIR.glob("*.jsonl.gz")) < 6 * 2**20
    heldout = load_records("heldout")
    assert all(set(r) >= {"text", "source"} for r in heldout)
    # Retrieval docs are generated up to a fixed share of the characters.
    retr = sum(len(r["text"]) for r in heldout if r["source"].startswith("synthetic/retrieval/"))
    assert 0.3 < retr / sum(len(r["text"]) for r in heldout) < 0.6
    assert load_corpus("calib")
    with pytest.raises(ValueError, match="valid splits are train, train-natural"):
        load_corpus("test")


def test_retrieval_doc_format():
    text, pairs = make_retrieval_doc(random.Random(1), "x = 1\n" * 10, 5)
    again, _ = make_retrieval_doc(random.Random(1), "x = 1\n" * 10, 5)
    assert text == again and len(pairs) == 5
    assert text.startswith("# facts\n")
    for q, a in pairs:
        assert len(a) == 5 and a.isdigit()
        assert q + a + "\n" in text
        name = q.split("code of ")[1].removesuffix(" is ")
        assert f"# the code of {name} is {a}\n" in text


def test_retrieval_doc_with_lead_keeps_facts_before_recalls():
    text, pairs = make_retrieval_doc(random.Random(2), "y = 2\n" * 5, 3, lead="import os\n")
    assert text.startswith("import os\n# facts\n")
    facts_at = text.index("# facts")
    assert all(text.index(q + a) > facts_at for q, a in pairs)
