"""Moment re-matching at the pivot: recolour the first leg's predicted pivot K/V to the pivot's own statistics.

The second leg (P -> B) was fitted on the pivot's *own* K/V. The first leg's predictions of them (A -> P) carry
the wrong mean and covariance where its calibration did not need them right (what P's next-token loss ignores).
Recolouring each predicted pivot layer to P's mean and covariance on calibration text (``stats.moment_match``,
as ``ridge_recolor`` recolours ridge's prediction) hands the second leg inputs of the distribution it was fitted
on. It is one affine map per pivot layer, so it folds into the first leg and the composition stays one affine
map per receiver layer. It needs the pivot model run once over the calibration text, and no gradient.
"""

from __future__ import annotations

import copy

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods.affine import AffineAdapter
from heterofold_hub.methods.stats import moment_match


def rematch(first: AffineAdapter, calib, *, eps: float = 1e-3) -> AffineAdapter:
    """A copy of ``first`` (A -> P) whose every pivot layer's keys and values have the pivot's own mean and covariance
    on ``calib`` (a CalibrationSet of A -> P: sender A's features ``[N, in]``, the pivot's own ``[N, out]``)."""
    c = first.config
    if (calib.sender_name, calib.receiver_name) != (c.sender, c.receiver):
        raise HeteroFoldError(f"Re-matching {c.sender} -> {c.receiver} needs calibration features of that pair, not "
                              f"{calib.sender_name} -> {calib.receiver_name}.")
    out = copy.deepcopy(first)
    with torch.no_grad():
        for p in range(len(c.layer_sources)):
            for j, (kind, (weight, bias), x) in enumerate(zip("kv", first.affine_maps(p),
                                                               first.layer_inputs(calib.sender, p))):
                predicted = x.double() @ weight.double() + bias.double()
                w_mm, b_mm = (t.double() for t in moment_match(predicted, calib.receiver[p][j], eps))
                out.set_layer(p, kind, (weight.double() @ w_mm).float(), (bias.double() @ w_mm + b_mm).float())
    return out
