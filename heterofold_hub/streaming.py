"""The fast transfer path: map a sender cache into a receiver cache layer by layer, in chunks of tokens.

Per receiver layer and chunk of positions: gather the aligned rows of its source sender layers, un-rotate
the keys straight into one input buffer, apply the layer's map (``adapter.map_layer``), re-rotate straight
into the receiver cache. No Python loop runs over tokens or heads, RoPE tables come precomputed from the
:class:`~heterofold_hub.plan.TransferPlan`, and temporaries live for one chunk, so peak extra memory stays
about one receiver layer whatever the context length. The reference path (``heterofold_hub.transfer``,
which keeps gradients for training) gives the same cache to float rounding; a test holds them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import HeteroFoldError, PairMismatchError
from .kvcache import LayerKV, build_cache
from .methods.base import PairAdapter
from .plan import TransferPlan, Turn
from .transfer import _overwrite

MIN_CHUNK_TOKENS = 32  # below this, per-op overhead outweighs what a smaller chunk saves
TEMPORARY_BUDGET = 1.5  # a chunk's temporaries, in receiver layers (K + V) of cache bytes


@dataclass
class Chunk:
    """A run of receiver positions: ``rows`` ``[B * Hs * Tc]`` index a sender layer flattened to
    ``[B * Hs * Ts, Ds]`` in (batch, head, position) order; the turns are the plan's, sliced to the chunk."""

    tokens: slice
    rows: torch.Tensor
    unrotate: Turn | None
    rotate: Turn | None


class LayerStream:
    """Map sender layers as they arrive, for engines that load or receive KV one layer at a time.

    ::

        stream = LayerStream(adapter, plan, dtype=torch.bfloat16)
        for i, (keys, values) in enumerate(sender_layers):      # each [B, Hs, Ts, Ds]
            for r, (k, v) in stream.push(i, keys, values):      # receiver layers now complete
                engine.load_layer(r, k, v)                      # each [B, Hr, Tr, Dr]

    A receiver layer is mapped as soon as all its source sender layers (``config.layer_sources``) have
    arrived; a sender layer is let go once no pending receiver layer needs it. ``chunk_tokens`` bounds the
    temporaries (default: ``TEMPORARY_BUDGET`` receiver layers' worth, at least ``MIN_CHUNK_TOKENS``).
    """

    def __init__(self, adapter: PairAdapter, plan: TransferPlan, *, dtype: torch.dtype, chunk_tokens: int | None = None):
        config = adapter.config
        if plan.alignment.native_prefix < config.min_native:
            raise HeteroFoldError(f"This plan computes {plan.alignment.native_prefix} prefix token(s) natively but the "
                                  f"adapter needs at least {config.min_native}; build the plan with this adapter's pipeline.")
        self.adapter, self.plan, self.dtype = adapter, plan, dtype
        self.device = plan.native[0][0].device
        self.compute_dtype = next(adapter.parameters()).dtype
        self.sender_spec, self.receiver_spec = config.sender_spec, config.receiver_spec
        self.sender_width = self.sender_spec["kv_heads"] * self.sender_spec["head_dim"]
        self.pending = {r: set(sources) for r, sources in enumerate(config.layer_sources)}
        self.arrived: dict[int, LayerKV] = {}
        self.mapped: dict[int, LayerKV] = {}
        self.chunk_tokens = chunk_tokens or self._default_chunk()
        self.chunks = self._chunks()
        self.buffer: torch.Tensor | None = None
        self.native_at = plan.alignment.native_mask.to(self.device)  # [B, Tr]: positions the receiver computed
        padding = ~plan.attention_mask[:, :-1].bool().to(self.device)
        self.padding = padding[:, None, :, None] if bool(padding.any()) else None

    def _default_chunk(self) -> int:
        """Tokens per chunk so that a chunk's temporaries fit in ``TEMPORARY_BUDGET`` receiver layers: the map's
        inputs and outputs for K and V, the gathered K and V of one source and the swapped halves of a K."""
        c = self.adapter.config
        per_token = (2 * c.in_features + 3 * self.sender_width + 3 * c.out_features) * torch.finfo(self.compute_dtype).bits // 8
        layer_per_token = 2 * c.out_features * torch.finfo(self.dtype).bits // 8
        return max(MIN_CHUNK_TOKENS, int(TEMPORARY_BUDGET * self.plan.cache_tokens * layer_per_token / per_token))

    @property
    def done(self) -> bool:
        return not self.pending

    def push(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> list[tuple[int, LayerKV]]:
        """Hand over sender layer ``layer`` (keys/values ``[B, Hs, Ts, Ds]``); returns ``(r, (keys, values))``
        for each receiver layer this completes, keys/values ``[B, Hr, Tr, Dr]`` in ``dtype``."""
        self._check(layer, keys, values)
        self.arrived[layer] = (keys, values)
        ready = sorted(r for r, sources in self.pending.items() if sources <= self.arrived.keys())
        out = []
        for r in ready:
            del self.pending[r]
            sources = [self.arrived[s] for s in self.adapter.config.layer_sources[r]]
            self.mapped[r] = self._map_layer(r, sources)
            out.append((r, self.mapped[r]))
        needed = set().union(*self.pending.values()) if self.pending else set()
        self.arrived = {s: kv for s, kv in self.arrived.items() if s in needed}
        return out

    def cache(self):
        """The receiver ``DynamicCache``, once every sender layer the adapter uses has been pushed."""
        if not self.done:
            missing = sorted(set().union(*self.pending.values()) - self.arrived.keys())
            raise HeteroFoldError(f"Receiver layers {sorted(self.pending)} still wait for sender layers {missing}; "
                                  "push every sender layer before asking for the cache.")
        return build_cache([self.mapped[r] for r in range(len(self.mapped))])

    def _check(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        spec, plan = self.sender_spec, self.plan
        want = (plan.batch_size, spec["kv_heads"], plan.sender_tokens, spec["head_dim"])
        if not 0 <= layer < spec["num_layers"]:
            raise PairMismatchError(f"Sender layer {layer} does not exist: the sender has layers 0..{spec['num_layers'] - 1}.")
        for name, x in (("keys", keys), ("values", values)):
            if tuple(x.shape) != want:
                raise PairMismatchError(
                    f"Sender layer {layer} {name} have shape {tuple(x.shape)} but this plan expects {want} "
                    "([batch, kv_heads, sender tokens, head_dim]). Pass the cache the sender made of the planned texts."
                )

    def _chunks(self) -> list[Chunk]:
        """The chunks of receiver positions, with everything about them that no layer changes."""
        plan, heads = self.plan, self.sender_spec["kv_heads"]
        index = plan.alignment.sender_index.to(self.device)  # [B, Tr]
        base = (torch.arange(plan.batch_size * heads, device=self.device) * plan.sender_tokens).view(-1, heads, 1)
        chunks = []
        for start in range(0, plan.cache_tokens, self.chunk_tokens):
            tokens = slice(start, min(start + self.chunk_tokens, plan.cache_tokens))
            chunks.append(Chunk(
                tokens=tokens,
                rows=(base + index[:, None, tokens]).flatten(),
                unrotate=plan.unrotate.at(tokens, heads_first=True) if plan.unrotate is not None else None,
                rotate=plan.rotate.at(tokens, heads_first=False) if plan.rotate is not None else None,
            ))
        return chunks

    @torch.no_grad()
    def _map_layer(self, r: int, sources: list[LayerKV]) -> LayerKV:
        """Receiver layer ``r``'s keys and values ``[B, Hr, Tr, Dr]`` from its source sender layers."""
        plan, spec = self.plan, self.receiver_spec
        keys = torch.empty(plan.batch_size, spec["kv_heads"], plan.cache_tokens, spec["head_dim"],
                           dtype=self.dtype, device=self.device)
        values = torch.empty_like(keys)
        s_dim = self.sender_spec["head_dim"]
        flat = [(k.to(self.device).reshape(-1, s_dim), v.to(self.device).reshape(-1, s_dim)) for k, v in sources]
        for chunk in self.chunks:
            self._map_chunk(r, flat, chunk, keys, values)
        native_k, native_v = plan.native[r]
        _overwrite(keys, self.native_at, native_k)
        _overwrite(values, self.native_at, native_v)
        if self.padding is not None:
            keys.masked_fill_(self.padding, 0)
            values.masked_fill_(self.padding, 0)
        return keys, values

    def _inputs(self, size: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The map's inputs for ``size`` positions, ``[2, B, size, in]`` (keys, values), and each source's slot in
        them, ``[2, B, size, Hs, Ds]``: views of one buffer that every chunk and layer reuses."""
        if self.buffer is None:
            sources = len(self.adapter.config.layer_sources[0])
            self.buffer = torch.empty(2, self.plan.batch_size, self.chunk_tokens, sources * self.sender_width,
                                      dtype=self.compute_dtype, device=self.device)
        inputs, width = self.buffer[:, :, :size], self.sender_width
        shape = (self.sender_spec["kv_heads"], self.sender_spec["head_dim"])
        return inputs, [inputs[..., j * width:(j + 1) * width].unflatten(-1, shape) for j in range(inputs.shape[-1] // width)]

    def _map_chunk(self, r: int, flat: list[LayerKV], chunk: Chunk, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Positions ``chunk.tokens`` of receiver layer ``r``: gather and un-rotate into the input buffer, map,
        rotate into ``keys``/``values``. Temporaries die with the call."""
        batch, s_heads, s_dim = self.plan.batch_size, self.sender_spec["kv_heads"], self.sender_spec["head_dim"]
        inputs, slots = self._inputs(chunk.tokens.stop - chunk.tokens.start)
        for (k_s, v_s), slot in zip(flat, slots):
            for kind, source in enumerate((k_s, v_s)):
                # contiguous rows: the fast gather; [B, Hs, Tc, Ds]
                rows = source.index_select(0, chunk.rows).view(batch, s_heads, -1, s_dim)
                if kind == 0 and chunk.unrotate is not None:  # un-rotate straight into the slot
                    chunk.unrotate.apply(rows.to(self.compute_dtype), slot[kind].transpose(1, 2))
                else:
                    slot[kind].copy_(rows.transpose(1, 2))
        heads, dim = self.receiver_spec["kv_heads"], self.receiver_spec["head_dim"]
        y_k, y_v = self.adapter.map_layer(r, inputs[0], inputs[1])
        y_k, y_v = y_k.view(batch, -1, heads, dim), y_v.view(batch, -1, heads, dim)
        values[:, :, chunk.tokens].transpose(1, 2).copy_(y_v)
        k_dst = keys[:, :, chunk.tokens].transpose(1, 2)  # [B, Tc, Hr, Dr] view into the cache
        if chunk.rotate is None:
            k_dst.copy_(y_k)
        elif keys.dtype == y_k.dtype:
            chunk.rotate.apply(y_k, k_dst)
        else:  # turn in the compute dtype, round once
            turned = torch.empty_like(y_k)
            chunk.rotate.apply(y_k, turned)
            k_dst.copy_(turned)


def map_cache(adapter: PairAdapter, plan: TransferPlan, sender_layers: list[LayerKV], *, dtype: torch.dtype,
              chunk_tokens: int | None = None):
    """A receiver ``DynamicCache`` from a whole sender cache (per layer ``[B, Hs, Ts, Ds]``): :class:`LayerStream`
    fed every sender layer the adapter uses, in order."""
    stream = LayerStream(adapter, plan, dtype=dtype, chunk_tokens=chunk_tokens)
    used = sorted({s for sources in adapter.config.layer_sources for s in sources})
    for layer in used:
        stream.push(layer, *sender_layers[layer])
    return stream.cache()
