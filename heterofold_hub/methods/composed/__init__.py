"""Composition of two affine pair adapters through a pivot model: A -> P then P -> B is again A -> B.

Each receiver layer r of B reads P layers ``p_j`` (second adapter), and each of those is an affine map of A layers
(first adapter), so r is one affine map of the union of those A layers:

    W[r] = sum_j scatter(W1[p_j]) @ W2[r][slice_j]        b[r] = b2[r] + sum_j b1[p_j] @ W2[r][slice_j]

computed in float64 and stored like any affine adapter, so it runs through the same fast path. Token alignment
goes straight from A to B (character offsets), so the pivot model is never loaded. Unions differ in size between
receiver layers; every layer lists the widest union's count of sources, padding shorter ones with repeats of a
layer it already reads (zero weight rows), so no extra sender layer is read or waited for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from heterofold_hub.adapter.base import PairAdapter, register_method
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.adapter.save_and_load import adapter_bytes, sha256_bytes
from heterofold_hub.errors import HeteroFoldError, IntegrityError
from heterofold_hub.methods.affine import AffineAdapter
from heterofold_hub.methods.composed.rematch import rematch

ROLES = ("sender->pivot", "pivot->receiver")
PARENT_FIELDS = ("role", "repo_id", "version", "method", "sender", "receiver", "weights_sha256", "data")
PIVOT_FIELDS = ("id", "revision", "tokenizer", "spec")


@dataclass(frozen=True)
class Parent:
    """Where one parent adapter came from: a registered ``repo_id``/``version`` (None for a local package) and
    its weights' hash, which is what a registry entry records for ``adapter.safetensors``."""

    role: str
    repo_id: str | None
    version: str | None
    method: str
    sender: str
    receiver: str
    weights_sha256: str
    data: tuple[str, ...] = ()  # the text(s) the parent was fitted on (training_data), for held-out checks

    @classmethod
    def of(cls, role: str, adapter: PairAdapter, *, repo_id: str | None = None, version: str | None = None) -> "Parent":
        c = adapter.config
        return cls(role, repo_id, version, c.method, c.sender, c.receiver, sha256_bytes(adapter_bytes(adapter)),
                   tuple(training_data(c)))

    def to_dict(self) -> dict:
        return {**asdict(self), "data": list(self.data)}

    def describe(self) -> str:
        where = f"{self.repo_id} {self.version}" if self.repo_id else "a local package"
        return f"{self.sender} -> {self.receiver} ({self.method}, {where})"


@register_method("composed")
class ComposedAdapter(AffineAdapter):
    """An affine adapter made by :func:`compose`; its ``config.extra`` records the pivot and both parents, checked
    whenever the adapter is built (so on every load)."""

    def __init__(self, config: AdapterConfig):
        check_provenance(config)
        super().__init__(config)

    @property
    def parents(self) -> list[Parent]:
        return [Parent(**{**p, "data": tuple(p["data"])}) for p in self.config.extra["parents"]]

    @property
    def pivot(self) -> str:
        return self.config.extra["pivot"]["id"]

    @classmethod
    def fit(cls, calib, **_) -> "ComposedAdapter":
        raise HeteroFoldError("Composed adapters are not fitted: make one with `hf-fold compose --sender A "
                              "--receiver B --pivot P --out DIR` (or heterofold_hub.compose(first, second)).")


def training_data(config: AdapterConfig) -> list[str]:
    """Every text an adapter was fitted on, as recorded: its own ``training_args["data"]`` and, for a composed
    adapter or one trained from a composition, its parents'; for one whose calibration went on from another
    package (``--init adapter``), that package's (so held-out checks see through both)."""
    own = [str(config.training_args["data"])] if config.training_args.get("data") is not None else []
    continued = config.extra.get("continued_from", {}).get("data", [])
    return own + [d for p in config.extra.get("parents", []) for d in p.get("data", [])] + list(continued)


def check_provenance(config: AdapterConfig) -> None:
    """A composed config names its pivot and both parents, and they chain: sender -> pivot -> receiver."""
    extra, where = config.extra, f"composed adapter {config.sender} -> {config.receiver}"
    parents, pivot = extra.get("parents"), extra.get("pivot")
    if not isinstance(pivot, dict) or set(pivot) != set(PIVOT_FIELDS):
        raise IntegrityError(f"{where}: extra.pivot must be an object with {', '.join(PIVOT_FIELDS)}; found "
                             f"{pivot!r}. The config was edited or is not from `hf-fold compose`; compose it again.")
    if not isinstance(parents, list) or len(parents) != 2 or any(
            not isinstance(p, dict) or set(p) != set(PARENT_FIELDS) for p in parents):
        raise IntegrityError(f"{where}: extra.parents must list 2 parents with fields {', '.join(PARENT_FIELDS)}; "
                             f"found {parents!r}. Compose it again with `hf-fold compose`.")
    chain = [(parents[0]["role"], ROLES[0]), (parents[1]["role"], ROLES[1]),
             (parents[0]["sender"], config.sender), (parents[0]["receiver"], pivot["id"]),
             (parents[1]["sender"], pivot["id"]), (parents[1]["receiver"], config.receiver)]
    broken = [f"{found!r} where {expected!r} belongs" for found, expected in chain if found != expected]
    if broken:
        raise IntegrityError(f"{where}: its parents do not chain sender -> pivot -> receiver ({'; '.join(broken)}). "
                             "The config was edited; compose it again.")


def compose(first: PairAdapter, second: PairAdapter, *, first_ref: dict | None = None,
            second_ref: dict | None = None, rematch_on=None) -> ComposedAdapter:
    """The affine adapter ``first`` (A -> P) then ``second`` (P -> B), exact up to float rounding.

    ``first_ref``/``second_ref``: ``{"repo_id": ..., "version": ...}`` of registered parents, recorded in the
    provenance. ``rematch_on``: a CalibrationSet of A -> P; the first leg's pivot K/V are then recoloured to the
    pivot's own moments on it (:func:`~heterofold_hub.methods.composed.rematch.rematch`) before composing. Raises
    HeteroFoldError when either parent is not affine or the two do not meet at the same pivot.
    """
    _check_chain(first, second)
    d_in = first.config.sender_spec["kv_heads"] * first.config.sender_spec["head_dim"]
    d_pivot = second.config.sender_spec["kv_heads"] * second.config.sender_spec["head_dim"]
    unions = [sorted({a for p in sources for a in first.config.layer_sources[p]})
              for sources in second.config.layer_sources]
    width = max(map(len, unions))
    padded = [u + [u[-1]] * (width - len(u)) for u in unions]
    pivot_end = {"id": second.config.sender, "revision": second.config.sender_revision,
                 "tokenizer": second.config.sender_tokenizer, "spec": second.config.sender_spec}
    parents = [Parent.of(role, adapter, **(ref or {})).to_dict()
               for role, adapter, ref in zip(ROLES, (first, second), (first_ref, second_ref))]
    extra = {"pivot": pivot_end, "parents": parents, "union_sources": unions}
    if rematch_on is not None:
        first = rematch(first, rematch_on)  # provenance above names the parent as published
        extra["rematch_tokens"] = rematch_on.tokens
    c1, c2 = first.config, second.config
    config = AdapterConfig(
        method="composed", sender=c1.sender, receiver=c2.receiver, sender_spec=c1.sender_spec,
        receiver_spec=c2.receiver_spec, layer_sources=padded, min_native=c2.min_native,
        extra=extra,
        sender_revision=c1.sender_revision, receiver_revision=c2.receiver_revision,
        sender_tokenizer=c1.sender_tokenizer, receiver_tokenizer=c2.receiver_tokenizer,
    )
    composed = ComposedAdapter(config)
    for r, (union, p_sources) in enumerate(zip(unions, c2.layer_sources)):
        for j, (second_map, kind) in enumerate(zip(second.affine_maps(r), "kv")):
            w2, b2 = (t.double() for t in second_map)
            weight = torch.zeros(width * d_in, w2.shape[1], dtype=torch.float64)
            bias = b2.clone()
            for i, p in enumerate(p_sources):
                w1, b1 = (t.double() for t in first.affine_maps(p)[j])
                w2_slice = w2[i * d_pivot:(i + 1) * d_pivot]
                bias += b1 @ w2_slice
                product = w1 @ w2_slice  # [sources of p x d_in, d_out]
                for s, a in enumerate(c1.layer_sources[p]):
                    q = union.index(a)
                    weight[q * d_in:(q + 1) * d_in] += product[s * d_in:(s + 1) * d_in]
            composed.set_layer(r, kind, weight.float(), bias.float())
    return composed.requires_grad_(False).eval()


def _check_chain(first: PairAdapter, second: PairAdapter) -> None:
    for role, adapter in (("first (sender -> pivot)", first), ("second (pivot -> receiver)", second)):
        if adapter.affine_maps(0) is None:
            raise HeteroFoldError(
                f"The {role} adapter {adapter.config.sender} -> {adapter.config.receiver} is {adapter.config.method}, "
                "which is not one affine map per layer, so it cannot be composed. Use an affine adapter "
                "(heterofold, kv-ridge, recolor or composed) for that leg.")
    c1, c2 = first.config, second.config
    meet = [("model id", c1.receiver, c2.sender), ("revision", c1.receiver_revision, c2.sender_revision),
            ("KV spec", c1.receiver_spec, c2.sender_spec)]
    if None not in (c1.receiver_tokenizer, c2.sender_tokenizer):
        meet.append(("tokenizer fingerprint", c1.receiver_tokenizer, c2.sender_tokenizer))
    broken = [f"{what}: {a!r} (first's receiver) vs {b!r} (second's sender)" for what, a, b in meet if a != b]
    if broken:
        raise HeteroFoldError(
            f"These adapters do not meet at one pivot model: {c1.sender} -> {c1.receiver} then {c2.sender} -> "
            f"{c2.receiver}; " + "; ".join(broken) + ". Compose A -> P with P -> B fitted for the same P.")
