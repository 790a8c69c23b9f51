"""HeteroFold Hub: map a sender LLM's KV cache into a frozen receiver of another family."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from heterofold_hub import paths as _paths

__version__ = "0.1.0"

# In a checkout, heterofold_hub.cli and heterofold_hub.trainers are the repository root's cli.py and trainers/ (a
# wheel holds them inside the package): docs/packaging.md.
_paths.serve_root_modules()

# The public names, each loaded from its module on first use (PEP 562): importing the package, as every
# `hf-fold` command does, must not import torch and transformers, which would be most of every command's start-up
# (docs/design.md, "Figures behind choices in the code").
_EXPORTS = {
    "KVSpec": "heterofold_hub.base_models.arch", "kv_spec": "heterofold_hub.base_models.arch",
    "AlignmentError": "heterofold_hub.errors", "HeteroFoldError": "heterofold_hub.errors",
    "PairMismatchError": "heterofold_hub.errors", "UnsupportedArchitectureError": "heterofold_hub.errors",
    "METHODS": "heterofold_hub.methods", "AdapterConfig": "heterofold_hub.methods",
    "PairAdapter": "heterofold_hub.methods", "get_method": "heterofold_hub.methods",
    "compose": "heterofold_hub.methods.composed",
    "HeteroFoldModel": "heterofold_hub.modeling",
    "Side": "heterofold_hub.base_models.loading", "load_model": "heterofold_hub.base_models.loading",
    "load_tokenizer": "heterofold_hub.base_models.loading",
    "TransferPipeline": "heterofold_hub.transfer.pipeline", "TransferResult": "heterofold_hub.transfer.pipeline",
    "TransferPlan": "heterofold_hub.transfer.plan",
    "LayerStream": "heterofold_hub.transfer.fast",
    "TransferConfig": "heterofold_hub.transfer.config", "SELECTORS": "heterofold_hub.transfer.selection",
    "SenderPrefill": "heterofold_hub.transfer.sender", "prefill_sender": "heterofold_hub.transfer.sender",
    "Native": "heterofold_hub.transfer.segments", "Mapped": "heterofold_hub.transfer.segments",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from heterofold_hub.base_models.arch import KVSpec, kv_spec
    from heterofold_hub.base_models.loading import Side, load_model, load_tokenizer
    from heterofold_hub.errors import AlignmentError, HeteroFoldError, PairMismatchError, UnsupportedArchitectureError
    from heterofold_hub.methods import METHODS, AdapterConfig, PairAdapter, get_method
    from heterofold_hub.methods.composed import compose
    from heterofold_hub.modeling import HeteroFoldModel
    from heterofold_hub.transfer.fast import LayerStream
    from heterofold_hub.transfer.pipeline import TransferPipeline, TransferResult
    from heterofold_hub.transfer.plan import TransferPlan
    from heterofold_hub.transfer.config import TransferConfig
    from heterofold_hub.transfer.selection import SELECTORS
    from heterofold_hub.transfer.segments import Mapped, Native
    from heterofold_hub.transfer.sender import SenderPrefill, prefill_sender


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'heterofold_hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
