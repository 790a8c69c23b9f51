"""Markdown tables of committed results, so README figures are generated from the JSON a command wrote (and a
test holds the README to them), never typed in by hand."""

from __future__ import annotations

import json
from pathlib import Path

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


def fidelity_caption(result: dict) -> str:
    """One line on what the table measured."""
    return (f"**{result['sender']} -> {result['receiver']}**: {result['windows']} windows of "
            f"{result['context_tokens']} context + {result['continuation_tokens']} continuation receiver tokens; "
            f"context benefit {result['benefit']:.3f} ± {result['benefit_se']:.3f} nats/token")


def readme_section(paths: list[str | Path]) -> str:
    """Caption and table of each committed result, in order, as the README shows them."""
    parts = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        parts.append(f"{fidelity_caption(result)}\n\n{fidelity_markdown(result)}")
    return "\n\n".join(parts)


if __name__ == "__main__":
    import sys

    print(readme_section(sys.argv[1:]))
