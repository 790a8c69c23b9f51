"""NOTICE keeps up with registry.json: every shipped adapter derived from Gemma 3 is named under the Gemma Terms of
Use, with each of its versions, so a new Gemma-derived adapter cannot be shipped without its notice."""

import json
import re

from helpers import ROOT

GEMMA = "gguf/gemma3-270m-q4_k_m"
GEMMA_TERMS = "https://ai.google.dev/gemma/terms"


def notice_sections() -> dict[str, str]:
    """NOTICE's sections by title (a title is the line above a line of dashes)."""
    lines = (ROOT / "NOTICE").read_text().splitlines()
    starts = [i - 1 for i, line in enumerate(lines) if re.fullmatch(r"-{8,}", line)]
    return {lines[s]: "\n".join(lines[s + 2 : e]) for s, e in zip(starts, starts[1:] + [len(lines) + 1])}


def listed(section: str) -> dict[str, set[str]]:
    """The adapter repos a section lists on their own lines (``heterofold/<name>   v1.0.0, v1.1.0 ...``), with the
    versions each line names."""
    version = r"v\d+\.\d+\.\d+(?:-rc\.\d+)?"  # pre-releases too: published, so derived like any version
    rows = re.findall(rf"^\s+(heterofold/\S+)\s+({version}(?:, {version})*)", section, re.M)
    return {repo: set(versions.split(", ")) for repo, versions in rows}


def registry_adapters() -> list[dict]:
    return json.loads((ROOT / "registry.json").read_text())["adapters"]


def gemma_derived() -> dict[str, set[str]]:
    return {entry["repo_id"]: {v["version"] for v in entry["versions"]} for entry in registry_adapters()
            if GEMMA in (entry["sender"]["id"], entry["receiver"]["id"])}


def test_every_gemma_derived_adapter_is_named_under_the_gemma_terms_with_its_versions():
    sections = notice_sections()
    gemma = [text for title, text in sections.items() if "Gemma Terms of Use" in title]
    assert len(gemma) == 1, list(sections)
    assert GEMMA_TERMS in gemma[0] and GEMMA in gemma[0]
    derived = gemma_derived()
    assert len(derived) >= 3  # the registry as of this test: two Gemma 3 senders, one Gemma 3 receiver
    assert listed(gemma[0]) == derived  # no Gemma-derived repo or version missing, none listed that is not


def test_no_other_section_lists_a_gemma_derived_adapter_and_every_adapter_has_a_licence():
    """The Apache-2.0 section names the remaining adapters; a Gemma-derived one must not appear there."""
    sections = notice_sections()
    derived = gemma_derived()
    apache = "\n".join(text for title, text in sections.items() if "Apache License 2.0" in title)
    assert not set(listed(apache)) & set(derived)
    others = {entry["repo_id"] for entry in registry_adapters()} - set(derived)
    assert others and all(repo in apache for repo in others), others - {r for r in others if r in apache}
