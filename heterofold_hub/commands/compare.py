"""``hf-fold compare``: two ``hf-fold eval --json`` results, their rows paired on the windows both scored."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from heterofold_hub.commands.tables import Column, print_table
from heterofold_hub.errors import HeteroFoldError, UsageError

COLUMNS = [Column("first"), Column("second"), Column("recovered, first - second", justify="right"),
           Column("KL, first - second", justify="right"), Column("first's NLL lower on", 1, justify="right")]


def read_result(path: Path) -> dict:
    """A fidelity result written by ``hf-fold eval --json``; a clear error for a missing, unreadable or other file."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; pass the --json file of an hf-fold eval run.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a readable JSON file ({error}); pass the --json file of an hf-fold eval "
                         "run.") from None
    if not isinstance(result, dict) or "methods" not in result:
        raise UsageError(f"{path}: not an hf-fold eval --task fidelity result (no 'methods'); pass the --json file of "
                         "an hf-fold eval run.")
    return result


def transfer_rows(result: dict) -> list[str]:
    from heterofold_hub.evaluation.paired_runs import REFERENCES

    return [name for name in result["methods"] if name not in REFERENCES]


def row_pairs(first: dict, second: dict, rows: list[str]) -> list[tuple[str, str]]:
    """``--row NAME`` (a row of both) or ``--row FIRST:SECOND``; none given: every row both results have, or their
    only rows when each has one."""
    if rows:
        return [tuple(r.split(":", 1)) if ":" in r else (r, r) for r in rows]
    a, b = transfer_rows(first), transfer_rows(second)
    shared = [name for name in a if name in b]
    if shared:
        return [(name, name) for name in shared]
    if len(a) == 1 and len(b) == 1:
        return [(a[0], b[0])]
    raise UsageError(f"The results share no row name (first: {', '.join(a)}; second: {', '.join(b)}): choose with "
                     "--row FIRST_ROW:SECOND_ROW.")


def run_compare(first: Path, second: Path, *, rows: list[str], as_json: bool, console: Console) -> list[dict]:
    """Pair each chosen row of ``first`` with its row of ``second`` and print the differences (``--json``: as JSON)."""
    from heterofold_hub.evaluation.paired_runs import paired_between

    a, b = read_result(first), read_result(second)
    out = []
    for row_a, row_b in row_pairs(a, b, rows):
        try:
            paired = paired_between(a, row_a, b, row_b, names=(str(first), str(second)))
        except HeteroFoldError as error:
            raise UsageError(str(error)) from None
        out.append({"first": row_a, "second": row_b, **paired})
    if as_json:
        console.file.write(json.dumps(out, indent=2) + "\n")
        return out
    print_table(console, COLUMNS, [[f"{first.name}: {d['first']}", f"{second.name}: {d['second']}",
                                    f"{d['recovered']:+.3f} ± {d['recovered_se']:.3f}", f"{d['kl']:+.4f} ± {d['kl_se']:.4f}",
                                    f"{d['windows_better']}/{d['windows']} windows"] for d in out],
                title=f"paired on the same {out[0]['windows']} windows (jackknife errors of the differences)")
    return out
