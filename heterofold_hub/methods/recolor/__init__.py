"""Moment-matched recoloring alone (no output calibration): HeteroFold's starting point."""

from ...alignment import layers_by_depth, source_candidates
from ...stats import moment_match
from ..affine import AffineAdapter, fit_affine
from ..base import register_method


@register_method("recolor")
class RecolorAdapter(AffineAdapter):
    """Per receiver layer, whiten the depth-aligned sender features and colour them with the receiver's
    own mean and covariance (``heterofold_hub.stats.moment_match``)."""

    @classmethod
    def fit(cls, calib, *, sources_per_layer: int = 2, eps: float = 1e-3, sender_layers: str = "all",
            **_) -> "RecolorAdapter":
        sources = layers_by_depth(calib.sender_spec.num_layers, calib.receiver_spec.num_layers, sources_per_layer,
                                  source_candidates(calib.sender_spec, sender_layers))
        return fit_affine(cls, calib, "recolor", sources, lambda x, y: moment_match(x, y, eps), eps=eps)
