"""Build HeteroFold Hub's distributions: the core wheel and the companion adapter wheels, into dist/.

    python scripts/build_dists.py                       # every distribution, into dist/
    python scripts/build_dists.py --out DIR --only heterofold-hub --only heterofold-hub-adapters-smollm2-to-gemma3

- **heterofold-hub** (core): ``pip wheel`` of a staged copy of the files the build reads (never the checkout
  itself, whose setuptools ``build/`` folder would carry stale files from one build into the next); ``setup.py``
  copies ``cli.py``, ``trainers/``, ``registry.json``, ``cards/`` and the embedded hub's core repos
  (``heterofold_hub.paths.CORE_REPOS``: the tiny test pair) into the package.
- **companions** (``heterofold_hub.paths.COMPANIONS``): a data-only wheel per entry, package
  ``heterofold_hub_adapters_<name>``, holding each of its repos' default version (the one ``Registry.find``
  resolves when no version is asked for) as the folder ``heterofold_hub.hub.export`` writes, checked against
  registry.json's hashes; ``adapters.json`` saying what it carries; an entry point in the group
  ``heterofold_hub.adapters`` by which an installed heterofold-hub finds it; and a dependency on exactly this
  heterofold-hub version (whose registry.json lists those versions and hashes).

Each wheel's size is checked against its limit (core at most 20 MB, a companion under 100 MB, PyPI's default file
limit) and printed. Needs setuptools>=77 in this interpreter (the `test` extra): builds run without isolation and
without an index.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import heterofold_hub
from heterofold_hub.hub.export import default_version, export_version
from heterofold_hub.hub.local import LocalHub
from heterofold_hub.hub.registry import Registry
from heterofold_hub.paths import (
    ADAPTERS_GROUP,
    COMPANION_MANIFEST,
    COMPANIONS,
    CORE_DISTRIBUTION,
    CORE_REPOS,
    REPOSITORY_URL,
)

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
LIMITS = {"core": 20 * MB, "companion": 100 * MB}  # core: at most; companion: under (PyPI refuses > 100 MB)
# What the core build reads: setup.py copies the root's files among these into the package.
CORE_SOURCES = ["pyproject.toml", "setup.py", "README.md", "LICENSE", "NOTICE", "heterofold_hub", "cli.py",
                "trainers", "registry.json", "cards"]
PREFIX = "heterofold-hub-adapters-"


def _ignore(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".pytest_cache") or n.endswith((".egg-info", ".pyc"))}


def pip_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of ``source`` into ``out`` (no build isolation, no index, no dependencies); the wheel's path."""
    before = set(out.glob("*.whl"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "-q", "-w", str(out), str(source)], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"pip wheel {source} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    [built] = set(out.glob("*.whl")) - before or {max(out.glob("*.whl"), key=lambda p: p.stat().st_mtime)}
    return built


def build_core(out: Path, stage: Path) -> Path:
    source = stage / "heterofold-hub"
    for name in CORE_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=_ignore)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    for repo_id in CORE_REPOS:
        shutil.copytree(ROOT / "hub" / "repos" / repo_id, source / "hub" / "repos" / repo_id)
    return pip_wheel(source, out)


def package_name(distribution: str) -> str:
    return distribution.replace("-", "_")


def _gemma_derived(entries) -> bool:
    return any("gemma" in f"{e.sender.id} {e.receiver.id}".lower() for e in entries)


def companion_readme(distribution: str, exported, entries) -> str:
    rows = "\n".join(f"| `{e.repo_id}` | {e.version} | {entry.sender.id} -> {entry.receiver.id} |"
                     for e, entry in zip(exported, entries))
    terms = ("\nThese adapters are derived from Gemma 3 270M: they are subject to the Gemma Terms of Use "
             "(https://ai.google.dev/gemma/terms); see NOTICE.\n" if _gemma_derived(entries) else "")
    return f"""# {distribution}

Pair adapters for [HeteroFold Hub]({REPOSITORY_URL}) ({CORE_DISTRIBUTION}), as data: the version of each repo that
`HeteroFoldModel.from_pretrained` resolves by default. Installed beside {CORE_DISTRIBUTION}, they are found through
the entry point group `{ADAPTERS_GROUP}`; nothing to import or configure.

| repo | version | pair |
| --- | --- | --- |
{rows}

Older versions stay in the embedded hub of the project's repository ({REPOSITORY_URL}).
{terms}"""


def build_companion(distribution: str, out: Path, stage: Path, registry: Registry) -> Path:
    name, version = package_name(distribution), heterofold_hub.__version__
    source = stage / distribution
    package = source / name
    package.mkdir(parents=True)
    hub = LocalHub(ROOT / "hub", snapshots=stage / "snapshots")
    by_id = {e.repo_id: e for e in registry.entries()}
    entries = [by_id[repo_id] for repo_id in COMPANIONS[distribution]]
    exported = [export_version(hub, entry, default_version(entry), package) for entry in entries]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    manifest = {"distribution": distribution, "version": version, "built_from": commit or None,
                "repos": {e.repo_id: {"version": e.version, "commit": e.commit,
                                      "files": dict(sorted(default_version(entry).files.items()))}
                          for e, entry in zip(exported, entries)}}
    (package / COMPANION_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (package / "__init__.py").write_text(f'"""Adapters for {CORE_DISTRIBUTION}, as data ({COMPANION_MANIFEST} lists '
                                         'them); found through an entry point, never imported."""\n')
    (source / "README.md").write_text(companion_readme(distribution, exported, entries))
    for legal in ("LICENSE", "NOTICE"):
        shutil.copy2(ROOT / legal, source / legal)
    license_expression = "LicenseRef-Gemma-Terms-of-Use" if _gemma_derived(entries) else "Apache-2.0"
    (source / "pyproject.toml").write_text(f"""[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "{distribution}"
version = "{version}"
description = "HeteroFold Hub pair adapters (data): {', '.join(COMPANIONS[distribution])}"
readme = "README.md"
requires-python = ">=3.10"
license = "{license_expression}"
license-files = ["LICENSE", "NOTICE"]
dependencies = ["{CORE_DISTRIBUTION}=={version}"]

[project.urls]
Repository = "{REPOSITORY_URL}"

[project.entry-points."{ADAPTERS_GROUP}"]
"{distribution.removeprefix(PREFIX)}" = "{name}"

[tool.setuptools]
packages = ["{name}"]
include-package-data = false

[tool.setuptools.package-data]
"{name}" = ["{COMPANION_MANIFEST}", "*/*/*/*"]
""")
    return pip_wheel(source, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheels go (default: dist/)")
    parser.add_argument("--only", action="append", choices=[CORE_DISTRIBUTION, *COMPANIONS],
                        help="build only this distribution (repeatable; default: all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    registry = Registry.load(ROOT / "registry.json")
    wanted = args.only or [CORE_DISTRIBUTION, *COMPANIONS]
    problems = []
    with tempfile.TemporaryDirectory(prefix="hf-fold-dists-") as stage:
        for distribution in wanted:
            if distribution == CORE_DISTRIBUTION:
                wheel, limit, kind = build_core(args.out, Path(stage)), LIMITS["core"], "core"
            else:
                wheel, limit, kind = build_companion(distribution, args.out, Path(stage), registry), LIMITS["companion"], "companion"
            size = wheel.stat().st_size
            ok = size <= limit if kind == "core" else size < limit
            print(f"{wheel.name}\t{size / MB:.1f} MB\t{'ok' if ok else 'OVER'} ({kind} limit {limit / MB:.0f} MB)")
            if not ok:
                problems.append(f"{wheel.name} is {size / MB:.1f} MB, over the {kind} limit of {limit / MB:.0f} MB")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
