"""Two fidelity results paired on their shared windows: a lever measured in one run (a key scale, a recompute
setting, a new package) against a row of another run, with the paired error that one run's ``paired`` rows give.

Each ``hf-fold eval --json`` result keeps per-window NLL and KL (``per_window``); where two results were scored on
the same windows with the same receiver, their rows can be compared as if they had been scored side by side.
"""

from __future__ import annotations

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.fidelity import paired_difference

REFERENCES = ("native", "no-context")


def _rows(result: dict, name: str) -> dict[str, dict[str, torch.Tensor]]:
    record = result.get("per_window")
    if record is None:
        raise HeteroFoldError(f"Result {name} keeps no per-window figures (it was written before they were recorded): "
                              "score it again with this version of hf-fold eval to pair it with another run.")
    return {row: {k: torch.tensor(v, dtype=torch.float64) for k, v in m.items()} for row, m in record["methods"].items()}


def paired_between(a: dict, row_a: str, b: dict, row_b: str, *, names: tuple[str, str] = ("a", "b")) -> dict:
    """Row ``row_a`` of fidelity result ``a`` against row ``row_b`` of result ``b``
    (:func:`heterofold_hub.evaluation.fidelity.evaluate` results, e.g. two ``hf-fold eval --json`` files), paired on
    their windows: :func:`~heterofold_hub.evaluation.fidelity.paired_difference` (``a``'s recovered minus ``b``'s,
    the same for KL, each with its jackknife error, and the windows where ``a``'s NLL is lower).

    Refused, naming what differs, unless both results kept per-window figures for the same windows in the same order
    and the receiver's own prefill scored them alike (the same receiver, dtype and text). ``names`` label the two
    results in errors (file names, say)."""
    rows_a, rows_b = _rows(a, names[0]), _rows(b, names[1])
    for rows, row, name in ((rows_a, row_a, names[0]), (rows_b, row_b, names[1])):
        if row not in rows or row in REFERENCES:
            choices = ", ".join(r for r in rows if r not in REFERENCES)
            raise HeteroFoldError(f"Result {name} has no transfer row {row!r}; its rows: {choices}.")
    ids_a, ids_b = a["per_window"]["windows"], b["per_window"]["windows"]
    if ids_a != ids_b:
        first = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
        raise HeteroFoldError(
            f"Results {names[0]} and {names[1]} were not scored on the same windows ({len(ids_a)} and {len(ids_b)} "
            f"windows, first difference at window {first}): pair runs with the same --data, --context-tokens, "
            "--continuation-tokens and --windows.")
    native_a, native_b = rows_a["native"]["nll"], rows_b["native"]["nll"]
    if not torch.allclose(native_a, native_b, rtol=1e-4, atol=1e-5):
        gap = float((native_a - native_b).abs().max())
        raise HeteroFoldError(
            f"Results {names[0]} and {names[1]} share their windows, but the receiver's own prefill scored them "
            f"differently (NLL differs by up to {gap:.2e} nats/token): they ran other receivers or dtypes "
            f"({a.get('receiver')}, {a.get('dtype')} against {b.get('receiver')}, {b.get('dtype')}), so their rows "
            "do not pair.")
    merged = {**{ref: rows_a[ref] for ref in REFERENCES}, "A": rows_a[row_a], "B": rows_b[row_b]}
    return paired_difference(merged, "A", "B")
