"""``python -m benchmarks report``: the generated blocks of the README and of the results pages (``docs/results/``, one
page per topic) from the results files, and ``--check``: every figure those pages show, compared with its file.

Two kinds of table are held to their files. Generated blocks (between ``<!-- gen:NAME -->`` markers: the "what to
expect" tables, adapters, retrieval, speed, tiny bench, pivot probe) are rewritten by ``report`` from
``docs/gen_tables.py`` and ``docs/gen_results.py``, the one place their logic lives. Fidelity and hand-off tables
sit in the results pages' prose as generated once (``heterofold_hub.evaluation.reports``/``handoff``); ``--check``
finds each result's rows under its caption. One page is generated whole: the frontier (``benchmarks/frontier.py``),
with its plots.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "docs"))

import gen_results  # noqa: E402
import gen_tables  # noqa: E402

from benchmarks import frontier  # noqa: E402

def pages(root: Path = ROOT) -> dict[Path, dict[str, str]]:
    """Each page with generated blocks, and those blocks as the files give them (``gen_results.PAGES`` says which
    results page holds which block)."""
    out = {root / "README.md": gen_tables.blocks()}
    for name, body in gen_results.blocks().items():
        out.setdefault(root / gen_results.RESULTS_DIR / gen_results.PAGES[name], {})[name] = body
    return out


def results_pages(root: Path = ROOT) -> list[Path]:
    """Every results page: where fidelity and hand-off tables are looked for."""
    return sorted((root / gen_results.RESULTS_DIR).glob("*.md"))


def write(root: Path = ROOT) -> list[Path]:
    for page, blocks in pages(root).items():
        gen_tables.write_blocks(page, blocks)
    return list(pages(root)) + frontier.write(root)


def fidelity_tables() -> list[tuple[str, dict]]:
    """Every fidelity table in the results files: (where, table). An experiment's train stage holds one per
    package (its held-out table), its score stage one per context; a history run's file is one table."""
    found = []
    for path in sorted(RESULTS.glob("*.json")):
        for stage, entry in json.loads(path.read_text())["stages"].items():
            if stage == "train":
                found += [(f"{path.name} train {name}", run["heldout"]) for name, run in entry["result"].items()]
            elif stage == "score":
                found += [(f"{path.name} score {context}", table) for context, table in entry["result"].items()]
    for path in sorted(RESULTS.glob("*/fidelity-*.json")):
        found.append((str(path.relative_to(RESULTS)), json.loads(path.read_text())))
    return found


def handoff_tables() -> list[tuple[str, str]]:
    """Every hand-off table the results page shows as generated: (where, Markdown)."""
    from heterofold_hub.evaluation.handoff import handoff_markdown, speed_markdown

    found = []
    for path in sorted(RESULTS.glob("*.json")):
        stages = json.loads(path.read_text())["stages"]
        if "handoff" in stages:
            result = stages["handoff"]["result"]
            found += [(f"{path.name} handoff {fmt}", handoff_markdown(result, fmt)) for fmt in result["formats"]]
        if "handoff-speed" in stages:
            found.append((f"{path.name} handoff-speed", speed_markdown(stages["handoff-speed"]["result"])))
    for path in sorted((RESULTS / "handoff").glob("s2g-*.json")):
        if "screen-v1" in path.name:  # superseded by s2g-screen.json; kept for its own record, not shown
            continue
        result = json.loads(path.read_text())
        found += [(f"handoff/{path.name} {fmt}", handoff_markdown(result, fmt)) for fmt in result["formats"]]
    return found


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def block_differences(page: Path, name: str, shown: str, expected: str) -> list[str]:
    """One line per figure (table cell) of a generated block that differs from what its files give."""
    where = f"{page.name} <!-- gen:{name} -->"
    out = []
    shown_lines, expected_lines = shown.splitlines(), expected.splitlines()
    for i, (a, b) in enumerate(zip(shown_lines, expected_lines)):
        if a == b:
            continue
        row = _cells(b)[0] if b.startswith("|") else f"line {i + 1}"
        cells_a, cells_b = _cells(a), _cells(b)
        if a.startswith("|") and len(cells_a) == len(cells_b):
            out += [f"{where}, row {row!r}: shows {x!r}, its file gives {y!r}" for x, y in zip(cells_a, cells_b) if x != y]
        else:
            out.append(f"{where}, {row!r}: shows {a!r}, its file gives {b!r}")
    if len(shown_lines) != len(expected_lines):
        out.append(f"{where}: {len(shown_lines)} lines shown, its files give {len(expected_lines)}")
    return out


def fidelity_differences(text: str, where: str, result: dict) -> list[str]:
    """The result's caption must be on the page with a table under it holding each of its rows exactly, the native
    and no-context rows included (a merged table shows the first result's, equal to rounding; a row's name cell
    may be a label, so only its figures are compared)."""
    from heterofold_hub.evaluation.reports import fidelity_caption, fidelity_markdown

    caption = fidelity_caption(result)
    if caption not in text:
        return [f"{where}: the pages lack its caption {caption!r}"]
    tables = [part.split("\n\n", 2)[1] for part in text.split(caption)[1:] if part.count("\n\n") >= 1]
    figures = lambda row: row.split("|", 2)[2]  # noqa: E731
    rows = fidelity_markdown(result).splitlines()[2:]
    shown = [{figures(line) for line in table.splitlines()[2:] if line.count("|") > 2} for table in tables]
    if any(all(figures(row) in table for row in rows) for table in shown):
        return []
    return [f"{where}: no table under its caption shows row {row!r}" for row in rows
            if not any(figures(row) in table for table in shown)] or [f"{where}: its rows are split across tables"]


def check(root: Path = ROOT) -> list[str]:
    """Every figure of README.md and the results pages (under ``root``) that differs from its results file."""
    out = frontier.check(root)
    texts = {}
    for page, blocks in pages(root).items():
        if not page.is_file():
            out.append(f"{page.relative_to(root)} is missing; it holds {', '.join(blocks)}")
            continue
        text = texts[page] = page.read_text()
        for name, expected in blocks.items():
            if f"<!-- gen:{name} -->" not in text:
                out.append(f"{page.name} lacks its generated block <!-- gen:{name} -->")
                continue
            out += block_differences(page, name, gen_tables.generated_block(text, name), expected)
    for page in results_pages(root):
        texts.setdefault(page, page.read_text())
    every = "\n\n".join(texts.values())
    for where, result in fidelity_tables():
        out += fidelity_differences(every, where, result)
    out += [f"{where}: no results page shows this table as generated" for where, table in handoff_tables()
            if table not in every]
    return out
