"""Loading frozen models and tokenizers by Hub id, local path or demo id, with clear errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from heterofold_hub.base_models.arch import KVSpec, Rope, kv_spec
from heterofold_hub.base_models.availability import KNOWN_IDS, must_use_cache, not_found_message
from heterofold_hub.errors import AlignmentError, HeteroFoldError
from heterofold_hub.base_models.gguf import is_gguf, local_gguf, revision_of
from heterofold_hub.zoo import resolve_demo


def resolve(name_or_path: str) -> str:
    """A demo id becomes its shipped folder, a GGUF id or ``.gguf`` path its converted folder (converted on
    first use); anything else is passed to transformers as is."""
    name = str(name_or_path)
    demo = resolve_demo(name)
    if demo is not None:
        return str(demo)
    if is_gguf(name):
        return local_gguf(name)
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise HeteroFoldError(
            f"Local model folder {name!r} does not exist. Pass an existing folder (with config.json), "
            f"a Hub id such as 'meta-llama/Llama-3.1-8B', a .gguf file, or a shipped id ({', '.join(KNOWN_IDS)})."
        )
    return name


def source_revision(name_or_path: str) -> str | None:
    """The revision a converted GGUF source records (``sha256:<file hash>``), else None (Hub ids, folders)."""
    name = str(name_or_path)
    return revision_of(resolve(name)) if is_gguf(name) or Path(name).is_dir() else None


def _not_found(name: str, err: Exception) -> HeteroFoldError:
    return HeteroFoldError(not_found_message(name, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"))


def _local_only(name_or_path: str, local_files_only: bool) -> bool:
    """``local_files_only``, or forced on for a Hub id while the Hub is offline or unreachable: the cache then
    answers at once, where huggingface_hub would keep retrying an unreachable Hub before failing."""
    return local_files_only or must_use_cache(name_or_path)


# Loading never runs code from a model repo, and never unpickles weights: passed explicitly, so transformers
# refuses instead of asking interactively, and a folder with only pytorch_model.bin is refused.
SAFE_LOADING = dict(trust_remote_code=False)


def load_config(name_or_path: str, *, revision: str | None = None, local_files_only: bool = False):
    path = resolve(name_or_path)  # outside the try: its own errors already say what is wrong
    try:
        return AutoConfig.from_pretrained(path, revision=revision,
                                          local_files_only=_local_only(name_or_path, local_files_only), **SAFE_LOADING)
    except (OSError, ValueError) as err:
        raise _not_found(name_or_path, err) from err


def load_model(
    name_or_path: str,
    *,
    revision: str | None = None,
    torch_dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    local_files_only: bool = False,
) -> torch.nn.Module:
    """A frozen causal LM in eval mode, from safetensors weights only, without running repo code."""
    kv_spec(load_config(name_or_path, revision=revision, local_files_only=local_files_only))
    path = resolve(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, revision=revision, dtype=torch_dtype or torch.float32,
            local_files_only=_local_only(name_or_path, local_files_only), use_safetensors=True, **SAFE_LOADING,
        )
    except (OSError, ValueError) as err:
        if "safetensors" in str(err).lower():
            raise HeteroFoldError(
                f"Model {name_or_path!r} has no safetensors weights. HeteroFold never loads pickled weights "
                "(pytorch_model.bin), which can run code. Convert them to model.safetensors first."
            ) from err
        raise _not_found(name_or_path, err) from err
    model.requires_grad_(False).eval()
    model.name_or_path = str(name_or_path)  # the id the user gave, not the resolved folder
    return model.to(device) if device is not None else model


def load_tokenizer(name_or_path: str, *, revision: str | None = None, local_files_only: bool = False) -> PreTrainedTokenizerBase:
    path = resolve(name_or_path)
    try:
        tok = AutoTokenizer.from_pretrained(path, revision=revision,
                                            local_files_only=_local_only(name_or_path, local_files_only), **SAFE_LOADING)
    except (OSError, ValueError) as err:
        raise _not_found(name_or_path, err) from err
    if not tok.is_fast:
        raise HeteroFoldError(
            f"The tokenizer of {name_or_path!r} is a slow (Python) tokenizer; token alignment needs "
            "character offsets, which only fast tokenizers give. Save a tokenizer.json for it."
        )
    return tok


def keep_logits(model, positions: int) -> dict:
    """Forward kwargs that compute the LM head on the last ``positions`` positions only (where the model
    supports it): the head over every position of a 262k vocabulary costs GBs and as much time as many layers."""
    import inspect

    return {"logits_to_keep": positions} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def cache_only(model) -> dict:
    """Forward kwargs for a prefill, which wants the cache: logits for the last position only."""
    return keep_logits(model, 1)


def encode(tokenizer: PreTrainedTokenizerBase, text: str, *, add_special_tokens: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[T]`` and character offsets ``[T, 2]`` of ``text``."""
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True, verbose=False)
    ids = torch.tensor(enc["input_ids"], dtype=torch.long)
    offsets = torch.tensor(enc["offset_mapping"], dtype=torch.long).view(-1, 2)
    # special tokens written in the text ("<s>") carry no content: give them empty spans
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids, dtype=torch.long))
    offsets[special, 1] = offsets[special, 0]
    if len(ids) == 0:
        raise AlignmentError(f"The tokenizer turned {text[:40]!r} into no tokens; pass a non-empty context.")
    return ids, offsets


@dataclass
class Side:
    """One end of a pair: its id, tokenizer, KV layout and RoPE (and the model when loaded).

    ``source_revision`` is a GGUF source's ``sha256:`` (see :attr:`revision`)."""

    name: str
    tokenizer: PreTrainedTokenizerBase
    spec: KVSpec
    rope: Rope
    model: torch.nn.Module | None = None
    source_revision: str | None = None

    @property
    def revision(self) -> str | None:
        """What an adapter records as this model's revision: a GGUF file's ``sha256:``, else the Hub commit the
        model was loaded at (None for a local folder), so an adapter never meets other weights of the same name."""
        if self.source_revision is not None:
            return self.source_revision
        return getattr(getattr(self.model, "config", None), "_commit_hash", None)

    @classmethod
    def load(cls, name_or_path: str, *, with_model: bool = True, revision: str | None = None,
             local_files_only: bool = False, **model_kwargs) -> "Side":
        """Tokenizer and KV layout always; the model itself (``model_kwargs``: torch_dtype, device) when asked."""
        hub = dict(revision=revision, local_files_only=local_files_only)
        model = load_model(name_or_path, **hub, **model_kwargs) if with_model else None
        config = model.config if model is not None else load_config(name_or_path, **hub)
        tokenizer = load_tokenizer(name_or_path, **hub)
        return cls(name=str(name_or_path), tokenizer=tokenizer, spec=kv_spec(config), rope=Rope(model or config),
                   model=model, source_revision=source_revision(name_or_path))

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, name: str | None = None) -> "Side":
        name = name or getattr(model, "name_or_path", None) or model.config.name_or_path
        return cls(name=str(name), tokenizer=tokenizer, spec=kv_spec(model), rope=Rope(model), model=model)

    def prefix_ids(self) -> torch.Tensor:
        """The special tokens this tokenizer puts before any text (e.g. ``[BOS]``), ``[P]``."""
        ids = self.tokenizer("x", add_special_tokens=True)["input_ids"]
        plain = self.tokenizer("x", add_special_tokens=False)["input_ids"]
        return torch.tensor(ids[: len(ids) - len(plain)] if ids[-len(plain):] == plain else [], dtype=torch.long)
