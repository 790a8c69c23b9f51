"""HeteroFold: a closed-form starting map, then output-aware calibration on the receiver's logits, folded.

The folded adapter is one affine map per receiver layer for K and V, exactly like recoloring's, so transfer costs
the same. Calibration is training, and training lives in ``trainers/`` (Lightning), which depends on this library
and never the other way round: ``hf-fold train`` fits it (``heterofold_hub.trainers.calibrate.calibrate``).
"""

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods.affine import AffineAdapter
from heterofold_hub.adapter.base import register_method


@register_method("heterofold")
class HeteroFoldAdapter(AffineAdapter):
    """Folded HeteroFold adapter: ``k = x @ k_weight[layer] + k_bias[layer]`` (same for v)."""

    @classmethod
    def fit(cls, calib, **_) -> "HeteroFoldAdapter":
        raise HeteroFoldError("HeteroFold adapters are trained, not fitted in closed form: run `hf-fold train` (or "
                              "heterofold_hub.trainers.calibrate.calibrate), then score the package with "
                              "`hf-fold eval --adapter DIR`.")
