"""The documentation site builds with MkDocs in strict mode (a warning is an error: a broken link, a missing
page, an API object griffe cannot read), and its generated adapter catalogue covers registry.json exactly."""

import json
import re
import subprocess
import sys
from html import unescape

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "docs"))
import gen_catalogue  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
                         timeout=300)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def text_of(path) -> str:
    return unescape(re.sub(r"<[^>]+>", "", path.read_text()))


REGISTRY = json.loads((ROOT / "registry.json").read_text())["adapters"]


@pytest.mark.parametrize("entry", REGISTRY, ids=lambda e: e["repo_id"])
def test_the_catalogue_has_a_page_per_registered_repo_with_its_versions(site, entry):
    page = site / gen_catalogue.page_name(entry["repo_id"]).replace(".md", "") / "index.html"
    assert page.is_file(), f"no catalogue page for {entry['repo_id']}"
    text = text_of(page)
    assert entry["repo_id"] in text and entry["sender"]["id"] in text and entry["receiver"]["id"] in text
    versions = re.findall(r"^\| (v\d+\.\d+\.\d+(?:-rc\.\d+)?)(?: \(pre-release\))? \|",
                          gen_catalogue.pages()[gen_catalogue.page_name(entry["repo_id"])], flags=re.M)
    assert versions == [v["version"] for v in reversed(entry["versions"])], "one row per version, newest first"
    for v in entry["versions"]:
        assert v["version"] in text and f"{v['metrics']['recovered']:.3f}" in text
    newest = gen_catalogue.resolved(entry)["version"]  # the newest release: a pre-release is used only when pinned
    assert f'revision="{newest}"' in text and f"{entry['repo_id']}@{newest}" in text  # how to load it
    assert ("Gemma Terms of Use" in text) == gen_catalogue.gemma_derived(entry)


def test_the_catalogue_lists_exactly_the_registry(site):
    pages = sorted(p.parent.name for p in (site / gen_catalogue.CATALOGUE).glob("*/index.html"))
    expected = sorted(gen_catalogue.page_name(e["repo_id"]).split("/")[-1][:-3] for e in REGISTRY)
    assert [p for p in pages if p != "history"] == expected
    index = text_of(site / gen_catalogue.CATALOGUE / "index.html")
    assert all(e["repo_id"] in index for e in REGISTRY)
    history = text_of(site / gen_catalogue.CATALOGUE / "history" / "index.html")
    assert sum(len(e["versions"]) for e in REGISTRY) == len(re.findall(r"^\| \d{4}-\d\d-\d\d \|",
                                                                        gen_catalogue.pages()["catalogue/history.md"],
                                                                        flags=re.M))
    assert all(e["repo_id"] in history for e in REGISTRY)


def test_the_site_shows_the_readme_results_and_api(site):
    home = text_of(site / "index.html")
    assert "What to expect" in home and "73914" in home
    pages = sorted((site / "results").glob("*/index.html")) + [site / "results" / "index.html"]
    assert len(pages) == len(list((ROOT / "docs" / "results").glob("*.md"))), "one site page per results page"
    shown = 0
    for page in pages:
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text()):
            assert (page.parent / src).resolve().is_file(), f"{page.parent.name}'s image {src} is not in the site"
            shown += 1
    assert shown >= 10, "the results pages show their plots"
    api = text_of(site / "api" / "index.html")
    for name in ("HeteroFoldModel", "from_pretrained", "TransferPipeline", "prefill_sender", "Registry", "PairAdapter"):
        assert name in api, f"the API reference lacks {name}"
    assert (site / "cli-conventions" / "index.html").is_file()


def test_the_speed_shown_is_the_newest_timing_of_the_recommended_setting():
    """SmolLM2 -> Gemma 3 v1.4.0's newest hand-off timing is a recompute sweep (statement-tail) that does not time the
    recommended setting: the catalogue and the README show the newest run that does, not the sweep's pure transfer."""
    entry = next(e for e in REGISTRY if e["repo_id"] == "heterofold/smollm2-135m-to-gemma3-270m")
    setting = gen_catalogue.recommended(entry)[0]
    weights = gen_catalogue.resolved(entry)["files"]["adapter.safetensors"]
    newest = max(gen_catalogue._speed_rows(weights), key=lambda row: row.date)
    assert setting not in next(iter(newest.speedups.values())), "the newest timing should be one without the setting"
    shown = gen_catalogue.newest_timing(entry)
    assert shown.kind == "handoff" and all(setting in speeds for speeds in shown.speedups.values())
    assert f"`{setting}`" in gen_catalogue.speed_cell(entry)


def test_trained_on_names_each_source_of_a_continued_chain_once():
    """v1.4.0-rc.1 went on from a package that itself went on from one trained on ``bundled:wide``: its config
    records that data once per link, and the catalogue says it once."""
    entry = next(e for e in REGISTRY if e["repo_id"] == "heterofold/gemma3-270m-to-smollm2-135m")
    candidate = next(v for v in gen_catalogue.load_versions(entry) if v.name == "v1.4.0-rc.1")
    assert candidate.config["extra"]["continued_from"]["data"].count("bundled:wide") > 1  # the chain as recorded
    assert "continued from a package trained on `bundled:wide`, 251 windows" in gen_catalogue.trained_on(candidate)
