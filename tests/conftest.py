"""Shared fixtures: real tokenizers trained in memory and tiny random-init models of each family."""

from __future__ import annotations

import inspect
import json
import textwrap

import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

import heterofold_hub.transfer.alignment as sample_module
from hub_server import LoopbackHub

TRAIN_TEXT = inspect.getsource(sample_module) + inspect.getsource(textwrap)


def bpe_tokenizer(vocab: int = 300, bos: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on a few KB of Python source; BOS prepended when ``bos``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TRAIN_TEXT], trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")


def unigram_tokenizer(vocab: int = 200) -> PreTrainedTokenizerFast:
    """A Unigram tokenizer (Metaspace), no BOS: splits text differently from the BPE one."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator([TRAIN_TEXT], trainers.UnigramTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], unk_token="<|endoftext|>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>")


GEMMA3_WINDOW = 16  # tiny Gemma 3's sliding window: every test context is longer


def tiny_config(arch: str, vocab: int, layers: int = 2, seed_variant: int = 0):
    """A tiny random-init config of ``arch`` (shapes and RoPE handling are what tests check)."""
    common = dict(vocab_size=vocab, max_position_embeddings=512, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    hidden = 64 if seed_variant == 0 else 48
    if arch == "gpt2":
        return transformers.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=512, bos_token_id=0, eos_token_id=1)
    if arch == "gpt_neox":
        return transformers.GPTNeoXConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4, rotary_pct=0.25, **common)
    if arch == "gemma3_text":  # sliding window shorter than test contexts; local and global RoPE differ
        types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
        rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}
        return transformers.Gemma3TextConfig(
            hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=1, head_dim=16, sliding_window=GEMMA3_WINDOW, layer_types=types,
            rope_parameters=rope, query_pre_attn_scalar=16, **common)
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config,
           "gemma": transformers.GemmaConfig, "phi3": transformers.Phi3Config}[arch]
    extra = {"partial_rotary_factor": 0.5} if arch == "phi3" else {}
    if arch == "gemma":
        extra["head_dim"] = 16
    return cls(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, **common, **extra)


def tiny_model(arch: str, vocab: int, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, vocab, layers, seed_variant=seed % 2))
    model.requires_grad_(False).eval()
    model.name_or_path = f"tiny-{arch}-{seed}"
    return model


@pytest.fixture(scope="session")
def bpe():
    return bpe_tokenizer()


@pytest.fixture(scope="session")
def unigram():
    return unigram_tokenizer()


@pytest.fixture(scope="session")
def pair_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    for name, arch, tok in (("sender", "llama", bpe_tokenizer()), ("receiver", "qwen2", unigram_tokenizer())):
        model = tiny_model(arch, len(tok), layers=3 if name == "sender" else 2, seed=len(name))
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    half = len(TRAIN_TEXT) // 2
    (root / "calib.txt").write_text(TRAIN_TEXT[:half])
    heldout = root / "heldout.jsonl"
    heldout.write_text("\n".join(json.dumps({"text": TRAIN_TEXT[half + i * 3000 : half + (i + 1) * 3000]}) for i in range(4)))
    return root


@pytest.fixture
def loopback_hub(tmp_path):
    """A running LoopbackHub storing its repos under ``tmp_path / "hub"``."""
    with LoopbackHub(tmp_path / "hub") as hub:
        yield hub


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct from its PyPI GGUF package (loaded once per test session)."""
    from heterofold_hub.base_models.loading import Side

    return Side.load("gguf/smollm2-135m-instruct-q4_1")


@pytest.fixture(scope="session")
def gemma():
    """Gemma 3 270M from its PyPI GGUF packages (loaded once per test session)."""
    from heterofold_hub.base_models.loading import Side

    return Side.load("gguf/gemma3-270m-q4_k_m")


@pytest.fixture(params=["kernel", "torch ops"])
def path(request, monkeypatch):
    """Both ways the fast path runs: the C kernel (CPU float32), and the torch ops (other devices or dtypes, or
    no C compiler)."""
    if request.param == "torch ops":
        monkeypatch.setattr("heterofold_hub.transfer.fast.kernels.load", lambda: None)
    else:
        from helpers import kernels_or_skip  # helpers imports conftest

        kernels_or_skip()
    return request.param
