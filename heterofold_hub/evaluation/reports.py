"""Markdown tables of committed results, so README figures are generated from the JSON a command wrote (and a
test holds the README to them), never typed in by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

from heterofold_hub.transfer.config import TransferConfig

REFERENCES = ("native", "no-context")


def fidelity_markdown(result: dict) -> str:
    """The fidelity table of one ``hf-fold eval --json`` result: references first, then methods by recovered."""
    rows = result["methods"]
    order = [m for m in REFERENCES if m in rows] + sorted((m for m in rows if m not in REFERENCES),
                                                         key=lambda m: -rows[m]["recovered"])
    lines = ["| method | recovered | KL (nats/tok) | top-1 | NLL (nats/tok) |", "| --- | ---: | ---: | ---: | ---: |"]
    for name in order:
        r = rows[name]
        lines.append(f"| {name} | {r['recovered']:.3f} ± {r['recovered_se']:.3f} | {r['kl']:.3f} ± {r['kl_se']:.3f} | "
                     f"{r['top1']:.3f} | {r['nll']:.3f} ± {r['nll_se']:.3f} |")
    return "\n".join(lines)


def scaled_keys(config: TransferConfig) -> str:
    """``", keys left mapped x0.7"`` for a config with a key scale, else ``""``."""
    return "" if config.mapped_key_scale == 1 else f", keys left mapped x{config.mapped_key_scale:g}"


def recompute_phrase(record: dict) -> str:
    """``"recomputing 0.05 by statement + first 2 layers, keys left mapped x0.7"`` for a recompute record (a
    :class:`~heterofold_hub.transfer.config.TransferConfig`'s fields; older records call the share ``fraction``)."""
    config = TransferConfig.from_dict(record, strict=False)
    return (f"recomputing {config.recompute:g} by {config.select_name}"
            + (f" + first {config.repair_layers} layers" if config.repair_layers else "") + scaled_keys(config))


def fidelity_caption(result: dict) -> str:
    """One line on what the table measured."""
    record = result.get("recompute")  # a transfer followed by a selective native recompute
    config = None if not record else TransferConfig.from_dict(record, strict=False)
    if config is not None and not config.recompute and not config.repair_layers:  # a key scale alone
        how = f"; the keys of every mapped row scaled by {config.mapped_key_scale:g}"
    else:
        how = "" if config is None else (f"; after each map the receiver recomputed {config.recompute:g} of the "
                                         f"context chosen by {config.select_name}" + (
                                             f" and its first {config.repair_layers} layers" if config.repair_layers
                                             else "") + scaled_keys(config))
    return (f"**{result['sender']} -> {result['receiver']}**: {result['windows']} windows of "
            f"{result['context_tokens']} context + {result['continuation_tokens']} continuation receiver tokens; "
            f"context benefit {result['benefit']:.3f} ± {result['benefit_se']:.3f} nats/token{how}")


def _same(a, b) -> bool:
    """Equal, numbers to float32 rounding: the same windows scored in batches of another size differ in the last
    bits (about 1e-7 relative), other windows by far more."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return a == b


def merge_results(results: list[dict]) -> dict:
    """One table from results scored on the same windows (e.g. one ``hf-fold train`` run per method): same pair,
    window count and sizes, and the same native and no-context rows (to float32 rounding), or a ValueError naming
    what differs. The references shown are the first result's."""
    first = results[0]
    keys = ("sender", "receiver", "windows", "context_tokens", "continuation_tokens", "benefit", "benefit_se")
    for other in results[1:]:
        differs = [k for k in keys if not _same(other[k], first[k])]
        differs += [m for m in REFERENCES if not _same(other["methods"].get(m), first["methods"].get(m))]
        if differs:
            raise ValueError(f"results were not scored on the same windows ({', '.join(differs)} differ); "
                             "show them as separate tables")
    methods = dict(first["methods"])
    for other in results[1:]:
        for name, row in other["methods"].items():
            if name in REFERENCES:
                continue  # the first result's, equal to rounding (checked above)
            if name in methods:
                raise ValueError(f"two results have a {name!r} row; a merged table needs one row per method")
            methods[name] = row
    return {**first, "methods": methods}


def labelled(path: str | Path) -> dict:
    """The result in ``path``; ``FILE=LABEL`` names its one method row LABEL (e.g. two heterofold adapters made
    differently, shown in one table), ``FILE=ROW:LABEL`` names its row ROW LABEL (several: ``ROW:LABEL;ROW:LABEL``)."""
    file, _, labels = str(path).partition("=")
    result = json.loads(Path(file).read_text())
    own = [m for m in result["methods"] if m not in REFERENCES]
    names = {}
    for label in filter(None, labels.split(";")):
        row, _, new = label.rpartition(":")
        if row and row not in own:
            raise ValueError(f"{file} has no {row!r} row; its rows are {', '.join(own)}")
        if not row and len(own) != 1:
            raise ValueError(f"{file} has {len(own)} method rows ({', '.join(own)}); name one: FILE=ROW:LABEL")
        names[row or own[0]] = new
    result["methods"] = {names.get(m, m): r for m, r in result["methods"].items()}
    return result


def readme_section(groups: list[list[str | Path]]) -> str:
    """Caption and table of each group of committed results (merged: same windows), as the README shows them."""
    parts = []
    for paths in groups:
        result = merge_results([labelled(path) for path in paths])
        parts.append(f"{fidelity_caption(result)}\n\n{fidelity_markdown(result)}")
    return "\n\n".join(parts)


if __name__ == "__main__":
    import sys

    # python -m heterofold_hub.evaluation.reports a.json,b.json=label c.json: one table per argument (files joined
    # by commas; FILE=LABEL renames that file's one method row, FILE=ROW:LABEL its row ROW)
    print(readme_section([arg.split(",") for arg in sys.argv[1:]]))
