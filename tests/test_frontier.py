"""The frontier page (benchmarks/frontier.py): every point's coordinates are the numbers of the results files it
names, a point lacking one is listed as missing instead of drawn, and the committed page and plots are current."""

import json
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT))
from benchmarks import frontier  # noqa: E402
from benchmarks.frontier import Point, Reader, Src  # noqa: E402

SENDER, RECEIVER = frontier.DIRECTIONS["s2g"][1:]
BENEFIT = 1.5


def fidelity(rows: dict, tokens: int = 2048, benefit: float = BENEFIT, **extra) -> dict:
    """A fidelity table as hf-fold eval writes it: rows of name -> recovered."""
    methods = {name: {"recovered": value, "recovered_se": 0.01} for name, value in rows.items()}
    return {"sender": SENDER, "receiver": RECEIVER, "context_tokens": tokens, "windows": 16, "benefit": benefit,
            "data": "bundled:unseen", "methods": methods, **extra}


def handoff(rows: dict, fmt: str = "code", **extra) -> dict:
    """A hand-off retrieval result: rows of setting -> (correct, kept) out of 10 documents at 2048 tokens."""
    cells = {name: {"accuracy": c / 10, "accuracy_se": 0.1, "correct": c, "n": 10, "kept": kept,
                    "recomputed_share": 0.0} for name, (c, kept) in rows.items()}
    return {"sender": SENDER, "receiver": RECEIVER, "lengths": [2048], "docs": 10, "data": "bundled:unseen",
            "settings": [], "formats": {fmt: {"2048": cells}}, **extra}


def write_results(root, *, score=None, history=None, bench_tokens=2048) -> Reader:
    """A results folder: experiment exp.json (score at 2048, handoff-speed at 2047 tokens, bench at 2048, handoff)
    and a history run's file, with numbers no real run has."""
    stages = {
        "score": {"provenance": {}, "result": {"2048": score or fidelity({"heterofold": 0.612, "kv-ridge": 0.231})}},
        "handoff-speed": {"provenance": {}, "result": {"sender": SENDER, "receiver": RECEIVER, "lengths": {
            "512": {"settings": {"transfer": {"speedup": 11.0}, "statement-tail@0.1": {"speedup": 3.0}}},
            "2047": {"settings": {"transfer": {"speedup": 41.5}, "statement-tail@0.1": {"speedup": 8.25},
                                 "statement@0.05": {"speedup": 23.5}}}}}},
        "bench": {"provenance": {}, "result": {"directions": [{"sender": SENDER, "receiver": RECEIVER, "rows": [
            {"context_tokens": bench_tokens, "speedup": {"end_to_end": {"heterofold": 33.0, "kv-ridge": 55.5}}}]}]}},
        "handoff": {"provenance": {}, "result": handoff({"native": (6, 1.0), "transfer": (0, 0.0),
                                                        "statement@0.05": (5, 0.8333)})},
    }
    (root / "exp.json").write_text(json.dumps({"experiment": "exp", "stages": stages}))
    (root / "old").mkdir(exist_ok=True)
    (root / "old" / "tail10.json").write_text(json.dumps(history or fidelity({"heterofold": 0.847})))
    (root / "old" / "v0.json").write_text(json.dumps(fidelity({"heterofold": 0.5})))
    return Reader(root, experiments=root)


POINTS = {"s2g": [
    Point("pure", "a v1", "a@v1", recovered=Src("exp.json", "score", "heterofold"),
          speed=Src("exp.json", "handoff-speed", "transfer"), kept={"code": Src("exp.json", "handoff", "transfer")}),
    Point("tail 10%", "a v1", "a@v1", "statement-tail@0.1", recovered=Src("old/tail10.json", None, "heterofold"),
          speed=Src("exp.json", "handoff-speed", "statement-tail@0.1")),
    Point("statement 5%", "a v1", "a@v1", "statement@0.05", speed=Src("exp.json", "handoff-speed", "statement@0.05"),
          kept={"code": Src("exp.json", "handoff", "statement@0.05")}),
    Point("KV Ridge", "KV Ridge", "kv-ridge", recovered=Src("exp.json", "score", "kv-ridge"),
          speed=Src("exp.json", "bench", "kv-ridge"), plots=("recovered",)),
    Point("v0", "a v0", "a@v0", recovered=Src("old/v0.json", None, "heterofold"), plots=("recovered",)),
]}


def test_each_point_is_the_numbers_of_the_files_it_names(tmp_path):
    placed = frontier.build(write_results(tmp_path), POINTS)["s2g"]
    drawn = {m.label: (m.x.value, m.y.value) for m in frontier.shown(placed, "recovered")}
    assert drawn == {"pure": (41.5, 0.612), "tail 10%": (8.25, 0.847), "KV Ridge": (55.5, 0.231)}
    kept = {(m.label, m.fmt): (m.x.value, m.y.value) for m in frontier.shown(placed, "kept")}
    assert kept == {("pure", "code"): (41.5, 0.0), ("statement 5%", "code"): (23.5, 0.8333)}
    by_label = {q.point.label: q for q in placed}
    assert by_label["tail 10%"].speed.detail == "2047 tokens"  # the hand-off document's own length, shown
    assert by_label["tail 10%"].speed.reference == 41.5  # that run's pure transfer
    assert by_label["KV Ridge"].speed.reference == 33.0
    assert by_label["statement 5%"].kept["code"].detail == "5/10 exact"


def test_a_point_lacking_a_coordinate_is_listed_as_missing_not_drawn(tmp_path):
    placed = frontier.build(write_results(tmp_path), POINTS)["s2g"]
    missing = {q.point.label: lacks for q, lacks in frontier.missing(placed, "recovered")}
    assert missing == {"statement 5%": [("recovered", None)], "v0": [("speed", None)]}
    assert {m.label for m in frontier.shown(placed, "recovered")}.isdisjoint(missing)
    missing_facts = {q.point.label: lacks for q, lacks in frontier.missing(placed, "kept")}
    assert missing_facts == {"pure": [("kept", "prose")], "tail 10%": [("kept", "code"), ("kept", "prose")],
                             "statement 5%": [("kept", "prose")]}
    page = frontier.page({"s2g": placed})
    missing_section = page.split("## Missing coordinates", 1)[1].split("## How the points are read")[0]
    assert "| v0 |" in missing_section and "`bench` stage" in missing_section
    assert "recovered 0.500" in missing_section and "| statement 5% |" in missing_section


def test_the_page_names_each_figure_with_its_file(tmp_path):
    page = frontier.page(frontier.build(write_results(tmp_path), POINTS))
    row = next(line for line in page.splitlines() if line.startswith("| a v1 | tail 10% |"))
    assert "0.847 ± 0.010, 16 windows" in row and "[tail10.json](../assets/results/old/tail10.json)" in row
    assert "8.2x (2047 tokens)" in row and "`handoff-speed`, `statement-tail@0.1`" in row and "| 41.5x |" in row


def test_a_figure_of_another_length_pair_text_or_window_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match="512 tokens, not 2048"):
        frontier.build(write_results(tmp_path, history=fidelity({"heterofold": 0.8}, tokens=512)), POINTS)
    with pytest.raises(ValueError, match="tail10.json is x -> "):
        frontier.build(write_results(tmp_path, history={**fidelity({"heterofold": 0.8}), "sender": "x"}), POINTS)
    with pytest.raises(ValueError, match="scores bundled:unseen-prose"):
        frontier.build(write_results(tmp_path, history=fidelity({"heterofold": 0.8}, data="bundled:unseen-prose")),
                       POINTS)
    with pytest.raises(ValueError, match="not scored on the windows"):
        frontier.build(write_results(tmp_path, history=fidelity({"heterofold": 0.8}, benefit=1.2)), POINTS)
    with pytest.raises(ValueError, match="no end-to-end speed-up at 2048"):
        frontier.build(write_results(tmp_path, bench_tokens=1024), POINTS)
    bf16 = {"s2g": [Point("x", "a", "a@v1", map_dtype="bfloat16", recovered=Src("exp.json", "score", "heterofold"))]}
    with pytest.raises(ValueError, match="which is the adapter's own dtype"):
        frontier.build(write_results(tmp_path), bf16)


def test_check_finds_a_page_or_plot_the_files_no_longer_give(tmp_path):
    pytest.importorskip("matplotlib")
    results, pages = tmp_path / "results", tmp_path / "checkout"
    results.mkdir()
    written = frontier.write(pages, write_results(results), POINTS)
    assert [p.name for p in written] == ["frontier.md", "frontier-s2g.png", "frontier-s2g-retrieval.png"]
    assert frontier.check(pages, write_results(results), POINTS) == []
    found = frontier.check(pages, write_results(results, score=fidelity({"heterofold": 0.655, "kv-ridge": 0.231})),
                           POINTS)
    assert any("frontier.md, line" in line and "0.655" in line for line in found), found
    assert any("frontier-s2g.png was drawn from other figures" in line for line in found), found
    assert not any("retrieval.png" in line for line in found), "the facts plot's points did not change"


def test_the_committed_page_and_plots_are_what_the_results_give():
    assert frontier.check() == []


def test_every_point_reads_only_committed_files():
    """No point names a file outside benchmarks/results/ or one git does not track."""
    import subprocess

    tracked = set(subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    for points in frontier.POINTS.values():
        for p in points:
            for src in filter(None, [p.recovered, p.speed, p.elsewhere, *p.kept.values()]):
                assert f"benchmarks/results/{src.file}" in tracked, (p.label, src.file)
