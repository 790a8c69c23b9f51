"""Transfer methods. Importing this package registers every built-in method in ``METHODS``, so its ``load_adapter``
loads a package of any of them (the hub, the CLI and the trainer load through it)."""

from heterofold_hub.adapter.base import METHODS, PairAdapter, get_method, load_adapter, register_method
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.methods import composed, dense_latent, heterofold, kv_ridge, low_rank, recolor  # noqa: E402,F401  (registration side effect)

__all__ = ["METHODS", "AdapterConfig", "PairAdapter", "get_method", "load_adapter", "register_method"]
