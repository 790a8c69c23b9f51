"""The key-structure probe's projections (benchmarks/probes/key_structure.py): a key Gemma 3's k_norm could have made
is left as it is, and any other key is put on that structure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "key_structure.py"
spec = importlib.util.spec_from_file_location("key_structure", PROBE)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

GAIN = torch.tensor([2.0, 0.0, -0.5, 1.0])


def k_norm(x: torch.Tensor) -> torch.Tensor:
    """What Gemma 3's RMSNorm makes of ``x`` ``[..., 4]`` with gain ``GAIN``."""
    return GAIN * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_a_native_key_is_left_as_it_is_by_both_projections():
    # two heads of one row, flattened as map_layer returns them; the zero-gain dimension of x is 0 so that
    # RMS over the live dimensions is the key's own
    x = torch.tensor([[3.0, 0.0, -1.0, 2.0, 0.5, 0.0, 1.5, -2.0]])
    native = torch.cat([k_norm(x[:, :4]), k_norm(x[:, 4:])], -1)
    for how in probe.PROJECTIONS:
        assert torch.allclose(probe.project(native, GAIN, how), native, atol=1e-5), how


def test_a_mapped_key_is_put_on_the_structure():
    mapped = torch.tensor([[4.0, 1.0, 3.0, -2.0]])
    assert probe.project(mapped, GAIN, "zero-gain dims").tolist() == [[4.0, 0.0, 3.0, -2.0]]
    projected = probe.project(mapped, GAIN, "rms")
    u = projected[0, [0, 2, 3]] / GAIN[[0, 2, 3]]
    assert projected[0, 1] == 0 and torch.isclose(u.pow(2).sum() / 4, torch.tensor(1.0), atol=1e-4)
    assert torch.allclose(u / u.norm(), torch.tensor([2.0, -6.0, -2.0]) / torch.tensor(44.0).sqrt())  # k / g's direction
