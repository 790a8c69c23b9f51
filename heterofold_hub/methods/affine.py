"""The folded form shared by HeteroFold, recoloring and KV Ridge: one affine map per receiver layer."""

from __future__ import annotations

import torch
from torch import nn

from heterofold_hub.adapter.base import METHODS, PairAdapter
from heterofold_hub.adapter.config import AdapterConfig


class AffineAdapter(PairAdapter):
    """``y = x @ W[layer] + b[layer]`` for keys and for values.

    ``k_weight``/``v_weight``: ``[receiver layers, in_features, out_features]``;
    ``k_bias``/``v_bias``: ``[receiver layers, out_features]``.
    """

    def __init__(self, config: AdapterConfig):
        super().__init__(config)
        layers, fin, fout = len(config.layer_sources), config.in_features, config.out_features
        self.k_weight = nn.Parameter(torch.zeros(layers, fin, fout))
        self.k_bias = nn.Parameter(torch.zeros(layers, fout))
        self.v_weight = nn.Parameter(torch.zeros(layers, fin, fout))
        self.v_bias = nn.Parameter(torch.zeros(layers, fout))

    def map_layer(self, layer, keys, values):
        k = torch.addmm(self.k_bias[layer], keys.flatten(0, -2), self.k_weight[layer])
        v = torch.addmm(self.v_bias[layer], values.flatten(0, -2), self.v_weight[layer])
        return k.view(*keys.shape[:-1], -1), v.view(*values.shape[:-1], -1)

    def affine_maps(self, layer):
        return (self.k_weight[layer], self.k_bias[layer]), (self.v_weight[layer], self.v_bias[layer])

    @torch.no_grad()
    def set_layer(self, layer: int, kind: str, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Install a fitted map ``weight`` ``[in, out]``, ``bias`` ``[out]`` for ``kind`` 'k' or 'v'."""
        getattr(self, f"{kind}_weight")[layer].copy_(weight)
        getattr(self, f"{kind}_bias")[layer].copy_(bias)


def affine_methods() -> set[str]:
    """Names of the registered methods whose adapters are one affine map per layer (the ones that compose)."""
    return {name for name, cls in METHODS.items() if issubclass(cls, AffineAdapter)}


def fit_affine(cls, calib, method: str, sources: list[list[int]], solve, **extra) -> AffineAdapter:
    """Fit every receiver layer's K and V map with ``solve(X [N, in], Y [N, out]) -> (W, b)``."""
    adapter = cls(config_for(calib, method, sources, **extra))
    for r in range(len(sources)):
        for j, (kind, x) in enumerate(zip("kv", adapter.layer_inputs(calib.sender, r))):
            adapter.set_layer(r, kind, *solve(x, calib.receiver[r][j]))
    return adapter


def config_for(calib, method: str, sources: list[list[int]], **extra) -> AdapterConfig:
    """The config of an adapter fitted on ``calib`` (a CalibrationSet)."""
    return AdapterConfig(
        method=method,
        sender=calib.sender_name,
        receiver=calib.receiver_name,
        sender_spec=calib.sender_spec.to_dict(),
        receiver_spec=calib.receiver_spec.to_dict(),
        layer_sources=sources,
        extra=extra,
    )
