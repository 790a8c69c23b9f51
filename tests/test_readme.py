"""Every results table in README.md and the results pages (docs/results/) is generated from a committed JSON result
(benchmarks/results/) or registry.json, so no figure is typed in by hand or taken from an ignored run folder."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from heterofold_hub.evaluation.reports import fidelity_markdown, labelled, merge_results

from helpers import ROOT

sys.path.insert(0, str(ROOT / "docs"))
sys.path.insert(0, str(ROOT))
import gen_results  # noqa: E402
import gen_tables  # noqa: E402
from benchmarks import report  # noqa: E402

README_MAX_LINES = 220


RESULTS_PAGES = report.results_pages()


def pages() -> str:
    """The text that shows results: the README (a product page) and the results pages (every experiment, by topic)."""
    return "\n\n".join(path.read_text() for path in [ROOT / "README.md", *RESULTS_PAGES])


def page_showing(table: str) -> str:
    """The results page (relative to the repository) that shows the figures of every body row of a table (a row's
    name cell may be a label there)."""
    rows = [row.split("|", 2)[2] for row in table.splitlines()[2:]]
    path = next(p for p in RESULTS_PAGES if all(row in p.read_text() for row in rows))
    return path.relative_to(ROOT).as_posix()

FIDELITY = report.fidelity_tables()


def test_fidelity_results_are_committed():
    assert any(where.startswith("real-s2g.json") for where, _ in FIDELITY), "the README's fidelity figures"


@pytest.mark.parametrize("where, result", FIDELITY, ids=[where for where, _ in FIDELITY])
def test_the_docs_show_each_committed_fidelity_result_exactly(where, result):
    """Its caption, then a table holding every row of it as generated (results scored on the same windows share
    one table: merge_results)."""
    assert report.fidelity_differences(pages(), where, result) == []


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


HANDOFF = report.handoff_tables()


@pytest.mark.parametrize("where, table", HANDOFF, ids=[where for where, _ in HANDOFF])
def test_the_docs_show_each_hand_off_result_exactly(where, table):
    """Every hand-off retrieval and speed table is generated from its committed JSON (per format)."""
    assert table in pages(), f"no results page shows {where}'s table as generated"


def test_every_figure_matches_its_file():
    """What `python -m benchmarks report --check` runs: every generated block, fidelity and hand-off table."""
    assert report.check() == []


def _copy_pages(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / gen_results.RESULTS_DIR, tmp_path / gen_results.RESULTS_DIR)
    return tmp_path


def _one_figure(table: str) -> str:
    """The first figure cell (a number) of a Markdown table's body rows."""
    for line in table.splitlines()[2:]:
        for cell in line.strip("|").split("|")[1:]:
            if re.search(r"\d\.\d", cell):
                return cell
    raise AssertionError(f"no figure in {table[:200]!r}")


def _bump(cell: str) -> str:
    """The cell with its first digit after a decimal point changed."""
    return re.sub(r"(\.)(\d)", lambda m: m.group(1) + str((int(m.group(2)) + 1) % 10), cell, count=1)


EDITS = {  # page, and the table a figure of it is edited in: every kind of table the check covers
    **{f"README {name}": ("README.md", lambda name=name: gen_tables.blocks()[name]) for name in gen_tables.blocks()},
    **{f"results {name}": (f"{gen_results.RESULTS_DIR}/{gen_results.PAGES[name]}", lambda name=name: gen_results.blocks()[name])
       for name in gen_results.blocks()},
    **{f"results {name}": (page_showing(table()), table) for name, table in {
        "fidelity": lambda: fidelity_markdown(dict(FIDELITY)["real-s2g.json score 2048"]),
        "hand-off": lambda: HANDOFF[0][1],
        "hand-off speed": lambda: dict(HANDOFF)["real-s2g-handoff-speed.json handoff-speed"]}.items()},
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_check_fails_when_a_figure_is_edited(tmp_path, edit):
    """A copy of the pages with one figure changed: the check names it."""
    page, table_of = EDITS[edit]
    root = _copy_pages(tmp_path)
    table = table_of()
    cell = _one_figure(table)
    row = next(line for line in table.splitlines() if cell in line)
    text = (root / page).read_text()
    assert row in text, f"{page} does not show {edit}'s row as generated"
    (root / page).write_text(text.replace(row, row.replace(cell, _bump(cell), 1)))
    assert report.check(root), f"editing {cell!r} in {page} ({edit}) went unnoticed"


def test_a_what_to_expect_block_naming_a_version_users_do_not_resolve_is_refused(monkeypatch):
    """A promotion changes the registry's default; the block's runs were chosen for the old version, so generating it
    fails by name until they are pointed at the new one."""
    import gen_catalogue

    repo_id, shown = gen_tables.DIRECTIONS["g2s"]["adapter"].split()
    default = gen_catalogue.resolved(gen_tables._entry(gen_tables.DIRECTIONS["g2s"]))["version"]
    assert shown == default  # the committed block names the version users resolve
    stale = {**gen_tables.DIRECTIONS["g2s"], "adapter": f"{repo_id} v1.3.0"}  # an older published version
    monkeypatch.setitem(gen_tables.DIRECTIONS, "g2s", stale)
    with pytest.raises(ValueError, match=rf"shows {re.escape(repo_id)} v1\.3\.0, but the registry resolves "
                                         rf"{re.escape(default)}"):
        gen_tables.expect_markdown("g2s")


def test_report_check_exits_1_listing_the_figure(tmp_path):
    root = _copy_pages(tmp_path)
    cell = _one_figure(gen_tables.blocks()["expect-s2g"]).strip()
    readme = (root / "README.md").read_text()
    (root / "README.md").write_text(readme.replace(cell, _bump(cell), 1))
    run = subprocess.run([sys.executable, "-m", "benchmarks", "report", "--check", "--pages", str(root)], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert run.returncode == 1 and repr(_bump(cell)) in run.stdout and repr(cell) in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("name", sorted(gen_tables.blocks()))
def test_the_readme_blocks_are_as_generated(name):
    """The "what to expect" tables and the adapter list: every cell from committed results and registry.json
    (`python -m benchmarks report` rewrites them)."""
    readme = (ROOT / "README.md").read_text()
    assert f"<!-- gen:{name} -->" in readme, f"README.md lacks its generated block {name!r}"
    assert gen_tables.generated_block(readme, name) == gen_tables.blocks()[name], \
        f"README.md's {name!r} block differs from its files: run python -m benchmarks report"


@pytest.mark.parametrize("name", sorted(gen_results.blocks()))
def test_the_results_page_blocks_are_as_generated(name):
    where = f"{gen_results.RESULTS_DIR}/{gen_results.PAGES[name]}"
    page = (ROOT / where).read_text()
    assert f"<!-- gen:{name} -->" in page, f"{where} lacks its generated block {name!r}"
    assert gen_tables.generated_block(page, name) == gen_results.blocks()[name], \
        f"{where}'s {name!r} block differs from its files: run python -m benchmarks report"


def test_the_expectations_cite_only_committed_files():
    """Each source a "what to expect" table links is a committed file."""
    readme = (ROOT / "README.md").read_text()
    for name in ("expect-s2g", "expect-g2s"):
        links = re.findall(rf"\]\({re.escape(gen_tables.FILES_URL)}(benchmarks/results/[^)]+)\)",
                           gen_tables.generated_block(readme, name))
        assert links and all((ROOT / link).is_file() for link in links), links


def _prose(markdown: str) -> str:
    """Markdown without its generated blocks and code."""
    markdown = re.sub(r"<!-- gen:([a-z0-9-]+) -->.*?<!-- /gen:\1 -->", "", markdown, flags=re.S)
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.sub(r"`[^`]*`", "", markdown)


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub and MkDocs' toc make it (lowercase, punctuation dropped, spaces to -)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_readme_link_is_absolute_and_resolves_in_the_checkout():
    """A package index shows the README away from the repository, so every link is absolute. Each one into the
    repository (gen_tables.FILES_URL, the project's future home: pyproject.toml's [project.urls] Repository) is mapped
    back to the checkout: the file or folder exists, and an anchor names a heading of that page."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert len(links) > 20 and not [link for link in links if not link.startswith("https://")], links
    into_repo = [link.removeprefix(gen_tables.FILES_URL) for link in links if link.startswith(gen_tables.FILES_URL)]
    assert len(into_repo) == len(links) - 1  # and the Gemma Terms of Use
    for link in into_repo:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links {gen_tables.FILES_URL}{link}, but the checkout has no {path}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{path} has no heading for #{anchor}"


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


SUMMARY = re.compile(r"\A# [^\n]+\n\n<!-- summary -->\n(.*?)\n<!-- /summary -->\n", re.S)
FIGURE = re.compile(r"(?<![\d.])-?\d+\.\d+x?|\b\d+x\b")  # a decimal (a range's dash is no sign) or a speed-up


@pytest.mark.parametrize("page", [p for p in RESULTS_PAGES if p.name != "index.md"], ids=lambda p: p.name)
def test_each_results_page_opens_with_a_summary_of_its_own_figures(page):
    """At most five lines under the title, and every figure in them is one the page shows below (a summary
    restates the page; it never brings a figure of its own)."""
    text = page.read_text()
    found = SUMMARY.match(text)
    assert found, f"{page.name} does not open with its title and a <!-- summary --> block"
    lines = found.group(1).splitlines()
    assert 1 <= len(lines) <= 5, f"{page.name}'s summary has {len(lines)} lines"
    body = text[found.end():]
    assert not [f for f in FIGURE.findall(found.group(1)) if f not in body], \
        f"{page.name}'s summary states figures its page does not show"


def test_the_results_overview_links_every_results_page():
    index = (ROOT / gen_results.RESULTS_DIR / "index.md").read_text()
    linked = set(re.findall(r"\]\(([a-z0-9-]+\.md)\)", index))
    assert linked == {p.name for p in RESULTS_PAGES if p.name != "index.md"}, linked


def _section(name: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]


def test_the_quick_start_runs_the_real_hand_off_first_then_exactly_what_ci_runs():
    commands = [line for line in _section("Quick start").split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
                if line and not line.startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert commands == ["bash scripts/setup.sh && .venv/bin/hf-fold demo", ci], commands
    assert "GGUF files (about 1.6 GB)" in _section("Quick start"), "the first run's conversion is stated"


def test_the_options_table_lists_every_transfer_option_with_its_default():
    import inspect

    from heterofold_hub.modeling import HeteroFoldModel
    from heterofold_hub.transfer.config import FIELDS, TransferConfig
    from heterofold_hub.transfer.selects import SELECT_READS

    table = _section("Quick start").split("### Transfer options", 1)[1]
    rows = {line.split("|")[1].strip().strip("`"): line for line in table.splitlines() if line.startswith("| `")}
    assert list(rows) == [*FIELDS, "query", "spans"], list(rows)
    assert set(rows) <= set(inspect.signature(HeteroFoldModel.transfer).parameters)
    for name in FIELDS:
        default = getattr(TransferConfig(), name)
        shown = rows[name].rstrip(" |").rsplit("|", 1)[1].strip().strip("`")
        assert shown == (json.dumps(default) if isinstance(default, str) else f"{default:g}"), (name, shown)
    assert all(f"`{name}`" in rows["select"] for name in SELECT_READS), "every selection strategy is named"


def test_what_to_expect_is_at_most_four_rows_a_direction():
    for name in ("expect-s2g", "expect-g2s"):
        rows = [line for line in gen_tables.blocks()[name].splitlines() if line.startswith("| ")][2:]
        assert 1 <= len(rows) <= 4, f"{name}: {len(rows)} rows"
        assert all(len(line) < 2500 for line in rows), "no cell is a paragraph"


def test_the_glossary_defines_the_words_the_tables_use():
    glossary = _section("What to expect").split("### Glossary", 1)[1]
    terms = re.findall(r"^- \*\*(.+?)\*\*", glossary, flags=re.M)
    for word in ("prefill", "pure transfer", "recompute", "context benefit kept (`recovered`)", "KL", "KV Ridge",
                 "Dense Latent", "`bundled:unseen`", "`statement@0.05`"):
        assert word in terms, f"the glossary does not define {word}"


def test_the_adapters_table_marks_test_pairs_and_flags_adapters_below_kv_ridge():
    from heterofold_hub.zoo import DEMO_MODELS

    registry = {e["repo_id"]: e for e in json.loads((ROOT / "registry.json").read_text())["adapters"]}
    rows = [line for line in gen_tables.generated_block((ROOT / "README.md").read_text(), "adapters").splitlines()][2:]
    assert sorted(re.match(r"\| `([^`]+)`", row).group(1) for row in rows) == sorted(registry)
    flagged = 0
    for row in rows:
        entry = registry[re.match(r"\| `([^`]+)`", row).group(1)]
        tiny = any(entry[side]["id"] in DEMO_MODELS for side in ("sender", "receiver"))
        assert ("**test pair**" in row) == tiny, row
        cell = row.split(" | ")[3]
        own, ridge = re.match(r"(-?\d\.\d+)", cell), re.search(r"(?:KV Ridge|below KV Ridge\*\*) \(?(-?\d\.\d+)", cell)
        if ridge:
            below = float(own.group(1)) < float(ridge.group(1))
            assert ("**below KV Ridge**" in cell) == below, cell
            flagged += below
    assert flagged, "the tiny Qwen -> Llama adapter sits below its KV Ridge"
    tiers = ["**test pair**" in row for row in rows]
    assert tiers == sorted(tiers), "real pairs first"
