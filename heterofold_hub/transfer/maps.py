"""The map kinds of the fast path (:mod:`heterofold_hub.transfer.fast`): how one kind of adapter writes a group of
receiver layers from their gathered sender sources, chunk by chunk, and the workspace they share.

:func:`layer_map` picks the kind once per stream, from what the adapter offers:

- :class:`AffineMap` (``adapter.affine_maps``: HeteroFold, KV Ridge, recoloring): per chunk one ``addmm`` per layer,
  keys then values, straight into the receiver cache (the reference path's rounding), keys re-rotated in place;
- :class:`FactoredMap` (``adapter.factored_maps``: low rank): ``x @ a`` into a small scratch buffer first, then that
  ``addmm`` from it, so the full ``[in, out]`` product is never formed;
- :class:`AnyMap` (any other map, e.g. Dense Latent's MLP): ``adapter.map_layer`` on the gathered keys and values,
  turned and rounded once into the cache.

Each kind also says which dtype the stream gathers and turns in (:attr:`LayerMap.compute_dtype`) and how many bits of
temporaries per row it keeps alive, its gathered input included (:meth:`LayerMap.row_bits`), which sizes the stream's
chunks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.transfer.kvcache import LayerKV
from heterofold_hub.transfer.plan import Turn


@dataclass
class Chunk:
    """A run of ``rows`` of the plan's receiver rows ``[B * Tr]`` (batch, then position), written to ``out`` rows of
    a receiver layer flattened to ``[B * T, Hr * Dr]`` (``T`` is ``Tr``, or a sliding-window layer's window).

    ``sender_rows`` ``[n * Hs]`` index a sender layer flattened to ``[B * Hs * Ts, Ds]`` in (batch, position,
    head) order, so a gather lands token-major, ready for the map; the turns (per sender layer and per receiver
    layer) are the plan's tables at ``rows``."""

    rows: slice
    out: slice
    sender_rows: torch.Tensor
    unrotate: list[Turn | None]
    rotate: list[Turn | None]

    @property
    def size(self) -> int:
        return self.rows.stop - self.rows.start


@dataclass
class LayerWork:
    """Receiver layers being mapped from the same sources: those source sender layers, the chunks of rows the
    layers keep and the sources flattened to ``[B * Hs * Ts, Ds]`` (keys, values)."""

    sources: list[int]
    chunks: list[Chunk]
    flat: list[LayerKV]


@dataclass
class Workspace:
    """What every map kind of one stream shares: scratch buffers sized for its largest chunk (``rows``), made once
    and reused by every chunk and layer (a fresh allocation per layer costs page faults), the gather of a chunk's
    input and the turn of mapped keys, through the C kernels (``kernels``, CPU float32) or torch ops.

    ``sender_heads`` and ``sender_dim``: the sender's KV heads and head dim; ``dtype``: the compute dtype."""

    kernels: object | None
    sender_heads: int
    sender_dim: int
    dtype: torch.dtype
    device: torch.device
    rows: int
    scratch: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def sender_width(self) -> int:
        return self.sender_heads * self.sender_dim

    def buffer(self, name: str, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Scratch ``[rows, *shape]`` in ``dtype`` (default the compute dtype)."""
        buffer = self.scratch.get(name)
        if buffer is None or buffer.shape[1:] != shape:
            buffer = self.scratch[name] = torch.empty(self.rows, *shape, dtype=dtype or self.dtype, device=self.device)
        return buffer

    def gather(self, work: LayerWork, kind: int, chunk: Chunk, inputs: torch.Tensor) -> torch.Tensor:
        """The map's input at the chunk's rows, ``[n, in]`` (the first rows of ``inputs``): the keys (``kind`` 0,
        un-rotated) or values (1) of every source, gathered token-major into its block of features."""
        n, width = chunk.size, self.sender_width
        inputs = inputs[:n]
        for j, (s, layer) in enumerate(zip(work.sources, work.flat)):
            turn = chunk.unrotate[s] if kind == 0 else None
            source, block = layer[kind], inputs[:, j * width:(j + 1) * width].unflatten(-1, (self.sender_heads, -1))
            if self.kernels is not None and source.dtype == torch.float32:
                self.kernels.gather_turn(source, chunk.sender_rows, block, turn)
                continue
            gathered = source.index_select(0, chunk.sender_rows).view(block.shape)  # [n, Hs, Ds]
            if turn is None:
                block.copy_(gathered)
            else:
                turn.apply(gathered, block)
        return inputs

    def turn(self, x: torch.Tensor, turn: Turn) -> None:
        """``x`` ``[n, Hr, Dr]`` (rows of the compute dtype) turned in place."""
        if self.kernels is not None:
            self.kernels.turn(x, turn)
        else:
            turn.apply(x)

    def widen(self, x: torch.Tensor, out: torch.Tensor, turn: Turn | None) -> None:
        """bf16 rows ``x`` ``[n, Hr, Dr]`` widened into float32 rows ``out``, turned when ``turn`` is given: one
        pass of the C kernels (only a stream that has them gathers in bf16)."""
        self.kernels.widen_turn(x, out, turn)


Targets = dict[int, tuple[torch.Tensor, torch.Tensor]]  # receiver layer -> its keys and values rows [B * T, Hr, Dr]


class LayerMap(ABC):
    """One kind of adapter map, chosen once per stream by :func:`layer_map`."""

    compute_dtype: torch.dtype  # the dtype of the stream's gathers, turns and scratch

    @abstractmethod
    def row_bits(self, config: AdapterConfig, kernels: object | None) -> int:
        """Bits of temporaries per receiver row that this kind keeps alive at once, its gathered input included,
        in a stream with ``kernels`` (the C kernels, or None)."""

    @abstractmethod
    def write(self, work: LayerWork, targets: Targets, workspace: Workspace) -> None:
        """Map every chunk of ``work`` into ``targets``' rows (keys re-rotated), in the cache's dtype."""


def layer_map(adapter: PairAdapter, device: torch.device, dtype: torch.dtype) -> LayerMap:
    """The kind of map ``adapter`` offers, for a cache of ``dtype`` on ``device``."""
    if adapter.affine_maps(0) is not None:
        return AffineMap(adapter, device, dtype)
    if adapter.factored_maps(0) is not None:
        return FactoredMap(adapter, device, dtype)
    return AnyMap(adapter)


class AffineMap(LayerMap):
    """``y = x @ weight + bias`` per layer (``adapter.affine_maps``: weight ``[in, out]``, bias ``[out]``): per chunk,
    the sources gathered side by side once, then for each layer one ``addmm`` straight into the cache, and keys
    turned in place.

    The matrix products run in the adapter's dtype (:attr:`matmul_dtype`). On the CPU a narrower adapter beside a
    float32 cache keeps the gathers, turns and scratch in float32: bf16 products are faster there (AVX512-BF16,
    AMX), the one-pass kernels need float32, and a turn rounded to bf16 would add error. Then the input is
    converted once per chunk, and each product lands in a narrow scratch that is copied into the cache before the
    turn. With the C kernels and bf16 products (:meth:`narrow_gathers`) neither conversion is a pass of its own: the
    gather rounds its float32 results to bf16 as it writes them, and the widening into the cache turns the keys on
    the way, with the same roundings as converting after. A cache of another dtype than the compute dtype is written
    through a scratch, rounded once after the turn."""

    def __init__(self, adapter: PairAdapter, device: torch.device, dtype: torch.dtype):
        self.adapter = adapter
        self.matmul_dtype = adapter.compute_dtype
        narrow_products = device.type == "cpu" and dtype == torch.float32
        self.compute_dtype = torch.float32 if narrow_products else self.matmul_dtype
        self.direct = dtype == self.compute_dtype  # map straight into the cache, no rounding step
        self.converted = self.matmul_dtype != self.compute_dtype

    def weights(self, layer: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Layer ``layer``'s key map and value map."""
        return self.adapter.affine_maps(layer)

    def product(self, x: torch.Tensor, weights: tuple[torch.Tensor, ...], out: torch.Tensor,
                workspace: Workspace) -> torch.Tensor:
        """``x @ weight + bias`` ``[n, out]`` written to ``out``, with the reference path's rounding."""
        weight, bias = weights
        return torch.addmm(bias, x, weight, out=out)

    def narrow_gathers(self, kernels: object | None) -> bool:
        """Whether the stream gathers straight into the products' dtype: bf16 products beside float32 gathers, with
        the C kernels (whose rounding to bf16 is torch's)."""
        return self.converted and self.matmul_dtype == torch.bfloat16 and kernels is not None

    def row_bits(self, config: AdapterConfig, kernels: object | None) -> int:
        wide, narrow = torch.finfo(self.compute_dtype).bits, torch.finfo(self.matmul_dtype).bits
        bits = 0 if self.direct else config.out_features * wide
        if self.narrow_gathers(kernels):
            return bits + (config.in_features + config.out_features) * narrow
        bits += config.in_features * wide
        if self.converted:
            bits += (config.in_features + config.out_features) * narrow
        return bits

    def write(self, work: LayerWork, targets: Targets, workspace: Workspace) -> None:
        maps = {r: self.weights(r) for r in targets}
        for kind in (0, 1):  # keys, then values
            self._write(work, kind, {r: (maps[r][kind], targets[r][kind]) for r in targets}, workspace)

    def _write(self, work: LayerWork, kind: int, targets: dict[int, tuple[tuple[torch.Tensor, ...], torch.Tensor]],
               workspace: Workspace) -> None:
        """Keys (``kind`` 0) or values (1): ``targets`` ``{r: (map, layer rows [B * T, Hr, Dr])}``."""
        if self.narrow_gathers(workspace.kernels):
            return self._write_narrow(work, kind, targets, workspace)
        inputs = workspace.buffer("inputs", len(work.flat) * workspace.sender_width)
        shape = next(iter(targets.values()))[1].shape[1:]  # [Hr, Dr]
        mapped = None if self.direct else workspace.buffer("mapped", *shape)
        if self.converted:
            narrow_inputs = workspace.buffer("narrow inputs", inputs.shape[1], dtype=self.matmul_dtype)
            narrow_out = workspace.buffer("narrow mapped", shape.numel(), dtype=self.matmul_dtype)
        for chunk in work.chunks:
            n = chunk.size
            x = workspace.gather(work, kind, chunk, inputs)
            if self.converted:
                x = narrow_inputs[:n].copy_(x)
            for r, (weights, layer) in targets.items():
                out = layer[chunk.out] if self.direct else mapped[:n]
                if self.converted:
                    out.view(n, -1).copy_(self.product(x, weights, narrow_out[:n], workspace))
                else:
                    self.product(x, weights, out.view(n, -1), workspace)
                rotate = chunk.rotate[r]
                if kind == 0 and rotate is not None:
                    workspace.turn(out, rotate)
                if not self.direct:  # rounded once, after the map and the turn
                    layer[chunk.out] = out

    def _write_narrow(self, work: LayerWork, kind: int,
                      targets: dict[int, tuple[tuple[torch.Tensor, ...], torch.Tensor]], workspace: Workspace) -> None:
        """:meth:`_write` with the input gathered straight into bf16 and each bf16 product widened into the
        cache's rows (a float32 cache: the map writes it directly), keys turned as they are widened."""
        inputs = workspace.buffer("narrow inputs", len(work.flat) * workspace.sender_width, dtype=self.matmul_dtype)
        shape = next(iter(targets.values()))[1].shape[1:]  # [Hr, Dr]
        products = workspace.buffer("narrow mapped", *shape, dtype=self.matmul_dtype)
        for chunk in work.chunks:
            n = chunk.size
            x, product = workspace.gather(work, kind, chunk, inputs), products[:n]
            for r, (weights, layer) in targets.items():
                self.product(x, weights, product.view(n, -1), workspace)
                workspace.widen(product, layer[chunk.out], chunk.rotate[r] if kind == 0 else None)


class FactoredMap(AffineMap):
    """An affine map of low rank, ``y = (x @ a) @ b + bias`` (``adapter.factored_maps``: ``a`` ``[in, r]``, ``b``
    ``[r, out]``): ``x @ a`` into a small scratch buffer, then :class:`AffineMap`'s ``addmm`` from it, so the big
    product is never formed (``r * (in + out)`` multiply-adds per row instead of ``in * out``)."""

    def __init__(self, adapter: PairAdapter, device: torch.device, dtype: torch.dtype):
        super().__init__(adapter, device, dtype)
        self.rank = adapter.factored_maps(0)[0][0].shape[1]

    def weights(self, layer: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        return self.adapter.factored_maps(layer)

    def product(self, x: torch.Tensor, weights: tuple[torch.Tensor, ...], out: torch.Tensor,
                workspace: Workspace) -> torch.Tensor:
        a, b, bias = weights
        low = workspace.buffer("low rank", self.rank, dtype=self.matmul_dtype)[:x.shape[0]]
        return torch.addmm(bias, torch.mm(x, a, out=low), b, out=out)

    def row_bits(self, config: AdapterConfig, kernels: object | None) -> int:
        return super().row_bits(config, kernels) + self.rank * torch.finfo(self.matmul_dtype).bits


class AnyMap(LayerMap):
    """Any other map (e.g. Dense Latent's MLP): ``adapter.map_layer`` on each chunk's gathered keys and values, keys
    turned in the compute dtype (the adapter's), both rounded once into the cache. Keys and values are mapped
    together, so both inputs and both outputs are alive at once."""

    def __init__(self, adapter: PairAdapter):
        self.adapter = adapter
        self.compute_dtype = adapter.compute_dtype

    def row_bits(self, config: AdapterConfig, kernels: object | None) -> int:
        return 2 * (config.in_features + config.out_features) * torch.finfo(self.compute_dtype).bits

    def write(self, work: LayerWork, targets: Targets, workspace: Workspace) -> None:
        inputs = [workspace.buffer(name, len(work.flat) * workspace.sender_width) for name in ("inputs", "inputs_v")]
        for r, (keys, values) in targets.items():
            for chunk in work.chunks:
                n = chunk.size
                y_k, y_v = self.adapter.map_layer(
                    r, *(workspace.gather(work, kind, chunk, inputs[kind])[None] for kind in (0, 1)))
                y_k = y_k.view(n, *keys.shape[1:])  # [1, n, out] -> [n, Hr, Dr]
                rotate = chunk.rotate[r]
                if rotate is not None:
                    workspace.turn(y_k, rotate)
                keys[chunk.out] = y_k
                values[chunk.out] = y_v.view(n, *values.shape[1:])
