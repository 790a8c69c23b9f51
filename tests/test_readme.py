"""Every results table in README.md and docs/results.md is generated from a committed JSON result
(benchmarks/results/) or registry.json, so no figure is typed in by hand or taken from an ignored run folder."""

import json
import re
import sys
from pathlib import Path

import pytest

from heterofold_hub.evaluation.reports import fidelity_caption, fidelity_markdown, labelled, merge_results

from helpers import ROOT

sys.path.insert(0, str(ROOT / "docs"))
import gen_results  # noqa: E402
import gen_tables  # noqa: E402

README_MAX_LINES = 220


def pages() -> str:
    """The text that shows results: the README (a product page) and docs/results.md (every experiment)."""
    return (ROOT / "README.md").read_text() + "\n\n" + (ROOT / "docs" / "results.md").read_text()

REFERENCE_ROWS = ("| native |", "| no-context |")
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*/fidelity-*.json"))


def test_fidelity_results_are_committed():
    assert RESULTS, "benchmarks/results/*/fidelity-*.json holds the README's fidelity figures"


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_docs_show_each_committed_fidelity_result_exactly(path: Path):
    """Its caption, then a table holding every row of it as generated (results scored on the same windows share
    one table: merge_results)."""
    result = json.loads(path.read_text())
    readme = pages()
    caption = fidelity_caption(result)
    assert caption in readme, f"README.md and docs/results.md lack the caption of {path.name}"
    tables = [part.split("\n\n", 2)[1] for part in readme.split(caption)[1:]]
    # its own method rows' figures exactly (references come from the first result of a merged table, equal to
    # rounding; a row may be labelled, e.g. "composed + calibration", so the name cell is not compared)
    figures = lambda row: row.split("|", 2)[2]
    rows = [figures(row) for row in fidelity_markdown(result).splitlines()[2:] if not row.startswith(REFERENCE_ROWS)]
    assert any(all(row in {figures(line) for line in table.splitlines()[2:]} for row in rows) for table in tables), \
        f"no table under its caption holds {path.name}'s rows exactly"


def test_merged_tables_refuse_results_from_other_windows():
    native = {"recovered": 1.0, "recovered_se": 0.0, "kl": 0.0, "kl_se": 0.0, "top1": 1.0, "nll": 1.5, "nll_se": 0.2}
    base = {"sender": "a", "receiver": "b", "windows": 4, "context_tokens": 8, "continuation_tokens": 2,
            "benefit": 1.0, "benefit_se": 0.1, "methods": {"native": native}}
    other = {**base, "methods": {"native": {**native, "nll": 1.6}, "x": native}}
    with pytest.raises(ValueError, match="native differ"):
        merge_results([base, other])
    merged = merge_results([base, {**base, "methods": {"native": native, "x": native}}])
    assert list(merged["methods"]) == ["native", "x"]
    rounded = {**native, "nll": 1.5 * (1 + 1e-7)}  # batched differently: float32 rounding only
    assert merge_results([base, {**base, "methods": {"native": rounded}}])["methods"]["native"] == native


def test_the_table_puts_references_first_and_rounds_as_shown():
    result = {"methods": {"kv-ridge": {"recovered": 0.5, "recovered_se": 0.01, "kl": 1.0, "kl_se": 0.1, "top1": 0.6,
                                       "nll": 2.0, "nll_se": 0.2},
                          "native": {"recovered": 1.0, "recovered_se": 0.0, "kl": 0.0, "kl_se": 0.0, "top1": 1.0,
                                     "nll": 1.5, "nll_se": 0.2}}}
    lines = fidelity_markdown(result).splitlines()
    assert lines[2] == "| native | 1.000 ± 0.000 | 0.000 ± 0.000 | 1.000 | 1.500 ± 0.200 |"
    assert lines[3] == "| kv-ridge | 0.500 ± 0.010 | 1.000 ± 0.100 | 0.600 | 2.000 ± 0.200 |"


def test_a_row_can_be_labelled_by_name(tmp_path):
    row = {"recovered": 0.5, "recovered_se": 0.01, "kl": 1.0, "kl_se": 0.1, "top1": 0.6, "nll": 2.0, "nll_se": 0.2}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"methods": {"native": row, "heterofold": row, "kv-ridge": row}}))
    assert list(labelled(f"{path}=heterofold:heterofold v1.0.0")["methods"]) == ["native", "heterofold v1.0.0", "kv-ridge"]
    assert list(labelled(f"{path}=heterofold:a;kv-ridge:b")["methods"]) == ["native", "a", "b"]
    with pytest.raises(ValueError, match="2 method rows"):
        labelled(f"{path}=mine")
    with pytest.raises(ValueError, match="no 'recolor' row"):
        labelled(f"{path}=recolor:mine")


HANDOFF = sorted(p for p in (ROOT / "benchmarks" / "results" / "handoff").glob("s2g-*.json") if "screen-v1" not in p.name)


@pytest.mark.parametrize("path", HANDOFF, ids=lambda p: p.name)
def test_the_docs_show_each_hand_off_result_exactly(path: Path):
    """Every hand-off retrieval table is generated from its committed JSON (per format)."""
    from heterofold_hub.evaluation.handoff import handoff_markdown

    result, readme = json.loads(path.read_text()), pages()
    for fmt in result["formats"]:
        assert handoff_markdown(result, fmt) in readme, f"docs/results.md lacks {path.name}'s {fmt} table as generated"


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "results" / "handoff").glob("speed-*.json")),
                         ids=lambda p: p.name)
def test_the_docs_show_each_hand_off_speed_result_exactly(path: Path):
    from heterofold_hub.evaluation.handoff import speed_markdown

    assert speed_markdown(json.loads(path.read_text())) in pages()


@pytest.mark.parametrize("name", sorted(gen_tables.blocks()))
def test_the_readme_blocks_are_as_generated(name):
    """The "what to expect" tables and the adapter list: every cell from committed results and registry.json
    (`python docs/gen_tables.py --write` rewrites them)."""
    readme = (ROOT / "README.md").read_text()
    assert f"<!-- gen:{name} -->" in readme, f"README.md lacks its generated block {name!r}"
    assert gen_tables.generated_block(readme, name) == gen_tables.blocks()[name], \
        f"README.md's {name!r} block differs from its files: run python docs/gen_tables.py --write"


@pytest.mark.parametrize("name", sorted(gen_results.blocks()))
def test_the_results_page_blocks_are_as_generated(name):
    page = (ROOT / "docs" / "results.md").read_text()
    assert f"<!-- gen:{name} -->" in page, f"docs/results.md lacks its generated block {name!r}"
    assert gen_tables.generated_block(page, name) == gen_results.blocks()[name], \
        f"docs/results.md's {name!r} block differs from its files: run python docs/gen_results.py --write"


def test_the_expectations_cite_only_committed_files():
    """Each source a "what to expect" table links is a committed file."""
    readme = (ROOT / "README.md").read_text()
    for name in ("expect-s2g", "expect-g2s"):
        links = re.findall(r"\]\((benchmarks/results/[^)]+)\)", gen_tables.generated_block(readme, name))
        assert links and all((ROOT / link).is_file() for link in links), links


def _prose(markdown: str) -> str:
    """Markdown without its generated blocks and code."""
    markdown = re.sub(r"<!-- gen:([a-z0-9-]+) -->.*?<!-- /gen:\1 -->", "", markdown, flags=re.S)
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.sub(r"`[^`]*`", "", markdown)


def test_the_readme_is_a_short_product_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES, f"README.md has {len(readme.splitlines())} lines"
    assert "<!-- handoff-example -->\n```python\n" in readme  # tests/test_real_pair.py executes it


def test_the_readme_types_no_measured_figure():
    """Outside its generated blocks and code the README states no figure (a decimal to two places, a speed-up, a
    percentage): figures live in the generated tables, held to their files above."""
    prose = _prose((ROOT / "README.md").read_text())
    typed = re.findall(r"\d\.\d\d|\b\d+(?:\.\d+)?x\b|\d+(?:\.\d+)?\s?%", prose)
    assert not typed, f"README.md types figures by hand: {typed}"


def test_the_readme_names_every_command():
    from heterofold_hub.cli import app

    readme = (ROOT / "README.md").read_text()
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert names and all(f"`hf-fold {name}`" in readme for name in names), names
