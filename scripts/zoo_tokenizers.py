"""Train and save the two demo tokenizers (used by scripts/train_zoo.py).

The two tokenizers differ on purpose (algorithm, vocab, BOS convention) so
that cross-family KV transfer has to deal with real tokenizer mismatch.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

# Pieces for the Unigram pre-tokenizer: identifiers (with "_"), single digits,
# punctuation runs, and whitespace runs (a newline plus the following
# indentation stays one chunk so the model can learn "\n" + indent pieces).
# A leading space is attached to the next word, as in GPT-2. Single digits
# make 5-digit retrieval answers easy to copy token by token.
_LLAMA_SPLIT = r" ?[\p{L}_][\p{L}\p{N}_]*| ?\p{N}| ?[^\s\p{L}\p{N}_]+|\s+(?!\S)|\s+"

LLAMA_SPECIALS = {"unk": "<unk>", "bos": "<s>", "eos": "</s>", "pad": "<pad>"}
QWEN_SPECIALS = {"eos": "<|endoftext|>", "pad": "<|endoftext|>"}


def train_llama_tokenizer(texts: list[str], vocab_size: int = 4096) -> Tokenizer:
    """SentencePiece-style Unigram ("▁" marks spaces) that prepends <s>, like Llama 1/2."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(_LLAMA_SPLIT), behavior="isolated"),
         # split=False: only swap " " for "▁"; prepend_scheme="never" so that
         # decode(encode(x)) == x and no phantom leading space appears.
         pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False)]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never", split=False)
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(LLAMA_SPECIALS.values()),  # ids 0..3, Llama order
        unk_token=LLAMA_SPECIALS["unk"],
        max_piece_length=16,
        # Unigram has no byte fallback: seed every printable ASCII character
        # (tabs, "\r", ...) so code never decodes to <unk> over a rare char.
        initial_alphabet=sorted(set(string.printable.replace(" ", "▁"))),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos = LLAMA_SPECIALS["bos"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    return tok


def train_qwen_tokenizer(texts: list[str], vocab_size: int = 3000) -> Tokenizer:
    """Byte-level BPE with Qwen2's exact pipeline (NFC, Qwen2 split regex); no BOS.

    transformers 5 always loads model_type "qwen2" folders with Qwen2Tokenizer,
    which rebuilds the tokenizer from vocab + merges with this fixed pipeline,
    so the trained tokenizer must use precisely the same components to
    survive AutoTokenizer.from_pretrained unchanged.
    """
    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[QWEN_SPECIALS["eos"]],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def save_for_transformers(tok: Tokenizer, folder: Path, specials: dict[str, str], tokenizer_class: str) -> None:
    """Write tokenizer.json + tokenizer_config.json so AutoTokenizer reproduces `tok` exactly.

    transformers 5 picks the tokenizer class from tokenizer_config.json. A
    model-specific class (LlamaTokenizer, Qwen2Tokenizer) rebuilds the model
    from vocab/merges with its own pre-tokenizer and normalizer, which silently
    changes the ids (a Unigram vocab rebuilt as BPE tokenizes per character).
    The generic backend loads tokenizer.json verbatim, so the Llama folder
    asks for it. For model_type "qwen2" transformers 5.24 ignores the config
    and always uses Qwen2Tokenizer, so the Qwen tokenizer is built to be
    exactly what Qwen2Tokenizer rebuilds (see train_qwen_tokenizer).
    """
    kwargs = {f"{k}_token": v for k, v in specials.items()}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=4096, **kwargs)
    fast.save_pretrained(folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = tokenizer_class
    # add_bos_token/add_eos_token in the config make transformers rewrite the
    # post-processor on load; the one in tokenizer.json is the source of truth.
    cfg.pop("add_bos_token", None)
    cfg.pop("add_eos_token", None)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    # save_pretrained may normalise tokenizer.json; keep the exact trained one.
    tok.save(str(folder / "tokenizer.json"))
