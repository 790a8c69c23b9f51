"""Truncated factorisations of one folded map ``W`` ``[in, out]``: the data-aware one (error measured on the map's
inputs) and plain SVD (error measured on the weights), plus the input moments the first needs.

For inputs ``x`` of mean ``mu`` and covariance ``C``, a rank-``r`` replacement ``W'`` with bias
``b' = b + mu (W - W')`` leaves the error ``E||x W + b - (x W' + b')||^2 = ||C^{1/2} (W - W')||_F^2``. Eckart-Young
on ``S W`` (``S = C^{1/2}``, ridged) gives its minimiser ``W' = S^{-1} [S W]_r``; plain SVD minimises
``||W - W'||_F`` instead, which weighs every input direction alike, however rarely the data visits it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RIDGE = 1e-4  # added to C, relative to its mean variance: keeps S^{-1} finite along directions the data never visits


@dataclass
class Moments:
    """Running first and second moments of one map input, accumulated in float64: ``total`` ``[in]`` (sum of
    ``x``), ``outer`` ``[in, in]`` (sum of ``x^T x``), ``count`` rows."""

    total: torch.Tensor
    outer: torch.Tensor
    count: int = 0

    @classmethod
    def empty(cls, width: int) -> "Moments":
        return cls(torch.zeros(width, dtype=torch.float64), torch.zeros(width, width, dtype=torch.float64))

    def add(self, x: torch.Tensor) -> None:
        """Accumulate rows ``x`` ``[N, in]``."""
        x = x.double()
        self.total += x.sum(0)
        self.outer += x.T @ x
        self.count += len(x)

    @property
    def mean(self) -> torch.Tensor:
        return self.total / self.count

    @property
    def covariance(self) -> torch.Tensor:
        """``E[(x - mu)^T (x - mu)]`` ``[in, in]``."""
        mu = self.mean
        return self.outer / self.count - torch.outer(mu, mu)


@dataclass
class Factors:
    """``W ~ a @ b`` with ``a`` ``[in, r]``, ``b`` ``[r, out]``, and the bias ``[out]`` that goes with them."""

    a: torch.Tensor
    b: torch.Tensor
    bias: torch.Tensor

    def product(self) -> torch.Tensor:
        return self.a @ self.b


def data_aware(weight: torch.Tensor, bias: torch.Tensor, moments: Moments, rank: int,
               ridge: float = RIDGE) -> Factors:
    """Rank-``rank`` factors of ``weight`` ``[in, out]`` minimising the map's error on inputs of ``moments``
    (float64 inside; returned in ``weight``'s dtype). The bias takes up what the low rank drops at the mean input."""
    w = weight.double()
    cov = moments.covariance
    cov = cov + ridge * cov.diagonal().mean().clamp_min(1e-12) * torch.eye(len(cov), dtype=cov.dtype)
    values, vectors = torch.linalg.eigh(cov)
    root = values.clamp_min(0).sqrt()
    s, s_inv = (vectors * root) @ vectors.T, (vectors / root) @ vectors.T  # C^{1/2}, C^{-1/2} (symmetric)
    u, sigma, vt = torch.linalg.svd(s @ w, full_matrices=False)
    scale = sigma[:rank].sqrt()
    a = s_inv @ (u[:, :rank] * scale)
    b = scale[:, None] * vt[:rank]
    new_bias = bias.double() + moments.mean @ (w - a @ b)
    return Factors(*(t.to(weight.dtype) for t in (a, b, new_bias)))


def plain(weight: torch.Tensor, bias: torch.Tensor, rank: int) -> Factors:
    """Rank-``rank`` factors of ``weight`` ``[in, out]`` minimising ``||W - a b||_F`` (the data unseen), bias kept."""
    u, sigma, vt = torch.linalg.svd(weight.double(), full_matrices=False)
    scale = sigma[:rank].sqrt()
    return Factors((u[:, :rank] * scale).to(weight.dtype), (scale[:, None] * vt[:rank]).to(weight.dtype), bias.clone())


def map_error(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, approx: Factors) -> float:
    """Mean squared difference per row between the full map and ``approx`` on inputs ``x`` ``[N, in]``."""
    x = x.double()
    full = x @ weight.double() + bias.double()
    low = (x @ approx.a.double()) @ approx.b.double() + approx.bias.double()
    return float((full - low).pow(2).sum(-1).mean())


def relative_error(weight: torch.Tensor, approx: Factors, moments: Moments) -> float:
    """The map's squared error on inputs of ``moments`` as a share of its output's variance:
    ``tr(D^T C D) / tr(W^T C W)`` with ``D = W - a b`` (the bias absorbs the mean, :func:`data_aware`)."""
    cov, w = moments.covariance, weight.double()
    d = w - approx.a.double() @ approx.b.double()
    return float(torch.trace(d.T @ cov @ d) / torch.trace(w.T @ cov @ w).clamp_min(1e-30))
