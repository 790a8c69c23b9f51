"""Transfer methods. Importing this package registers every built-in method in ``METHODS``."""

from heterofold_hub.methods.base import METHODS, AdapterConfig, PairAdapter, get_method, register_method
from heterofold_hub.methods import composed, dense_latent, heterofold, kv_ridge, recolor  # noqa: E402,F401  (registration side effect)

__all__ = ["METHODS", "AdapterConfig", "PairAdapter", "get_method", "register_method"]
