"""HeteroFold Hub: map a sender LLM's KV cache into a frozen receiver of another family."""

from .arch import KVSpec, kv_spec
from .errors import AlignmentError, HeteroFoldError, PairMismatchError, UnsupportedArchitectureError
from .methods import METHODS, AdapterConfig, PairAdapter, get_method
from .methods.composed import compose
from .modeling import HeteroFoldModel
from .models import Side, load_model, load_tokenizer
from .pipeline import TransferPipeline, TransferResult
from .plan import TransferPlan
from .streaming import LayerStream

__version__ = "0.1.0"

__all__ = [
    "AdapterConfig", "AlignmentError", "HeteroFoldError", "HeteroFoldModel", "KVSpec", "LayerStream", "METHODS",
    "PairAdapter", "PairMismatchError", "Side", "TransferPipeline", "TransferPlan", "TransferResult",
    "UnsupportedArchitectureError",
    "compose", "get_method", "kv_spec", "load_model", "load_tokenizer",
]
