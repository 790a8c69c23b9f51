"""Moment-matched recoloring alone (no output calibration): HeteroFold's starting point."""

from dataclasses import dataclass

from heterofold_hub.transfer.alignment import SENDER_LAYERS, layers_by_depth, source_candidates
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods.stats import moment_match, ridge_recolor
from heterofold_hub.methods.affine import AffineAdapter, fit_affine
from heterofold_hub.adapter.base import register_method
from heterofold_hub.adapter.config import MethodOptions
from heterofold_hub.methods.kv_ridge import best_correlated_layers

BASES = ("features", "ridge")
LAYER_CHOICES = ("depth", "correlated")


@dataclass
class RecolorOptions(MethodOptions):
    """``base``: moment-match the sender features themselves ("features") or ridge's prediction of the receiver's
    ("ridge"); ``layers``: sources nearest in relative depth ("depth") or best explained by ridge ("correlated");
    ``sender_layers``: "all", or "full" (layers whose cache keeps every position)."""

    sources_per_layer: int = 2
    eps: float = 1e-3
    lam: float = 0.01
    base: str = "features"
    layers: str = "depth"
    sender_layers: str = "all"

    def __post_init__(self):
        for name, value, valid in (("base", self.base, BASES), ("layers", self.layers, LAYER_CHOICES),
                                   ("sender_layers", self.sender_layers, SENDER_LAYERS)):
            if value not in valid:
                raise HeteroFoldError(f"recolor: {name}={value!r}; choose one of {', '.join(valid)}.")


@register_method("recolor")
class RecolorAdapter(AffineAdapter):
    """Per receiver layer, an affine map whose output has the receiver's own mean and covariance: whiten the
    sender features and colour them with the receiver's statistics (``stats.moment_match``), or recolour ridge's
    prediction (``stats.ridge_recolor``), which keeps ridge's directions without its shrunken variance."""

    @classmethod
    def fit(cls, calib, *, batches=None, receiver=None, seed: int = 0, progress: bool = True,
            **options) -> "RecolorAdapter":
        o = RecolorOptions.from_kwargs("recolor", options)
        candidates = source_candidates(calib.sender_spec, o.sender_layers)
        if o.layers == "depth":
            sources = layers_by_depth(calib.sender_spec.num_layers, calib.receiver_spec.num_layers,
                                      o.sources_per_layer, candidates)
        else:
            sources = best_correlated_layers(calib, o.sources_per_layer, o.lam, candidates=candidates)
        if o.base == "features":
            return fit_affine(cls, calib, "recolor", sources, lambda x, y: moment_match(x, y, o.eps), eps=o.eps)
        return fit_affine(cls, calib, "recolor", sources, lambda x, y: ridge_recolor(x, y, o.lam, o.eps), eps=o.eps,
                          lam=o.lam, base=o.base, layers=o.layers)
