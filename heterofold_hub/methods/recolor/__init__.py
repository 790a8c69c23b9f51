"""Moment-matched recoloring alone (no output calibration): HeteroFold's starting point."""

from ...alignment import layers_by_depth, source_candidates
from ...errors import HeteroFoldError
from ...stats import moment_match, ridge_recolor
from ..affine import AffineAdapter, fit_affine
from ..base import register_method
from ..kv_ridge import best_correlated_layers

BASES = ("features", "ridge")
LAYER_CHOICES = ("depth", "correlated")


@register_method("recolor")
class RecolorAdapter(AffineAdapter):
    """Per receiver layer, an affine map whose output has the receiver's own mean and covariance.

    ``base="features"``: whiten the sender features and colour them with the receiver's statistics
    (``stats.moment_match``); ``base="ridge"``: recolour ridge regression's prediction (``stats.ridge_recolor``),
    which keeps ridge's directions without its shrunken variance. Sources: the sender layers nearest in relative
    depth (``layers="depth"``) or best explained by ridge (``"correlated"``)."""

    @classmethod
    def fit(cls, calib, *, sources_per_layer: int = 2, eps: float = 1e-3, lam: float = 0.01, base: str = "features",
            layers: str = "depth", sender_layers: str = "all", **_) -> "RecolorAdapter":
        if base not in BASES or layers not in LAYER_CHOICES:
            raise HeteroFoldError(f"recolor: base={base!r} (choose {', '.join(BASES)}), layers={layers!r} (choose "
                                  f"{', '.join(LAYER_CHOICES)}).")
        candidates = source_candidates(calib.sender_spec, sender_layers)
        if layers == "depth":
            sources = layers_by_depth(calib.sender_spec.num_layers, calib.receiver_spec.num_layers, sources_per_layer,
                                      candidates)
        else:
            sources = best_correlated_layers(calib, sources_per_layer, lam, candidates=candidates)
        if base == "features":
            return fit_affine(cls, calib, "recolor", sources, lambda x, y: moment_match(x, y, eps), eps=eps)
        return fit_affine(cls, calib, "recolor", sources, lambda x, y: ridge_recolor(x, y, lam, eps), eps=eps,
                          lam=lam, base=base, layers=layers)
