"""MkDocs hooks (``hooks:`` in mkdocs.yml): pages and files the site builds from the repository itself, so none of
them is copied by hand.

- ``index.md``: the README, its links rewritten for the site.
- ``catalogue/``: the adapter catalogue and history, from ``registry.json`` and the hub (``docs/gen_catalogue.py``).
- ``changelog.md``: ``CHANGELOG.md``.
- ``assets/results/``: every results file (plots, JSON, text: experiments' ``NAME.json`` and the history runs'
  files), so pages can show and link them.
- ``cli-conventions.md``: a placeholder only while the CLI branch's page is not in ``docs/`` yet.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

import gen_catalogue  # noqa: E402
from gen_tables import FILES_URL  # noqa: E402

ASSETS = "assets"
ROOT_FILES = {"registry.json": "registry.json", "LICENSE": "LICENSE.txt", "NOTICE": "NOTICE.txt",
              "examples/two_agents.py": "examples/two_agents.py"}
CLI_PLACEHOLDER = """# CLI conventions

This page is written with the command-line work and is not in this build yet. Until then, `hf-fold COMMAND --help`
describes each command's options, with examples.
"""


def readme_for_site(text: str) -> str:
    """The README as the site's home page: its absolute links to the repository (:data:`FILES_URL`) become relative,
    then links into docs/ become site links, links to repository files links to their copies under assets/."""
    text = text.replace(f"]({FILES_URL}", "](")
    text = text.replace("](docs/)", "](getting-started.md)")
    text = re.sub(r"\]\(docs/([^)]+)\)", r"](\1)", text)
    text = text.replace("](benchmarks/results/", f"]({ASSETS}/results/")
    for name, target in ROOT_FILES.items():
        text = text.replace(f"]({name})", f"]({ASSETS}/{target})")
    return text


def on_config(config):
    """The catalogue's pages in the nav, one per registry repository, under "Adapter catalogue"."""
    repos = [e["repo_id"] for e in gen_catalogue.registry(ROOT)["adapters"]]
    for item in config["nav"] or []:
        if isinstance(item, dict) and "Adapter catalogue" in item:
            item["Adapter catalogue"] = list(item["Adapter catalogue"]) + [
                {repo: gen_catalogue.page_name(repo)} for repo in repos]
    return config


SPHINX_ROLE = re.compile(r":(?:meth|class|func|mod|attr|data|obj|exc):(?=<code)")


def on_page_content(html, page, config, files):
    """Docstrings use Sphinx roles (``:meth:`transfer```), which mkdocstrings leaves as text before the code."""
    return SPHINX_ROLE.sub("", html)


def on_files(files, config):
    def add(uri: str, *, content: str | None = None, path: Path | None = None) -> None:
        if files.get_file_from_path(uri) is not None:
            files.remove(files.get_file_from_path(uri))
        if content is not None:
            files.append(File.generated(config, uri, content=content))
        else:
            files.append(File.generated(config, uri, abs_src_path=str(path)))

    add("index.md", content=readme_for_site((ROOT / "README.md").read_text()))
    add("changelog.md", content=(ROOT / "CHANGELOG.md").read_text())
    for uri, text in gen_catalogue.pages(ROOT).items():
        add(uri, content=text)
    results = ROOT / "benchmarks" / "results"
    for path in sorted(results.rglob("*")):
        if path.is_file() and path.suffix != ".lock":  # a lock beside a results file is not a result
            add(f"{ASSETS}/results/{path.relative_to(results).as_posix()}", path=path)
    for name, target in ROOT_FILES.items():
        add(f"{ASSETS}/{target}", path=ROOT / name)
    if not (DOCS / "cli-conventions.md").exists():
        add("cli-conventions.md", content=CLI_PLACEHOLDER)
    return files
