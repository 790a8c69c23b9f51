"""llama.cpp's prefill of a GGUF receiver: an optional baseline for ``hf-fold bench`` (extra ``llamacpp``).

A serving engine would prefill the receiver with an optimized CPU runtime rather than transformers, so the
hand-off is also compared with llama.cpp (through ``llama-cpp-python``) prefilling the same text from the same
GGUF file: ``reset()`` + ``eval(tokens)`` with logits for the last position only, on as many threads as torch
uses. The text is tokenized by llama.cpp's own tokenizer (its token count is recorded beside transformers').
See docs/llamacpp.md for the build (a generic AVX2 one) and what the bench reports.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from heterofold_hub.base_models.gguf import PACKAGED, _packaged_file, is_gguf, models_root, sha256_of
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.io import locked

INSTALL_HINT = "pip install 'heterofold-hub[llamacpp]' (built from source: see docs/llamacpp.md)"
MARGIN = 64  # llama.cpp's tokenizer may cut the text into a few more tokens than transformers'


def gguf_file(name: str) -> Path | None:
    """The GGUF file a receiver id was loaded from (a packaged id's file, joined once from its chunk packages into
    ``$HF_FOLD_HOME/models/<sha256>.gguf``, or a ``.gguf`` path itself); None for a model that is not GGUF."""
    if not is_gguf(name):
        return None
    if name not in PACKAGED:
        return Path(name).expanduser().resolve()
    source = PACKAGED[name]
    if not source.chunks:
        return _packaged_file(source, Path(tempfile.gettempdir()))  # lies in its package: nothing is written
    joined = models_root() / f"{source.sha256}.gguf"
    if joined.is_file():
        return joined
    joined.parent.mkdir(parents=True, exist_ok=True)
    with locked(joined), tempfile.TemporaryDirectory(dir=joined.parent, prefix=".join-") as work:
        if not joined.is_file():
            path = _packaged_file(source, Path(work))
            if sha256_of(path) != source.sha256:
                raise HeteroFoldError(f"The chunks of {name} join into a file of another sha256 than "
                                      f"{source.sha256[:16]}...; reinstall them: {source.install_hint()}.")
            os.replace(path, joined)
    return joined


def llama_cpp_module():
    """``llama_cpp`` when llama-cpp-python is installed, else None."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp


@dataclass
class LlamaCppPrefill:
    """A receiver's GGUF loaded in llama.cpp, context ``n_ctx`` and one batch of ``n_ctx`` (a prefill is one
    ``llama_decode``), logits for the last position only, ``threads`` threads for prompts and for decoding."""

    path: Path
    n_ctx: int
    threads: int
    text_start: str | None = None  # the token the receiver's texts start with when the GGUF adds none (SmolLM2)

    def __post_init__(self):
        import llama_cpp

        self.llm = llama_cpp.Llama(model_path=str(self.path), n_ctx=self.n_ctx, n_batch=self.n_ctx,
                                   n_threads=self.threads, n_threads_batch=self.threads, logits_all=False,
                                   verbose=False)

    def tokens(self, text: str) -> list[int]:
        """``text`` as llama.cpp tokenizes it, with the special prefix the GGUF asks for (and ``text_start``)."""
        tokens = self.llm.tokenize(text.encode(), add_bos=True, special=False)
        if self.text_start is not None:
            start = self.llm.tokenize(self.text_start.encode(), add_bos=False, special=True)
            if tokens[: len(start)] != start:
                tokens = start + tokens
        return tokens

    def prefill(self, tokens: list[int]) -> None:
        """A prefill from an empty cache: ``reset()`` + ``eval`` (one batch; the last position's logits only)."""
        if len(tokens) > self.n_ctx:
            raise HeteroFoldError(f"llama.cpp's context holds {self.n_ctx} tokens, the text {len(tokens)}.")
        self.llm.reset()
        self.llm.eval(tokens)

    def record(self) -> dict:
        """What this baseline ran: package version, llama.cpp's build (its system info), threads, batch, file."""
        import llama_cpp

        info = llama_cpp.llama_print_system_info()
        return {"version": llama_cpp.__version__, "system_info": info.decode() if isinstance(info, bytes) else str(info),
                "threads": self.threads, "n_ctx": self.n_ctx, "n_batch": self.llm.n_batch,
                "n_ubatch": self.llm.context_params.n_ubatch, "gguf": self.path.name}

    def close(self) -> None:
        self.llm.close()


def llamacpp_baseline(receiver, contexts: list[int]) -> tuple[LlamaCppPrefill | None, str | None]:
    """llama.cpp loaded with ``receiver``'s GGUF for texts up to ``max(contexts)`` tokens, or None and why in one
    line: llama-cpp-python is not installed, the receiver is not a GGUF model, or llama.cpp could not load it."""
    if llama_cpp_module() is None:
        return None, f"llama-cpp-python is not installed; {INSTALL_HINT}"
    path = gguf_file(receiver.name)
    if path is None:
        return None, f"{receiver.name} is not a GGUF model: llama.cpp times GGUF receivers only"
    source = PACKAGED.get(receiver.name)
    try:
        return LlamaCppPrefill(path, n_ctx=max(contexts) + MARGIN, threads=torch.get_num_threads(),
                               text_start=source.text_start if source else None), None
    except (ValueError, RuntimeError, OSError) as err:  # llama.cpp refused the file (an architecture it lacks, ...)
        return None, f"llama.cpp could not load {path.name}: {type(err).__name__}: {err}"
