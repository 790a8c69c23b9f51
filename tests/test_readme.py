"""Every results table in README.md is generated from a committed JSON result (benchmarks/results/), so no figure
is typed in by hand or taken from an ignored run folder."""

import json
from pathlib import Path

import pytest

from heterofold_hub.evaluation.reports import fidelity_caption, fidelity_markdown, labelled, merge_results

from helpers import ROOT

REFERENCE_ROWS = ("| native |", "| no-context |")
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*/fidelity-*.json"))


def test_fidelity_results_are_committed():
    assert RESULTS, "benchmarks/results/*/fidelity-*.json holds the README's fidelity figures"


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_readme_shows_each_committed_fidelity_result_exactly(path: Path):
    """Its caption, then a table holding every row of it as generated (results scored on the same windows share
    one table: merge_results)."""
    result = json.loads(path.read_text())
    readme = (ROOT / "README.md").read_text()
    caption = fidelity_caption(result)
    assert caption in readme, f"README lacks the caption of {path.name}"
    tables = [part.split("\n\n", 2)[1] for part in readme.split(caption)[1:]]
    # its own method rows' figures exactly (references come from the first result of a merged table, equal to
    # rounding; a row may be labelled, e.g. "composed + calibration", so the name cell is not compared)
    figures = lambda row: row.split("|", 2)[2]
    rows = [figures(row) for row in fidelity_markdown(result).splitlines()[2:] if not row.startswith(REFERENCE_ROWS)]
    assert any(all(row in {figures(line) for line in table.splitlines()[2:]} for row in rows) for table in tables), \
        f"no README table under its caption holds {path.name}'s rows exactly"


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
def test_the_readme_shows_each_hand_off_result_exactly(path: Path):
    """Every hand-off retrieval table in README.md is generated from its committed JSON (per format)."""
    from heterofold_hub.evaluation.handoff import handoff_markdown

    result, readme = json.loads(path.read_text()), (ROOT / "README.md").read_text()
    for fmt in result["formats"]:
        assert handoff_markdown(result, fmt) in readme, f"README lacks {path.name}'s {fmt} table as generated"


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "results" / "handoff").glob("speed-*.json")),
                         ids=lambda p: p.name)
def test_the_readme_shows_each_hand_off_speed_result_exactly(path: Path):
    from heterofold_hub.evaluation.handoff import speed_markdown

    assert speed_markdown(json.loads(path.read_text())) in (ROOT / "README.md").read_text()
