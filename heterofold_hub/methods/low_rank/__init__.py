"""Low rank: an affine adapter's folded maps, each factored ``W ~ A @ B`` after calibration, so the fast path does
``r * (in + out)`` multiply-adds per token and map instead of ``in * out``.

The factors minimise the map's error on the parent's own inputs over calibration text (:mod:`.factor`), not the
distance between weights. ``config.extra`` records the rank, the parent (as :class:`~heterofold_hub.methods.
composed.Parent` records one, so held-out checks see the parent's training text too) and the calibration text.
"""

from __future__ import annotations

import torch
from torch import nn

from heterofold_hub.adapter.base import PairAdapter, register_method
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.errors import HeteroFoldError, IntegrityError, UsageError
from heterofold_hub.methods.composed import PARENT_FIELDS, Parent
from heterofold_hub.methods.low_rank.factor import Moments, data_aware, relative_error
from heterofold_hub.progress import progress_bar
from heterofold_hub.transfer.batches import prepare_batch

KINDS = ("k", "v")


def max_rank(config: AdapterConfig) -> int:
    """The largest rank a map ``[in, out]`` has: at it the factors are the full map (and cost more than it)."""
    return min(config.in_features, config.out_features)


@register_method("low-rank")
class LowRankAdapter(PairAdapter):
    """``y = (x @ A[layer]) @ B[layer] + bias[layer]`` for keys and for values.

    ``k_a``/``v_a``: ``[receiver layers, in_features, rank]``; ``k_b``/``v_b``: ``[receiver layers, rank,
    out_features]``; ``k_bias``/``v_bias``: ``[receiver layers, out_features]``. ``rank``: ``config.extra["rank"]``.
    """

    def __init__(self, config: AdapterConfig):
        check_extra(config)
        super().__init__(config)
        layers, fin, fout, rank = len(config.layer_sources), config.in_features, config.out_features, self.rank
        for kind in KINDS:
            setattr(self, f"{kind}_a", nn.Parameter(torch.zeros(layers, fin, rank)))
            setattr(self, f"{kind}_b", nn.Parameter(torch.zeros(layers, rank, fout)))
            setattr(self, f"{kind}_bias", nn.Parameter(torch.zeros(layers, fout)))

    @property
    def rank(self) -> int:
        return self.config.extra["rank"]

    @property
    def parent(self) -> Parent:
        p = self.config.extra["parents"][0]
        return Parent(**{**p, "data": tuple(p["data"])})

    def map_layer(self, layer, keys, values):
        out = []
        for x, (a, b, bias) in zip((keys, values), self.factored_maps(layer)):
            y = torch.addmm(bias, torch.mm(x.flatten(0, -2), a), b)  # the fast path's two products, same order
            out.append(y.view(*x.shape[:-1], -1))
        return out[0], out[1]

    def factored_maps(self, layer):
        return tuple((getattr(self, f"{kind}_a")[layer], getattr(self, f"{kind}_b")[layer],
                      getattr(self, f"{kind}_bias")[layer]) for kind in KINDS)

    @classmethod
    def fit(cls, calib, **_) -> "LowRankAdapter":
        raise HeteroFoldError("Low-rank adapters are made from an affine adapter, not fitted from scratch: "
                              "`hf-fold compress --adapter DIR_OR_REPO_ID --rank R --out DIR`.")


def check_extra(config: AdapterConfig) -> None:
    """A low-rank config names its rank (1 .. min(in, out)) and exactly one parent."""
    extra, where = config.extra, f"low-rank adapter {config.sender} -> {config.receiver}"
    rank, parents = extra.get("rank"), extra.get("parents")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= max_rank(config):
        raise IntegrityError(f"{where}: extra.rank must be an integer in 1..{max_rank(config)} (min of in and out "
                             f"features); found {rank!r}. The config was edited; compress the parent again.")
    if not isinstance(parents, list) or len(parents) != 1 or set(parents[0]) != set(PARENT_FIELDS):
        raise IntegrityError(f"{where}: extra.parents must list 1 parent with fields {', '.join(PARENT_FIELDS)}; "
                             f"found {parents!r}. Compress the parent again with `hf-fold compress`.")


def rank_problem(parent: PairAdapter, rank: int) -> str | None:
    """Why ``parent`` cannot be compressed to ``rank`` (phrased for ``--adapter``/``--rank``), or None."""
    c = parent.config
    if parent.affine_maps(0) is None:
        return (f"--adapter: its method {c.method!r} is not one affine map per layer, so it has no folded map to "
                "factor; give an affine adapter (heterofold, kv-ridge, recolor or composed)")
    limit = max_rank(c)
    if not 1 <= rank <= limit:
        return (f"--rank {rank}: choose 1..{limit} (the maps are [{c.in_features}, {c.out_features}], so no factoring "
                f"has a rank above {limit}); e.g. --rank {max(1, limit // 3)}")
    return None


def input_moments(parent: PairAdapter, sender, receiver, windows, *, batch_size: int = 8,
                  progress: bool = True) -> dict[tuple[tuple[int, ...], int], Moments]:
    """Moments of every map input ``parent`` reads on ``windows``: keyed by (sender layers, 0 keys / 1 values).

    The inputs are what the fitters see (:func:`~heterofold_hub.methods.features.collect`): mapped positions only,
    keys un-rotated, sources side by side. Receiver layers reading the same sender layers share one entry. Only the
    sender runs; moments are accumulated per batch, so memory does not grow with the calibration text.
    """
    sources = {tuple(s) for s in parent.config.layer_sources}
    layers = set().union(*sources)
    moments: dict[tuple[tuple[int, ...], int], Moments] = {}
    with progress_bar(progress) as bar:
        task = bar.add_task("calibration moments", total=len(windows))
        for start in range(0, len(windows), batch_size):
            batch = prepare_batch(windows[start:start + batch_size], sender, receiver, layers=layers,
                                  min_native=parent.config.min_native)
            keep = batch.alignment.mapped_mask
            for group in sources:
                for kind in (0, 1):
                    x = torch.cat([batch.features[s][kind][keep] for s in group], dim=-1)
                    moments.setdefault((group, kind), Moments.empty(x.shape[-1])).add(x)
            bar.advance(task, len(batch))
    return moments


@torch.no_grad()
def compress(parent: PairAdapter, moments: dict, rank: int, *, parent_ref: dict | None = None,
             calibration: dict | None = None) -> LowRankAdapter:
    """``parent`` (affine) with every map replaced by its rank-``rank`` data-aware factors on ``moments``
    (:func:`input_moments`). ``parent_ref``: ``{"repo_id", "version"}`` of a registered parent, recorded;
    ``calibration``: how the moments were taken (data, windows, tokens), recorded. ``extra["calibration_error"]``:
    per keys and values, the mean over layers of the squared error as a share of the output's variance on them."""
    problem = rank_problem(parent, rank)
    if problem:
        raise UsageError(problem)
    c = parent.config
    record = Parent.of("parent", parent, **(parent_ref or {})).to_dict()
    config = AdapterConfig(**{**c.to_dict(), "method": "low-rank", "weights_sha256": None, "weights_bytes": None,
                              "extra": {"rank": rank, "parents": [record], "calibration": calibration or {},
                                        "parent_extra": c.extra}})
    adapter = LowRankAdapter(config)
    errors = {kind: [] for kind in KINDS}
    for r, sources in enumerate(c.layer_sources):
        for j, (kind, (weight, bias)) in enumerate(zip(KINDS, parent.affine_maps(r))):
            inputs = moments[(tuple(sources), j)]
            factors = data_aware(weight.float(), bias.float(), inputs, rank)
            errors[kind].append(relative_error(weight.float(), factors, inputs))
            for name, value in (("a", factors.a), ("b", factors.b), ("bias", factors.bias)):
                getattr(adapter, f"{kind}_{name}")[r].copy_(value)
    adapter.config.extra["calibration_error"] = {kind: sum(e) / len(e) for kind, e in errors.items()}
    bad = adapter.non_finite()
    if bad:
        raise HeteroFoldError(f"Factoring gave non-finite values in {bad}; the calibration text may be too short "
                              "for these maps (pass more --calib-windows).")
    return adapter.requires_grad_(False).eval()


def saves_flops(config: AdapterConfig, rank: int) -> bool:
    """Whether ``rank`` factors cost fewer multiply-adds per row than the full map: ``r (in + out) < in * out``."""
    return rank * (config.in_features + config.out_features) < config.in_features * config.out_features
