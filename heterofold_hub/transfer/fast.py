"""The fast transfer path: map a sender cache into a receiver cache layer by layer, in chunks of rows.

Per receiver layer and chunk of rows, every source sender layer's keys (un-rotated) and values are gathered
token-major, side by side, into the map's input, and the adapter's kind of map (:mod:`heterofold_hub.transfer.maps`:
affine, low rank, or any other) writes the chunk's rows into the receiver cache, keys re-rotated. Receiver layers that
read the same sender layers (a deeper receiver has runs of them) share one gathered input per chunk. On CPU in float32
the gathers and turns run in one pass each through a small C kernel (:mod:`heterofold_hub.transfer.kernels`);
elsewhere through torch ops (``index_select``, then ``x * cos + roll(x) * sin`` on whole heads). Cache layers are
stored token-major (``[B, Tr, Hr, Dr]`` memory handed out as ``[B, Hr, Tr, Dr]`` views, the layout of transformers'
own value states), so no transpose is copied. No Python loop runs over tokens or heads, RoPE tables and row indices
come precomputed from the :class:`~heterofold_hub.transfer.plan.TransferPlan`, and scratch is sized per chunk and
reused, so peak extra memory stays about one receiver layer whatever the context length. The reference path
(``heterofold_hub.transfer.reference``, which keeps gradients for training) gives the same cache to float rounding; a
test holds them together, with and without the kernel.
"""

from __future__ import annotations

import torch

from heterofold_hub.transfer import kernels
from heterofold_hub.base_models.arch import KVSpec
from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.transfer.kvcache import LayerKV, build_cache, truncated_sender_layer
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.transfer.maps import Chunk, LayerWork, Workspace, layer_map
from heterofold_hub.transfer.plan import TransferPlan, Turn

NEEDED = "needed"  # the layout of a sliding layer in a recompute's working cache: only the rows its windows read
MIN_CHUNK_TOKENS = 32  # below this, per-op overhead outweighs what a smaller chunk saves
TEMPORARY_BUDGET = 1.5  # a chunk's temporaries, in receiver layers (K + V) of cache bytes


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
    least ``MIN_CHUNK_TOKENS``). The adapter's kind of map (:func:`~heterofold_hub.transfer.maps.layer_map`, chosen
    once) writes the layers; an affine adapter in a narrower dtype than a float32 cache on the CPU
    (``adapter.to(torch.bfloat16)``, ``HeteroFoldModel.from_pretrained(..., map_dtype=torch.bfloat16)``) runs only
    its matrix products in that dtype (:class:`~heterofold_hub.transfer.maps.AffineMap`). ``every_position`` maps
    every row of sliding-window layers too, for a working cache that a recompute reads (:mod:`heterofold_hub.transfer.recompute`); a ``[B, Tr]`` bool tensor instead
    maps only its rows in sliding-window layers (the windows a recompute attends to), every row of full layers,
    and leaves the others zero. ``layers`` limits the stream to those receiver layers (default: every one).
    """

    def __init__(self, adapter: PairAdapter, plan: TransferPlan, *, dtype: torch.dtype, chunk_tokens: int | None = None,
                 every_position: bool | torch.Tensor = False, layers: list[int] | None = None):
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
        self.sender_spec, self.receiver_spec = config.sender_spec, config.receiver_spec
        self.map = layer_map(adapter, self.device, dtype)  # how this adapter's layers are written
        self.compute_dtype = self.map.compute_dtype  # the dtype of the gathers, turns and scratch
        self.pending = {r: set(sources) for r, sources in enumerate(config.layer_sources)
                        if layers is None or r in layers}
        self.arrived: dict[int, LayerKV] = {}
        self.mapped: dict[int, LayerKV] = {}
        cpu_float = self.device.type == "cpu" and self.compute_dtype == torch.float32
        self.kernels = kernels.load() if cpu_float else None  # one-pass gather and turn; else torch ops
        if self.kernels is not None and plan.sender_rows.numel():  # the kernel trusts the rows: hold them in bounds
            sender_layer_rows = plan.batch_size * self.sender_spec["kv_heads"] * plan.sender_tokens
            if not 0 <= int(plan.sender_rows.min()) <= int(plan.sender_rows.max()) < sender_layer_rows:
                raise HeteroFoldError("This plan's sender rows fall outside its sender cache; rebuild the plan.")
        # A sliding-window receiver layer keeps only its last `window` positions: only those rows are mapped.
        self.windows = KVSpec.from_dict(self.receiver_spec).windows
        self.sender_windows = KVSpec.from_dict(self.sender_spec).windows
        tokens = plan.cache_tokens
        # Each layer's layout: how many last positions per row it keeps, or NEEDED (every position, only the
        # needed rows mapped). Layers of one layout share their chunks and, with the same sources, their inputs.
        self.needed = every_position if isinstance(every_position, torch.Tensor) else None
        if self.needed is not None and tuple(self.needed.shape) != (plan.batch_size, tokens):
            raise HeteroFoldError(f"every_position holds {tuple(self.needed.shape)} rows; this plan has "
                                  f"{(plan.batch_size, tokens)} ([batch, receiver tokens]).")
        self.layouts = [tokens if w is None or every_position is True else NEEDED if self.needed is not None
                        else min(w, tokens) for w in self.windows]
        if every_position is not False:  # a working cache for a recompute: sliding layers keep every position
            self.windows = [None] * len(self.windows)
        size = chunk_tokens or self._rows_within_budget(self._temporaries_per_row())
        self.chunks = {layout: self._chunks(size, layout) for layout in set(self.layouts)}
        # per layout, the native-prefix and padding rows among the kept ones: once per stream, not per layer
        self.kept_rows = {layout: (*self._kept_rows(plan.native_rows, self._kept(layout)),
                                   self._kept_rows(plan.padding_rows, self._kept(layout))[0]) for layout in self.chunks}
        self.workspace = Workspace(self.kernels, self.sender_spec["kv_heads"], self.sender_spec["head_dim"],
                                   self.compute_dtype, self.device,
                                   rows=max((c.size for chunks in self.chunks.values() for c in chunks), default=1))

    def _kept(self, layout: int | str) -> int:
        """Positions per row that a layer of ``layout`` holds."""
        return self.plan.cache_tokens if layout == NEEDED else layout

    def _temporaries_per_row(self) -> int:
        """Bytes per receiver row of the most temporaries alive at once: what the map kind keeps (its input
        included), plus, without the kernels, a gathered source and a swapped copy while turning."""
        c, width = self.adapter.config, self.sender_spec["kv_heads"] * self.sender_spec["head_dim"]
        bits = self.map.row_bits(c, self.kernels)
        if self.kernels is None:
            bits += (width + max(width, c.out_features)) * torch.finfo(self.compute_dtype).bits
        return bits // 8

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
        # Layers with the same sources and kept rows share one input per chunk: gathered once, mapped by each.
        groups: dict[tuple[tuple[int, ...], int], list[int]] = {}
        for r in ready:
            del self.pending[r]
            sources = tuple(self.adapter.config.layer_sources[r])
            groups.setdefault((sources, self.layouts[r]), []).append(r)
        for (sources, _), layers in groups.items():
            self.mapped.update(self._map_layers(layers, list(sources)))
        needed = set().union(*self.pending.values()) if self.pending else set()
        self.arrived = {s: kv for s, kv in self.arrived.items() if s in needed}
        return [(r, self.mapped[r]) for r in ready]

    def cache(self):
        """The receiver ``DynamicCache``, once every sender layer the adapter uses has been pushed."""
        if not self.done:
            missing = sorted(set().union(*self.pending.values()) - self.arrived.keys())
            raise HeteroFoldError(f"Receiver layers {sorted(self.pending)} still wait for sender layers {missing}; "
                                  "push every sender layer before asking for the cache.")
        return build_cache([self.mapped[r] for r in range(len(self.mapped))], windows=self.windows,
                           tokens=self.plan.cache_tokens)

    def _check(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        spec, plan = self.sender_spec, self.plan
        want = (plan.batch_size, spec["kv_heads"], plan.sender_tokens, spec["head_dim"])
        if not 0 <= layer < spec["num_layers"]:
            raise PairMismatchError(f"Sender layer {layer} does not exist: the sender has layers 0..{spec['num_layers'] - 1}.")
        window = self.sender_windows[layer]
        if window is not None and keys.shape[2] == window < plan.sender_tokens:
            raise truncated_sender_layer(layer, window, plan.sender_tokens)
        for name, x in (("keys", keys), ("values", values)):
            if tuple(x.shape) != want:
                raise PairMismatchError(
                    f"Sender layer {layer} {name} have shape {tuple(x.shape)} but this plan expects {want} "
                    "([batch, kv_heads, sender tokens, head_dim]). Pass the cache the sender made of the planned texts."
                )

    def _chunks(self, size: int, layout: int | str) -> list[Chunk]:
        """Chunks of at most ``size`` receiver rows covering each row's last ``layout`` positions (or the needed
        rows), with everything about them that no layer changes."""
        plan, rows, tokens = self.plan, self.plan.sender_rows, self.plan.cache_tokens  # rows [B * Tr, Hs]
        kept = self._kept(layout)
        if layout == NEEDED:  # each run of needed rows, written where it lies
            runs = [(a, b, a) for a, b in _runs(self.needed.flatten().cpu())]
        elif kept == tokens:  # every position: one run over the whole batch
            runs = [(0, rows.shape[0], 0)]
        else:  # a window: the last `kept` positions of each row
            runs = [(b * tokens + tokens - kept, (b + 1) * tokens, b * kept) for b in range(plan.batch_size)]
        chunks = []
        for start, stop, out_start in runs:
            n = stop - start
            step = -(-n // -(-n // size))  # as many chunks as needed, of even sizes
            for first in range(start, stop, step):
                span = slice(first, min(first + step, stop))
                out = slice(out_start + first - start, out_start + span.stop - start)
                chunks.append(Chunk(rows=span, out=out, sender_rows=rows[span].flatten(),
                                    unrotate=_turns_at(plan.turns("unrotate", self.compute_dtype), span),
                                    rotate=_turns_at(plan.turns("rotate", self.compute_dtype), span)))
        return chunks

    @torch.no_grad()
    def _map_layers(self, layers: list[int], sources: list[int]) -> dict[int, LayerKV]:
        """Keys and values ``[B, Hr, T, Dr]`` of receiver ``layers``, which all read sender layers ``sources`` and
        keep the same rows (``T``: ``Tr``, or their window)."""
        plan, spec = self.plan, self.receiver_spec
        layout = self.layouts[layers[0]]
        shape = (plan.batch_size, self._kept(layout), spec["kv_heads"], spec["head_dim"])
        new = torch.zeros if layout == NEEDED else torch.empty  # rows never mapped must read as zeros, not garbage
        made = {r: (new(shape, dtype=self.dtype, device=self.device),  # token-major, like the map's output
                    new(shape, dtype=self.dtype, device=self.device)) for r in layers}
        rows = {r: tuple(x.view(-1, *shape[2:]) for x in kv) for r, kv in made.items()}  # [B * T, Hr, Dr]
        s_dim = self.sender_spec["head_dim"]
        flat = [(k.to(self.device).reshape(-1, s_dim), v.to(self.device).reshape(-1, s_dim))
                for k, v in (self.arrived[source] for source in sources)]
        self.map.write(LayerWork(sources, self.chunks[layout], flat), rows, self.workspace)
        native_rows, native_at, padding_rows = self.kept_rows[layout]
        for r in layers:
            native_k, native_v = plan.native[r]  # [B, Hr, P, Dr]
            for layer_rows, native in zip(rows[r], (native_k, native_v)):
                layer_rows.index_copy_(0, native_rows, native.transpose(1, 2).flatten(0, 1)[native_at].to(self.dtype))
                layer_rows.index_fill_(0, padding_rows, 0)
        return {r: (keys.transpose(1, 2), values.transpose(1, 2)) for r, (keys, values) in made.items()}

    def _kept_rows(self, rows: torch.Tensor, kept: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Of plan ``rows`` (indices into ``[B * Tr]``), those among each row's last ``kept`` positions, as indices
        into ``[B * kept]``, and which of ``rows`` they are (a bool mask)."""
        tokens = self.plan.cache_tokens
        batch, position = rows // tokens, rows % tokens
        at = position >= tokens - kept
        return batch[at] * kept + position[at] - (tokens - kept), at


def _runs(flags: torch.Tensor) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of True in ``flags`` ``[N]``."""
    edges = torch.diff(torch.nn.functional.pad(flags.int(), (1, 1))).nonzero().flatten().tolist()
    return list(zip(edges[::2], edges[1::2]))


def _turns_at(turns: list[Turn | None], rows: slice) -> list[Turn | None]:
    """Each layer's turn :meth:`Turn.at` ``rows``, sliced once per distinct turn (layers of a type share one)."""
    done: dict[int, Turn | None] = {}
    for turn in turns:
        if id(turn) not in done:
            done[id(turn)] = turn.at(rows) if turn is not None else None
    return [done[id(turn)] for turn in turns]


def map_cache(adapter: PairAdapter, plan: TransferPlan, sender_layers: list[LayerKV], *, dtype: torch.dtype,
              chunk_tokens: int | None = None):
    """A receiver ``DynamicCache`` from a whole sender cache (per layer ``[B, Hs, Ts, Ds]``): :class:`LayerStream`
    fed every sender layer the adapter uses, in order."""
    return _fed(LayerStream(adapter, plan, dtype=dtype, chunk_tokens=chunk_tokens), sender_layers).cache()


def map_every_position(adapter: PairAdapter, plan: TransferPlan, sender_layers: list[LayerKV], *,
                       dtype: torch.dtype, needed: torch.Tensor | None = None,
                       mapped: list[LayerKV] | None = None) -> list[LayerKV]:
    """Receiver layers ``[B, Hr, Tr, Dr]`` with every position mapped, sliding-window layers included (a
    recompute's working cache); with ``needed`` ``[B, Tr]`` bool, sliding-window layers map only those rows and
    hold zeros elsewhere.

    ``mapped``: the layers :func:`map_cache` already made of this plan (full layers ``[B, Hr, Tr, Dr]``,
    sliding-window layers their last window): copied, so only the sliding rows they dropped are mapped again."""
    if mapped is None:
        stream = _fed(LayerStream(adapter, plan, dtype=dtype, every_position=True if needed is None else needed),
                      sender_layers)
        return [stream.mapped[r] for r in range(len(stream.mapped))]
    tokens = plan.cache_tokens
    short = [r for r, (keys, _) in enumerate(mapped) if keys.shape[2] < tokens]  # sliding layers: their window
    missing = torch.ones((plan.batch_size, tokens), dtype=torch.bool) if needed is None else needed.clone()
    if short:
        missing[:, tokens - min(mapped[r][0].shape[2] for r in short):] = False  # rows every window still holds
    fresh = {}
    if short and bool(missing.any()):
        fresh = _fed(LayerStream(adapter, plan, dtype=dtype, every_position=missing, layers=short), sender_layers).mapped
    out = []
    for r, (keys, values) in enumerate(mapped):
        if r not in short:
            out.append((keys.clone(), values.clone()))  # the recompute writes into its working cache
            continue
        held = keys.shape[2]
        whole = fresh.get(r) or tuple(keys.new_zeros((*keys.shape[:2], tokens, keys.shape[3])) for _ in range(2))
        for full, kept in zip(whole, (keys, values)):
            full[:, :, tokens - held:] = kept
        out.append(whole)
    return out


def _fed(stream: LayerStream, sender_layers: list[LayerKV]) -> LayerStream:
    """``stream`` after every sender layer its pending receiver layers read was pushed, in order."""
    for layer in sorted(set().union(*stream.pending.values())):
        stream.push(layer, *sender_layers[layer])
    return stream
