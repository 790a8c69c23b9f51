"""KV Ridge (arXiv 2608.03893): training-free closed-form ridge from aligned sender K/V to receiver K/V."""

from dataclasses import dataclass

import torch

from heterofold_hub.transfer.alignment import source_candidates
from heterofold_hub.methods.stats import r2, ridge
from heterofold_hub.methods.affine import AffineAdapter, fit_affine
from heterofold_hub.adapter.base import register_method
from heterofold_hub.adapter.config import MethodOptions


def best_correlated_layers(calib, k: int, lam: float, probe_tokens: int = 4096,
                           candidates: list[int] | None = None) -> list[list[int]]:
    """For each receiver layer, the ``k`` sender layers (of ``candidates``, default all) whose ridge fit explains
    most of its K and V."""
    n = min(probe_tokens, calib.tokens)
    candidates = list(range(len(calib.sender))) if candidates is None else candidates
    plan = []
    for recv_k, recv_v in calib.receiver:
        scores = []
        for send_k, send_v in (calib.sender[s] for s in candidates):
            score = 0.0
            for x, y in ((send_k[:n], recv_k[:n]), (send_v[:n], recv_v[:n])):
                w, b = ridge(x, y, lam)
                score += r2(x, y, w, b)
            scores.append(score)
        plan.append(sorted(candidates[i] for i in torch.tensor(scores).topk(min(k, len(scores))).indices.tolist()))
    return plan


@dataclass
class KVRidgeOptions(MethodOptions):
    """``lam``: ridge strength relative to the mean feature variance; ``sender_layers``: "all" or "full"."""

    sources_per_layer: int = 2
    lam: float = 0.01
    sender_layers: str = "all"


@register_method("kv-ridge")
class KVRidgeAdapter(AffineAdapter):
    """Per receiver layer, ridge regression (``lam`` relative to the mean feature variance) from the
    ``sources_per_layer`` best-correlated sender layers; RoPE is stripped before and re-applied after."""

    @classmethod
    def fit(cls, calib, *, batches=None, receiver=None, seed: int = 0, progress: bool = True,
            **options) -> "KVRidgeAdapter":
        o = KVRidgeOptions.from_kwargs("kv-ridge", options)
        sources = best_correlated_layers(calib, o.sources_per_layer, o.lam,
                                         candidates=source_candidates(calib.sender_spec, o.sender_layers))
        return fit_affine(cls, calib, "kv-ridge", sources, lambda x, y: ridge(x, y, o.lam), lam=o.lam)
