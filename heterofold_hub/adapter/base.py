"""The adapter contract: the one base class every transfer method implements (kvpress style: one abstract method),
the registry of methods by name, and loading a saved adapter of any registered method.

A method maps *aligned, un-rotated* sender features to one receiver layer's keys and values. Token
alignment, RoPE and cache assembly are shared (``heterofold_hub.transfer.reference``), so a new method is one
folder with a config dataclass, a ``PairAdapter`` subclass and its ``fit``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import torch
from torch import nn

from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.adapter.save_and_load import (
    check_tensors,
    non_finite,
    read_package,
    save_adapter,
)
from heterofold_hub.errors import HeteroFoldError

METHODS: dict[str, type["PairAdapter"]] = {}


def register_method(name: str):
    """Class decorator: make a PairAdapter subclass available under ``name`` (PEFT-style mapping)."""

    def wrap(cls):
        cls.method = name
        METHODS[name] = cls
        return cls

    return wrap


def get_method(name: str) -> type["PairAdapter"]:
    if name not in METHODS:
        raise HeteroFoldError(f"Unknown method {name!r}; valid methods: {', '.join(sorted(METHODS)) or 'none yet'}. "
                              "The built-in methods register when heterofold_hub.methods is imported; a method of "
                              "your own registers with @register_method when its module is imported.")
    return METHODS[name]


class PairAdapter(nn.Module, ABC):
    """Maps one (sender, receiver) pair's aligned sender features to receiver K/V."""

    method: str = "base"

    def __init__(self, config: AdapterConfig):
        super().__init__()
        self.config = config

    def save_pretrained(self, folder) -> Path:
        """Write ``adapter_config.json`` and ``adapter.safetensors`` (never base-model weights)."""
        return save_adapter(self, folder)

    @classmethod
    def from_pretrained(cls, folder) -> "PairAdapter":
        """The adapter saved in ``folder`` (any registered method; pickle-free): :func:`load_adapter`."""
        return load_adapter(folder)

    @abstractmethod
    def map_layer(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Receiver layer ``layer``'s un-rotated keys and values.

        ``keys``/``values``: ``[batch, seq, in_features]`` (sender features of ``layer_sources[layer]``,
        heads flattened, keys un-rotated); returns two ``[batch, seq, receiver kv_heads * head_dim]``.
        """

    def layer_inputs(self, features, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`map_layer`'s inputs for receiver ``layer``: the keys and the values of its ``layer_sources``,
        side by side. ``features[i]``: sender layer i's ``(keys, values)``, each ``[..., kv_heads * head_dim]``."""
        sources = self.config.layer_sources[layer]
        return tuple(torch.cat([features[s][j] for s in sources], dim=-1) for j in range(2))

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the map computes in: its weights' (``adapter.to(torch.bfloat16)`` maps in bf16)."""
        weight = next(self.parameters(), None)
        return torch.float32 if weight is None else weight.dtype

    def non_finite(self) -> list[str]:
        """Names of the floating-point tensors (parameters and buffers) that hold NaN or inf: the one check every
        fit, training step and save runs before trusting the weights."""
        return non_finite(self.state_dict(keep_vars=True).items())

    def affine_maps(self, layer: int) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
        """Layer ``layer``'s map as ``((k_weight, k_bias), (v_weight, v_bias))`` (weights ``[in, out]``, biases
        ``[out]``) when it is affine, else None. With them the fast path maps each chunk of rows with one ``addmm``
        straight into the receiver cache instead of copying :meth:`map_layer`'s output there."""
        return None

    def factored_maps(self, layer: int) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                                                 tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None:
        """Layer ``layer``'s map as ``((k_a, k_b, k_bias), (v_a, v_b, v_bias))`` when it is an affine map of low rank
        ``y = (x @ a) @ b + bias`` (``a`` ``[in, r]``, ``b`` ``[r, out]``, ``bias`` ``[out]``), else None. With them
        the fast path does ``x @ a`` into a small scratch buffer, then one ``addmm`` straight into the cache:
        ``r * (in + out)`` multiply-adds per row instead of ``in * out``."""
        return None


def load_adapter(folder: str | Path) -> PairAdapter:
    """The adapter saved in ``folder``, frozen and in eval mode: its integrity checked (:func:`read_package`), its
    tensors checked against the shapes its method and config imply, then loaded. Any registered method."""
    config, state, weights_path = read_package(folder)
    method = get_method(config.method)
    with torch.device("meta"):  # the shapes the config implies, without allocating them (an edited config
        expected = method(config).state_dict()  # could ask for terabytes)
    check_tensors(weights_path, state, expected, config)
    adapter = method(config)
    adapter.load_state_dict(state)
    return adapter.requires_grad_(False).eval()
