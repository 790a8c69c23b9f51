"""HeteroFold: moment-matched recoloring, then output-aware calibration on the receiver's logits, folded.

The folded adapter is one affine map per receiver layer for K and V, exactly like recoloring's, so
transfer costs the same. Calibration lives in ``trainers/`` (Lightning); ``fit`` here runs it with
the library defaults so every method can be fitted through one interface.
"""

from ..affine import AffineAdapter
from ..base import register_method


@register_method("heterofold")
class HeteroFoldAdapter(AffineAdapter):
    """Folded HeteroFold adapter: ``k = x @ k_weight[layer] + k_bias[layer]`` (same for v)."""

    @classmethod
    def fit(cls, calib, *, batches=None, receiver=None, seed: int = 0, progress: bool = True, **options) -> "HeteroFoldAdapter":
        from trainers.calibrate import calibrate  # late import: trainers depends on the library

        return calibrate(calib, batches, receiver, seed=seed, progress=progress, **options)
