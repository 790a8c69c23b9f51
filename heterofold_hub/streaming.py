"""The fast transfer path: map a sender cache into a receiver cache layer by layer, in chunks of rows.

Each sender layer is gathered token-major (one ``index_select`` of contiguous head rows per chunk), keys are
un-rotated and the receiver layer's map is applied. An affine map (HeteroFold, KV Ridge, recoloring) writes
straight into the receiver cache: keys by one ``addmm`` over the sources' un-rotated keys side by side (the
reference path's rounding), then re-rotated in place; values by one ``addmm`` per source, accumulated, in
larger chunks since they need no turn. The cache layers are stored token-major (``[B, Tr, Hr, Dr]`` memory,
handed out as ``[B, Hr, Tr, Dr]`` views, the layout of transformers' own value states), so no transpose is
copied. No Python loop runs over tokens or heads, RoPE tables come precomputed from the
:class:`~heterofold_hub.plan.TransferPlan`, and temporaries are sized per chunk, so peak extra memory stays
about one receiver layer whatever the context length. The reference path (``heterofold_hub.transfer``, which
keeps gradients for training) gives the same cache to float rounding; a test holds them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import HeteroFoldError, PairMismatchError
from .kvcache import LayerKV, build_cache
from .methods.base import PairAdapter
from .plan import TransferPlan, Turn

MIN_CHUNK_TOKENS = 32  # below this, per-op overhead outweighs what a smaller chunk saves
TEMPORARY_BUDGET = 1.5  # a chunk's temporaries, in receiver layers (K + V) of cache bytes


@dataclass
class Chunk:
    """A run of ``rows`` of a receiver layer flattened to ``[B * Tr, Hr * Dr]`` (batch, then position).

    ``sender_rows`` ``[n * Hs]`` index a sender layer flattened to ``[B * Hs * Ts, Ds]`` in (batch, position,
    head) order, so a gather lands token-major, ready for the map; the turns are the plan's tables at ``rows``."""

    rows: slice
    sender_rows: torch.Tensor
    unrotate: Turn | None
    rotate: Turn | None

    @property
    def size(self) -> int:
        return self.rows.stop - self.rows.start


class LayerStream:
    """Map sender layers as they arrive, for engines that load or receive KV one layer at a time.

    ::

        stream = LayerStream(adapter, plan, dtype=torch.bfloat16)
        for i, (keys, values) in enumerate(sender_layers):      # each [B, Hs, Ts, Ds]
            for r, (k, v) in stream.push(i, keys, values):      # receiver layers now complete
                engine.load_layer(r, k, v)                      # each [B, Hr, Tr, Dr]

    A receiver layer is mapped as soon as all its source sender layers (``config.layer_sources``) have
    arrived; a sender layer is let go once no pending receiver layer needs it. ``chunk_tokens`` sets the rows
    per chunk (default: as many as keep a chunk's temporaries within ``TEMPORARY_BUDGET`` receiver layers, at
    least ``MIN_CHUNK_TOKENS``).
    """

    def __init__(self, adapter: PairAdapter, plan: TransferPlan, *, dtype: torch.dtype, chunk_tokens: int | None = None):
        config = adapter.config
        if plan.alignment.native_prefix < config.min_native:
            raise HeteroFoldError(f"This plan computes {plan.alignment.native_prefix} prefix token(s) natively but the "
                                  f"adapter needs at least {config.min_native}; build the plan with this adapter's pipeline.")
        if plan.sender_rows.shape[1] != config.sender_spec["kv_heads"]:
            raise PairMismatchError(f"This plan was built for a sender with {plan.sender_rows.shape[1]} KV heads but "
                                    f"the adapter's sender {config.sender!r} has {config.sender_spec['kv_heads']}; "
                                    "build the plan with this adapter's pipeline.")
        self.adapter, self.plan, self.dtype = adapter, plan, dtype
        self.device = plan.native[0][0].device
        self.compute_dtype = next(adapter.parameters()).dtype
        self.sender_spec, self.receiver_spec = config.sender_spec, config.receiver_spec
        self.sender_width = self.sender_spec["kv_heads"] * self.sender_spec["head_dim"]
        self.affine = adapter.affine_maps(0) is not None
        self.pending = {r: set(sources) for r, sources in enumerate(config.layer_sources)}
        self.arrived: dict[int, LayerKV] = {}
        self.mapped: dict[int, LayerKV] = {}
        self.direct = self.affine and dtype == self.compute_dtype  # map straight into the cache, no rounding step
        key_rows, value_rows = self._temporaries_per_row()
        self.key_chunks = self._chunks(chunk_tokens or self._rows_within_budget(key_rows))
        self.value_chunks = self._chunks(chunk_tokens or self._rows_within_budget(value_rows)) if self.affine else None

    def _temporaries_per_row(self) -> tuple[int, int]:
        """Bytes per receiver row of the most temporaries alive at once while mapping keys (the key input and a
        gathered source, plus the source's swapped copy while un-rotating or the output's while re-rotating) and
        while mapping values (a gathered source). A map other than affine maps both at once, adding the value
        input and its two outputs; a cache dtype other than the compute dtype adds the outputs before rounding."""
        c, width = self.adapter.config, self.sender_width
        keys, values = c.in_features + width + max(width, c.out_features), width
        if not self.affine:
            keys += c.in_features + 2 * c.out_features
        elif not self.direct:
            keys, values = keys + c.out_features, values + c.out_features
        size = torch.finfo(self.compute_dtype).bits // 8
        return keys * size, values * size

    def _rows_within_budget(self, bytes_per_row: int) -> int:
        """Rows per chunk whose temporaries fit in ``TEMPORARY_BUDGET`` receiver layers (K + V)."""
        rows, width = self.plan.sender_rows.shape[0], 2 * self.adapter.config.out_features
        layer_bytes = rows * width * torch.finfo(self.dtype).bits // 8
        return max(MIN_CHUNK_TOKENS, int(TEMPORARY_BUDGET * layer_bytes / bytes_per_row))

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

    def _chunks(self, size: int) -> list[Chunk]:
        """Chunks of ``size`` receiver rows, with everything about them that no layer changes."""
        plan, rows = self.plan, self.plan.sender_rows  # [B * Tr, Hs]
        size = -(-rows.shape[0] // -(-rows.shape[0] // size))  # as many chunks as needed, of even sizes
        chunks = []
        for start in range(0, rows.shape[0], size):
            span = slice(start, min(start + size, rows.shape[0]))
            chunks.append(Chunk(
                rows=span,
                sender_rows=rows[span].flatten(),
                unrotate=plan.unrotate.at(span) if plan.unrotate is not None else None,
                rotate=plan.rotate.at(span) if plan.rotate is not None else None,
            ))
        return chunks

    @torch.no_grad()
    def _map_layer(self, r: int, sources: list[LayerKV]) -> LayerKV:
        """Receiver layer ``r``'s keys and values ``[B, Hr, Tr, Dr]`` from its source sender layers."""
        plan, spec = self.plan, self.receiver_spec
        shape = (plan.batch_size, plan.cache_tokens, spec["kv_heads"], spec["head_dim"])
        keys = torch.empty(shape, dtype=self.dtype, device=self.device)  # token-major, like the map's output
        values = torch.empty_like(keys)
        key_rows, value_rows = keys.view(-1, *shape[2:]), values.view(-1, *shape[2:])  # [B * Tr, Hr, Dr]
        s_dim = self.sender_spec["head_dim"]
        flat = [(k.to(self.device).reshape(-1, s_dim), v.to(self.device).reshape(-1, s_dim)) for k, v in sources]
        if self.affine:
            (k_weight, k_bias), (v_weight, v_bias) = self.adapter.affine_maps(r)
            self._map_keys(flat, k_weight, k_bias, key_rows)
            self._map_values(flat, v_weight, v_bias, value_rows)
        else:
            self._map_any(r, flat, key_rows, value_rows)
        native_k, native_v = plan.native[r]  # [B, Hr, P, Dr]
        key_rows.index_copy_(0, plan.native_rows, native_k.transpose(1, 2).flatten(0, 1).to(self.dtype))
        value_rows.index_copy_(0, plan.native_rows, native_v.transpose(1, 2).flatten(0, 1).to(self.dtype))
        key_rows.index_fill_(0, plan.padding_rows, 0)
        value_rows.index_fill_(0, plan.padding_rows, 0)
        return keys.transpose(1, 2), values.transpose(1, 2)

    def _gather(self, source: torch.Tensor, chunk: Chunk, out: torch.Tensor) -> torch.Tensor:
        """Chunk rows of one flattened sender layer ``[B * Hs * Ts, Ds]``, token-major, into ``out``
        ``[>= n, Hs, Ds]`` (a buffer in the compute dtype); returns its first ``n`` rows."""
        out, dim = out[:chunk.size], self.sender_spec["head_dim"]
        if source.dtype == out.dtype:
            torch.index_select(source, 0, chunk.sender_rows, out=out.view(-1, dim))
        else:
            out.view(-1, dim).copy_(source.index_select(0, chunk.sender_rows))
        return out

    def _buffer(self, chunks: list[Chunk], *shape: int) -> torch.Tensor:
        """Scratch for the largest of ``chunks``, ``[rows, *shape]`` in the compute dtype, reused by each chunk."""
        return torch.empty(chunks[0].size, *shape, dtype=self.compute_dtype, device=self.device)

    def _map_keys(self, flat: list[LayerKV], weight: torch.Tensor, bias: torch.Tensor, keys: torch.Tensor) -> None:
        """Keys ``[B * Tr, Hr, Dr]`` of a layer with an affine map: per chunk, every source un-rotated into its block
        of one input and one ``addmm`` (rounding as the reference path does), then the turn, in place."""
        inputs = self._buffer(self.key_chunks, len(flat) * self.sender_width)
        gathered = self._buffer(self.key_chunks, self.sender_spec["kv_heads"], self.sender_spec["head_dim"])
        mapped = None if self.direct else self._buffer(self.key_chunks, *keys.shape[1:])
        for chunk in self.key_chunks:
            out = keys[chunk.rows] if self.direct else mapped[:chunk.size]
            torch.addmm(bias, self._key_input(flat, chunk, inputs, gathered), weight, out=out.view(chunk.size, -1))
            if chunk.rotate is not None:
                chunk.rotate.apply(out)
            if not self.direct:  # rounded once, after the map and the turn
                keys[chunk.rows] = out

    def _map_values(self, flat: list[LayerKV], weight: torch.Tensor, bias: torch.Tensor, values: torch.Tensor) -> None:
        """Values ``[B * Tr, Hr, Dr]`` of a layer with an affine map: nothing to turn, so each source's gather feeds
        its own ``addmm`` on its block of the weight's rows, accumulated in the output."""
        width = self.sender_width
        gathered = self._buffer(self.value_chunks, self.sender_spec["kv_heads"], self.sender_spec["head_dim"])
        mapped = None if self.direct else self._buffer(self.value_chunks, values.shape[1] * values.shape[2])
        for chunk in self.value_chunks:
            out = values[chunk.rows].view(chunk.size, -1) if self.direct else mapped[:chunk.size]
            for j, (_, v_s) in enumerate(flat):
                x, block = self._gather(v_s, chunk, gathered).view(chunk.size, width), weight[j * width:(j + 1) * width]
                if j == 0:
                    torch.addmm(bias, x, block, out=out)
                else:
                    out.addmm_(x, block)
            if not self.direct:
                values[chunk.rows] = out.view(-1, *values.shape[1:])

    def _map_any(self, r: int, flat: list[LayerKV], keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keys and values ``[B * Tr, Hr, Dr]`` through ``adapter.map_layer`` on the concatenated sources (any map,
        e.g. Dense Latent's MLP), turned in the compute dtype and rounded once into the cache."""
        width = self.sender_width
        key_inputs, value_inputs = (self._buffer(self.key_chunks, len(flat) * width) for _ in "kv")
        gathered = self._buffer(self.key_chunks, self.sender_spec["kv_heads"], self.sender_spec["head_dim"])
        for chunk in self.key_chunks:
            n = chunk.size
            for j, (_, v_s) in enumerate(flat):
                value_inputs[:n, j * width:(j + 1) * width].copy_(self._gather(v_s, chunk, gathered).view(n, width))
            y_k, y_v = self.adapter.map_layer(r, self._key_input(flat, chunk, key_inputs, gathered)[None],
                                              value_inputs[None, :n])  # [1, n, in] -> [1, n, out]
            y_k = y_k.view(n, *keys.shape[1:])
            keys[chunk.rows] = y_k if chunk.rotate is None else chunk.rotate.apply(y_k)
            values[chunk.rows] = y_v.view(n, *values.shape[1:])

    def _key_input(self, flat: list[LayerKV], chunk: Chunk, inputs: torch.Tensor, gathered: torch.Tensor) -> torch.Tensor:
        """The map's key input at the chunk's rows, ``[n, in]`` (in ``inputs``): each source's keys gathered and
        un-rotated into its block."""
        inputs, width = inputs[:chunk.size], self.sender_width
        for j, (k_s, _) in enumerate(flat):
            block = inputs[:, j * width:(j + 1) * width].unflatten(-1, (self.sender_spec["kv_heads"], -1))
            keys = self._gather(k_s, chunk, gathered)
            if chunk.unrotate is None:
                block.copy_(keys)
            else:
                chunk.unrotate.apply(keys, block)
        return inputs


def map_cache(adapter: PairAdapter, plan: TransferPlan, sender_layers: list[LayerKV], *, dtype: torch.dtype,
              chunk_tokens: int | None = None):
    """A receiver ``DynamicCache`` from a whole sender cache (per layer ``[B, Hs, Ts, Ds]``): :class:`LayerStream`
    fed every sender layer the adapter uses, in order."""
    stream = LayerStream(adapter, plan, dtype=dtype, chunk_tokens=chunk_tokens)
    used = sorted({s for sources in adapter.config.layer_sources for s in sources})
    for layer in used:
        stream.push(layer, *sender_layers[layer])
    return stream.cache()
