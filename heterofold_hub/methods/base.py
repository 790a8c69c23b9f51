"""The one base class every transfer method implements (kvpress style: one abstract method).

A method maps *aligned, un-rotated* sender features to one receiver layer's keys and values. Token
alignment, RoPE and cache assembly are shared (``heterofold_hub.transfer.reference``), so a new method is one
folder with a config dataclass, a ``PairAdapter`` subclass and its ``fit``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, fields

import torch
from torch import nn

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
        raise HeteroFoldError(f"Unknown method {name!r}; valid methods: {', '.join(sorted(METHODS))}.")
    return METHODS[name]


@dataclass
class AdapterConfig:
    """What an adapter was fitted for and how. It is the adapter's on-disk JSON (``adapter_config.json``).

    ``layer_sources[r]`` lists the sender layers whose features feed receiver layer ``r``. The pair identity
    (ids, revisions, tokenizer fingerprints, KV specs) is what loading checks against the models in use.
    """

    method: str
    sender: str
    receiver: str
    sender_spec: dict
    receiver_spec: dict
    layer_sources: list[list[int]]
    min_native: int = 1
    extra: dict = field(default_factory=dict)  # method-specific settings
    sender_revision: str | None = None
    receiver_revision: str | None = None
    sender_tokenizer: str | None = None  # tokenizer fingerprints (heterofold_hub.base_models.fingerprint), "sha256:..."
    receiver_tokenizer: str | None = None
    library_version: str | None = None
    training_args: dict = field(default_factory=dict)  # how it was fitted (hf-fold train arguments)
    training_windows: int | None = None
    # The saved adapter.safetensors ("sha256:..." and its length): written by save_adapter, checked by
    # load_adapter, so a truncated or altered weights file is refused; None in older configs (not checked).
    weights_sha256: str | None = None
    weights_bytes: int | None = None

    def __post_init__(self):
        n_recv, n_send = self.receiver_spec["num_layers"], self.sender_spec["num_layers"]
        if len(self.layer_sources) != n_recv:
            raise HeteroFoldError(
                f"layer_sources has {len(self.layer_sources)} entries but the receiver has {n_recv} layers."
            )
        widths = {len(s) for s in self.layer_sources}
        if len(widths) != 1 or any(not 0 <= i < n_send for s in self.layer_sources for i in s):
            raise HeteroFoldError(
                f"layer_sources must list the same number of sender layers (0..{n_send - 1}) for every "
                f"receiver layer; got {self.layer_sources}."
            )

    @property
    def in_features(self) -> int:
        """Input width of each receiver layer's map: sources x sender kv_heads x head_dim."""
        return len(self.layer_sources[0]) * self.sender_spec["kv_heads"] * self.sender_spec["head_dim"]

    @property
    def out_features(self) -> int:
        return self.receiver_spec["kv_heads"] * self.receiver_spec["head_dim"]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "AdapterConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HeteroFoldError(f"Unknown adapter config fields {unknown}; known: {sorted(known)}.")
        return cls(**data)


@dataclass
class MethodOptions:
    """A method's fit options (PEFT's config-as-dataclass): typed fields with their defaults, checked in
    ``__post_init__``. Built from keyword arguments by :meth:`from_kwargs`, where an unknown name is an error
    rather than silently dropped, so "same data and budget" is what actually ran."""

    @classmethod
    def from_kwargs(cls, method: str, options: dict) -> "MethodOptions":
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise HeteroFoldError(f"{method}: unknown option(s) {', '.join(unknown)}; its options are "
                                  f"{', '.join(known)} ({cls.__name__}).")
        return cls(**options)

    def to_dict(self) -> dict:
        return asdict(self)


def non_finite(named_tensors) -> list[str]:
    """Names, from ``(name, tensor)`` pairs, of the floating-point tensors holding NaN or inf."""
    return [name for name, t in named_tensors if t.is_floating_point() and not torch.isfinite(t).all()]


class PairAdapter(nn.Module, ABC):
    """Maps one (sender, receiver) pair's aligned sender features to receiver K/V."""

    method: str = "base"

    def __init__(self, config: AdapterConfig):
        super().__init__()
        self.config = config

    def save_pretrained(self, folder) -> "Path":
        """Write ``adapter_config.json`` and ``adapter.safetensors`` (never base-model weights)."""
        from heterofold_hub.hub.package import save_adapter

        return save_adapter(self, folder)

    @classmethod
    def from_pretrained(cls, folder) -> "PairAdapter":
        """The adapter saved in ``folder`` (any registered method; pickle-free)."""
        from heterofold_hub.hub.package import load_adapter

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
