"""Tokenizer fingerprints: an adapter is only valid for the exact tokenizers it was fitted with."""

from __future__ import annotations

import hashlib
import json

from transformers import PreTrainedTokenizerBase


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """``sha256:`` over the vocabulary, merges, normaliser, pre-tokeniser, post-processor (special tokens)
    and chat template: anything that changes token ids or offsets changes the fingerprint."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    backend.pop("truncation", None)  # runtime settings, not the tokenization itself
    backend.pop("padding", None)
    payload = {"tokenizer": backend, "chat_template": getattr(tokenizer, "chat_template", None)}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return f"sha256:{digest}"
