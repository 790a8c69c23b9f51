"""What HeteroFold needs to know about a model's KV cache, read from the model itself.

Keys in a ``transformers`` cache are stored *after* rotary embedding, so a key from one model is only
meaningful to another after un-rotating it with the first model's RoPE and re-rotating it with the
second's. Both directions take cos/sin from the model's own rotary module, so rope scaling, partial
rotary (GPT-NeoX, Phi-3) and theta are exactly what the model uses. Models with absolute positions
(GPT-2) have no rotation to undo.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
import inspect

import torch
from torch import nn

from heterofold_hub.errors import UnsupportedArchitectureError

# model_type -> how its attention stores keys. Every entry is covered by the architecture test matrix;
# an architecture that is not listed is refused rather than mapped with a guessed layout.
ROTATE_HALF = "rotate_half"  # rotary on the first `rotary_dim` dims, halves rotated (HF default)
ABSOLUTE = "absolute"  # no rotary: positions live in the hidden states (GPT-2)
SLIDING = "sliding_attention"  # transformers' name for a sliding-window layer type
DYNAMIC_ROPE = ("dynamic", "longrope")  # rope types whose frequencies depend on the longest position asked for
SUPPORTED_ARCHITECTURES = {
    "llama": ROTATE_HALF,
    "mistral": ROTATE_HALF,
    "qwen2": ROTATE_HALF,
    "gemma": ROTATE_HALF,
    "gemma3_text": ROTATE_HALF,  # per-layer-type RoPE (local / global), QK-norm, sliding-window layers
    "phi3": ROTATE_HALF,
    "gpt_neox": ROTATE_HALF,
    "gpt2": ABSOLUTE,
}


@dataclass(frozen=True)
class KVSpec:
    """Shape of one model's KV cache: ``num_layers`` layers of ``[batch, kv_heads, seq, head_dim]``.

    Models that mix attention types (Gemma 3: sliding-window and full layers, each type with its own RoPE)
    record ``layer_types`` (one per layer) and ``sliding_window``; a sliding layer's cache keeps only the last
    ``sliding_window - 1`` positions. Both stay None for models whose layers are all alike, and are left out
    of :meth:`to_dict` then, so adapters fitted before they existed still match.
    """

    model_type: str
    num_layers: int
    kv_heads: int
    head_dim: int
    rope: str
    max_positions: int
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None

    @property
    def width(self) -> int:
        """Features per token and layer once heads are flattened: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    def layer_type(self, layer: int) -> str | None:
        """Layer ``layer``'s attention type ("sliding_attention", "full_attention"), or None if all are alike."""
        return None if self.layer_types is None else self.layer_types[layer]

    def window(self, layer: int) -> int | None:
        """How many most recent positions layer ``layer``'s cache keeps (None: all of them)."""
        return self.sliding_window - 1 if self.layer_type(layer) == SLIDING else None

    @property
    def windows(self) -> list[int | None]:
        """Per layer, how many most recent positions its cache keeps (None: all)."""
        return [self.window(i) for i in range(self.num_layers)]

    @property
    def full_layers(self) -> list[int]:
        """Layers whose cache keeps every position."""
        return [i for i, window in enumerate(self.windows) if window is None]

    @classmethod
    def from_dict(cls, data: dict) -> "KVSpec":
        types = data.get("layer_types")
        return cls(**{**data, "layer_types": tuple(types) if types is not None else None})

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.layer_types is None:
            del data["layer_types"], data["sliding_window"]
        else:
            data["layer_types"] = list(self.layer_types)
        return data


def _first(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def kv_spec(model_or_config) -> KVSpec:
    """Read the KV layout of a causal LM (or its config); refuse architectures we cannot map."""
    config = getattr(model_or_config, "config", model_or_config)
    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"Architecture {model_type!r} is not supported: HeteroFold maps KV caches of "
            f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}. Its cache layout (rotary style, cache "
            "class) has not been verified, so no cache is produced rather than a wrong one. "
            "Use a supported sender/receiver, or add the architecture to SUPPORTED_ARCHITECTURES "
            "with a test in tests/test_architectures.py."
        )
    heads = _first(config, "num_attention_heads", "n_head")
    hidden = _first(config, "hidden_size", "n_embd")
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    mixed = layer_types is not None and SLIDING in layer_types and window is not None
    return KVSpec(
        model_type=model_type,
        num_layers=_first(config, "num_hidden_layers", "n_layer"),
        kv_heads=_first(config, "num_key_value_heads", default=heads),
        head_dim=_first(config, "head_dim", default=hidden // heads),
        rope=SUPPORTED_ARCHITECTURES[model_type],
        max_positions=_first(config, "max_position_embeddings", "n_positions"),
        layer_types=tuple(layer_types) if mixed else None,
        sliding_window=window if mixed else None,
    )


def rotary_module(model: nn.Module) -> nn.Module | None:
    """The model's own rotary embedding module (``model.model.rotary_emb`` and kin), or None."""
    base = getattr(model, "base_model", model)
    base = getattr(base, "language_model", base)  # multimodal wrappers (Gemma 3) nest the text model
    return getattr(base, "rotary_emb", None)


def rotary_from_config(config) -> nn.Module:
    """The rotary module transformers builds for ``config``'s architecture, without loading any weights."""
    import importlib
    import inspect

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    # the module of the model class transformers builds for this type (gemma3_text lives in models/gemma3/)
    module = importlib.import_module(getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]).__module__)
    found = [c for name, c in vars(module).items()
             if name.endswith("RotaryEmbedding") and inspect.isclass(c) and c.__module__ == module.__name__]
    if len(found) != 1:
        raise UnsupportedArchitectureError(
            f"Cannot tell which rotary embedding {config.model_type!r} uses (found {[c.__name__ for c in found]}). "
            "Load the sender model itself (HeteroFoldModel.from_pretrained(..., load_sender=True))."
        )
    return found[0](config=config)


class Rope:
    """Rotate / un-rotate keys with one model's own RoPE tables.

    ``cos``/``sin`` come from the model's rotary module as ``[batch, seq, rotary_dim]``; only the
    first ``rotary_dim`` dims of each head rotate (partial rotary), the rest pass through. Built from a
    loaded model, or from its config alone (a sender whose weights were never loaded). A module that keeps
    one table per layer type (Gemma 3: local theta 1e4, global 1e6) is asked for the type of each layer.
    """

    def __init__(self, model_or_config):
        self.spec = kv_spec(model_or_config)
        self.module = None
        if self.spec.rope == ROTATE_HALF:
            is_model = isinstance(model_or_config, nn.Module)
            self.module = rotary_module(model_or_config) if is_model else rotary_from_config(model_or_config)
            if self.module is None:
                raise UnsupportedArchitectureError(
                    f"{self.spec.model_type!r} model has no `rotary_emb` module on its base model; "
                    "HeteroFold cannot un-rotate its keys. Load it with transformers' own modeling code."
                )
        forward = inspect.signature(self.module.forward).parameters if self.module is not None else {}
        self.per_layer_type = "layer_type" in forward

    def tables(self, position_ids: torch.Tensor, dtype: torch.dtype,
               layer_type: str | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos, sin ``[batch, seq, rotary_dim]`` for ``position_ids`` ``[batch, seq]`` at layers of ``layer_type``,
        or None (no RoPE)."""
        if self.module is None:
            return None
        probe = torch.empty(0, dtype=torch.float32, device=position_ids.device)
        if self.per_layer_type:
            if layer_type is None:
                raise UnsupportedArchitectureError(f"{self.spec.model_type!r} keeps one RoPE table per layer type; "
                                                   "name the layer type (spec.layer_type(layer)).")
            cos, sin = self.module(probe, position_ids, layer_type)
        else:
            cos, sin = self.module(probe, position_ids)
        return cos.to(dtype), sin.to(dtype)

    @property
    def tables_fixed(self) -> bool:
        """Whether a position's cos/sin never depend on the other positions asked for, so tables for positions
        ``0..N-1`` can be computed once and gathered: true unless a dynamic RoPE (dynamic NTK, longrope) rescales
        its frequencies by the longest position (also true without RoPE: there is nothing to compute)."""
        types = getattr(self.module, "rope_type", None)  # per layer type (Gemma 3) a dict
        types = types.values() if isinstance(types, dict) else [types]
        return not any(t in DYNAMIC_ROPE for t in types)

    def tables_per_layer(self, position_ids: torch.Tensor, dtype: torch.dtype) -> list:
        """:meth:`tables` for every layer (computed once per layer type, shared between layers of a type)."""
        types = [self.spec.layer_type(i) for i in range(self.spec.num_layers)]
        by_type = {t: self.tables(position_ids, dtype, t) for t in set(types)}
        return [by_type[t] for t in types]

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    @classmethod
    def _turn(cls, x: torch.Tensor, tables, inverse: bool) -> torch.Tensor:
        if tables is None:
            return x
        cos, sin = (t.unsqueeze(2) for t in tables)
        rd = cos.shape[-1]
        head = x[..., :rd]
        if inverse:  # rotation by -theta; dividing by cos^2+sin^2 also undoes rope attention scaling (YaRN)
            rot = (head * cos - cls._rotate_half(head) * sin) / (cos * cos + sin * sin)
        else:
            rot = head * cos + cls._rotate_half(head) * sin
        return torch.cat((rot, x[..., rd:]), dim=-1) if rd < x.shape[-1] else rot

    @classmethod
    def rotate(cls, x: torch.Tensor, tables) -> torch.Tensor:
        """Apply RoPE. ``x``: ``[batch, seq, heads, head_dim]``; tables broadcast over heads."""
        return cls._turn(x, tables, inverse=False)

    @classmethod
    def unrotate(cls, x: torch.Tensor, tables) -> torch.Tensor:
        """Invert :meth:`rotate` (same shapes)."""
        return cls._turn(x, tables, inverse=True)
