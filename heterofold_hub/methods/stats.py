"""Closed-form fits on calibration features: ridge regression and moment-matched recoloring.

Inputs are token-major: ``X`` ``[N, in]`` aligned sender features, ``Y`` ``[N, out]`` receiver
features. Work happens in float64; results come back as float32 ``W`` ``[in, out]``, ``b`` ``[out]``.
"""

from __future__ import annotations

import torch


def _centered(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    mean = x.mean(0)
    return x - mean, mean


def _sym_power(cov: torch.Tensor, power: float, eps: float) -> torch.Tensor:
    """``cov ** power`` for a symmetric PSD matrix, eigenvalues floored at ``eps * mean eigenvalue``."""
    vals, vecs = torch.linalg.eigh(cov)
    floor = eps * vals.clamp(min=0).mean().clamp(min=1e-12)
    return (vecs * vals.clamp(min=floor).pow(power)) @ vecs.T


def ridge(x: torch.Tensor, y: torch.Tensor, lam: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """``W = (Xc^T Xc + lam * s I)^-1 Xc^T Yc`` with an intercept; ``s`` is the mean feature variance x N,
    so ``lam`` does not depend on the features' scale."""
    xc, mx = _centered(x)
    yc, my = _centered(y)
    gram = xc.T @ xc
    reg = lam * gram.diagonal().mean().clamp(min=1e-12)
    w = torch.linalg.solve(gram + reg * torch.eye(len(gram), dtype=gram.dtype), xc.T @ yc)
    return w.float(), (my - mx @ w).float()


def r2(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> float:
    """Share of ``y``'s variance that ``x @ w + b`` explains."""
    resid = (y - x @ w - b).pow(2).sum()
    total = (y - y.mean(0)).pow(2).sum().clamp(min=1e-12)
    return float(1 - resid / total)


def moment_match(x: torch.Tensor, y: torch.Tensor, eps: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """Affine map whose output has ``y``'s mean and covariance (rank permitting).

    Whiten ``x`` with its own covariance, rotate by the orthogonal Procrustes solution of the whitened
    cross-covariance, colour with ``y``'s covariance: ``W = Sx^-1/2 U V^T Sy^1/2``. Unlike ridge it does
    not shrink the output variance (which would flatten the receiver's attention).
    """
    xc, mx = _centered(x)
    yc, my = _centered(y)
    n = len(xc)
    whiten = _sym_power(xc.T @ xc / n, -0.5, eps)
    colour = _sym_power(yc.T @ yc / n, 0.5, eps)
    inv_colour = _sym_power(yc.T @ yc / n, -0.5, eps)
    cross = whiten @ (xc.T @ yc / n) @ inv_colour  # whitened cross-covariance [in, out]
    u, _, vh = torch.linalg.svd(cross, full_matrices=False)
    w = whiten @ (u @ vh) @ colour
    return w.float(), (my - mx @ w).float()


def ridge_recolor(x: torch.Tensor, y: torch.Tensor, lam: float = 0.01, eps: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge's prediction, recoloured: ``W = W_ridge @ W_mm`` where ``W_mm`` moment-matches ``x @ W_ridge + b`` to
    ``y``. Ridge picks what ``x`` can predict of ``y`` but shrinks its variance (flattening the receiver's
    attention); the recolouring restores ``y``'s mean and covariance along ridge's directions, and is not
    rank-limited by a narrower ``x`` the way whitening ``x`` itself is."""
    w_ridge, b_ridge = ridge(x, y, lam)
    w_mm, b_mm = moment_match(x.float() @ w_ridge + b_ridge, y, eps)
    return w_ridge @ w_mm, b_ridge @ w_mm + b_mm
