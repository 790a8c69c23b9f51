"""The C gather/turn kernel against the torch ops it replaces, its refusals, and how it is built."""

import pytest
import torch

from heterofold_hub.transfer import kernels
from heterofold_hub.transfer.plan import Turn

from helpers import kernels_or_skip


def tables(n: int, dim: int, rotary: int, *, seed: int = 0) -> Turn:
    """A Turn at ``n`` rows (``[n, 1, dim]`` tables) with random angles, as plan tables are after ``at``."""
    angles = torch.rand(1, n, rotary // 2, generator=torch.Generator().manual_seed(seed)) * 6.3
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    return Turn.from_tables((cos, sin), dim, inverse=False).at(slice(0, n))


@pytest.fixture(scope="module")
def kernel():
    return kernels_or_skip()  # the torch ops that serve without them are covered by test_streaming


@pytest.mark.parametrize("dim,rotary", [(24, 24), (48, 48), (32, 16), (10, 0)])
def test_gather_turn_matches_the_torch_ops(kernel, dim, rotary):
    n, heads, sources = 37, 3, 2
    source = torch.randn(500, dim)
    rows = torch.randint(0, 500, (n * heads,))
    turn = tables(n, dim, rotary) if rotary else None
    inputs = torch.full((n, sources * heads * dim), float("nan"))  # the block is a strided view of a wider input
    block = inputs[:, heads * dim:].unflatten(-1, (heads, dim))
    kernel.gather_turn(source, rows, block, turn)
    gathered = source.index_select(0, rows).view(n, heads, dim)
    expected = gathered.clone() if turn is None else turn.apply(gathered, torch.empty_like(gathered))
    assert torch.allclose(block, expected, atol=1e-6, rtol=0)
    assert inputs[:, :heads * dim].isnan().all()  # nothing written outside the block


@pytest.mark.parametrize("dim,rotary", [(24, 24), (32, 16)])
def test_turn_in_place_matches_the_torch_ops(kernel, dim, rotary):
    x = torch.randn(19, 2, dim)
    turn = tables(19, dim, rotary, seed=1)
    expected = turn.apply(x.clone())
    kernel.turn(x, turn)
    assert torch.allclose(x, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dim,rotary", [(24, 24), (32, 16), (10, 0)])
def test_gather_turn_into_bf16_rounds_each_result_as_torch_does(kernel, dim, rotary):
    """The gather a map with bf16 products reads: the float32 gather and turn, rounded to bf16 as written, bit for
    bit what converting the float32 rows with torch gives (ties to even, infinities included); a NaN stays NaN."""
    n, heads = 41, 2
    source = torch.randn(300, dim) * 10
    source[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1 + 2 ** -8])  # 1 + 2^-8: a tie
    rows = torch.cat([torch.zeros(heads, dtype=torch.long), torch.randint(0, 300, ((n - 1) * heads,))])
    turn = tables(n, dim, rotary) if rotary else None
    wide, narrow = torch.empty(n, heads, dim), torch.empty(n, 3 * heads, dim, dtype=torch.bfloat16)
    kernel.gather_turn(source, rows, wide, turn)
    kernel.gather_turn(source, rows, narrow[:, heads:2 * heads], turn)  # a strided block of a wider input
    got, want = narrow[:, heads:2 * heads], wide.bfloat16()
    assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
    assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))


@pytest.mark.parametrize("dim,rotary", [(24, 24), (32, 16)])
def test_widen_turn_is_widening_then_the_in_place_turn(kernel, dim, rotary):
    """bf16 products into a float32 cache: widened and turned in one pass, the same numbers as widening and then
    turning, and as the torch ops; without a turn, only widened."""
    x = torch.randn(23, 3, dim).bfloat16()
    turn = tables(23, dim, rotary, seed=2)
    cache = torch.full((23, 5, 3, dim), float("nan"))  # rows of a wider cache: any row stride
    kernel.widen_turn(x, cache[:, 1], turn)
    expected = x.float()
    kernel.turn(expected, turn)
    assert torch.equal(cache[:, 1], expected)
    assert torch.allclose(cache[:, 1], turn.apply(x.float()), atol=1e-6, rtol=0)
    assert cache[:, [0, 2, 3, 4]].isnan().all()  # nothing written outside those rows
    kernel.widen_turn(x, cache[:, 2])
    assert torch.equal(cache[:, 2], x.float())


def test_layouts_the_kernel_was_not_written_for_are_refused(kernel):
    source, rows, out = torch.randn(50, 8), torch.zeros(6, dtype=torch.long), torch.empty(3, 2, 8)
    bad = {
        "source rows": (source.t().contiguous().t(), rows, out),           # transposed storage
        "rows": (source, rows.int(), out),                                  # int32 rows
        "output": (source, rows, torch.empty(3, 8, 2).transpose(1, 2)),    # heads not contiguous
    }
    for what, args in bad.items():
        with pytest.raises(ValueError, match=what):
            kernel.gather_turn(*args)
    with pytest.raises(ValueError, match="source rows"):
        kernel.gather_turn(source.double(), rows, out.double())  # float64
    with pytest.raises(ValueError, match="RoPE table"):
        kernel.turn(out, tables(4, 8, 8))  # tables for 4 rows, 3 given
    with pytest.raises(ValueError, match="bf16 rows"):
        kernel.widen_turn(out, out)  # float32 given where bf16 products are read
    with pytest.raises(ValueError, match="output"):
        kernel.widen_turn(out.bfloat16(), out.bfloat16())  # a bf16 cache: only float32 is written


def test_built_once_per_machine_atomically_and_optional(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_FOLD_HOME", str(tmp_path))
    build = kernels._loaded.__wrapped__  # load() and status() are cached for the process: (kernels, status line)
    kernels_or_skip()  # skips only where they are off or there is no compiler
    first, status = build()
    assert first is not None, status
    built = list((tmp_path / "kernels").iterdir())
    assert len(built) == 1 and built[0].suffix == ".so"  # no scratch left behind
    stamp = built[0].stat().st_mtime_ns
    again, line = build()
    assert again is not None and built[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert line == f"on: {built[0]}"
    monkeypatch.setenv("HF_FOLD_KERNELS", "0")
    assert build() == (None, "off (HF_FOLD_KERNELS=0): torch ops")
    monkeypatch.setenv("HF_FOLD_KERNELS", "1")
    monkeypatch.setenv("CC", "no-such-compiler")
    assert build() == (None, "no C compiler ('no-such-compiler' not found; set CC to one): torch ops")
    monkeypatch.setenv("HF_FOLD_HOME", str(tmp_path / "other"))
    monkeypatch.setenv("CC", "false")  # a "compiler" that fails: fall back, leave nothing half-built
    kernel, line = build()
    assert kernel is None and line.startswith("could not be built with ") and line.endswith(": torch ops")
    assert not any((tmp_path / "other" / "kernels").glob("*.so"))
