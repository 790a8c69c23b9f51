"""HeteroFold Hub: map a sender LLM's KV cache into a frozen receiver of another family."""

from heterofold_hub.base_models.arch import KVSpec, kv_spec
from heterofold_hub.errors import AlignmentError, HeteroFoldError, PairMismatchError, UnsupportedArchitectureError
from heterofold_hub.methods import METHODS, AdapterConfig, PairAdapter, get_method
from heterofold_hub.methods.composed import compose
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.base_models.loading import Side, load_model, load_tokenizer
from heterofold_hub.transfer.pipeline import TransferPipeline, TransferResult
from heterofold_hub.transfer.plan import TransferPlan
from heterofold_hub.transfer.fast import LayerStream
from heterofold_hub.transfer.recompute import RecomputeSettings
from heterofold_hub.transfer.selection import SELECTORS
from heterofold_hub.transfer.sender import SenderPrefill, prefill_sender

__version__ = "0.1.0"

__all__ = [
    "AdapterConfig", "AlignmentError", "HeteroFoldError", "HeteroFoldModel", "KVSpec", "LayerStream", "METHODS",
    "PairAdapter", "PairMismatchError", "RecomputeSettings", "SELECTORS", "SenderPrefill", "Side", "TransferPipeline",
    "TransferPlan", "TransferResult", "UnsupportedArchitectureError",
    "compose", "get_method", "kv_spec", "load_model", "load_tokenizer", "prefill_sender",
]
