"""Where HeteroFold Hub keeps files: the one module that reads ``$HF_FOLD_HOME``, finds the shipped data and the
installed adapter distributions, and serves the package's two modules that live at the repository root.

``$HF_FOLD_HOME`` (default ``~/.cache/heterofold``) holds the local hub's repos and snapshots, GGUF models converted
for transformers (``models/``), the compiled transfer kernel (``kernels/``) and the snapshots exported from an
installed embedded hub (``embedded/``). This module sits at the bottom of the package: anything may import it, and it
imports nothing of the project (``setup.py`` loads it on its own, by path).

One source tree, no links (docs/packaging.md):

- **A checkout** (a plain ``PYTHONPATH`` run or an editable install) keeps the project's layout: ``cli.py``,
  ``trainers/``, ``registry.json``, ``cards/`` and the embedded hub ``hub/`` at the repository root, beside this
  package. :func:`shipped_file` finds the data there, and :func:`serve_root_modules` (run by ``heterofold_hub``'s
  ``__init__``) imports ``heterofold_hub.cli`` and ``heterofold_hub.trainers`` from the root's files.
- **A wheel**: the build (``setup.py``) copies the same files into the package, ``heterofold_hub/cli.py``,
  ``heterofold_hub/trainers/`` and ``heterofold_hub/shipped/``, with the embedded hub's :data:`CORE_REPOS` only.
  The other shipped repos' registry-default versions come in the companion distributions of :data:`COMPANIONS`,
  found through the entry point group :data:`ADAPTERS_GROUP` (:func:`installed_companions`).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "HF_FOLD_HOME"

# The project's future public home (it has no public address yet): the README's links and the messages that send a
# user to the repository (older adapter versions) use it. pyproject.toml's [project.urls] holds the same address.
REPOSITORY_URL = "https://github.com/heterofold/heterofold-hub"
FILES_URL = f"{REPOSITORY_URL}/blob/main/"  # + a path in the repository: the README's links

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent  # the repository root, in a checkout
SHIPPED_DIR = PACKAGE_DIR / "shipped"  # in a wheel only: the root's registry.json, cards/ and hub/ (core repos)
ROOT_MODULES = {"heterofold_hub.cli": "cli.py", "heterofold_hub.trainers": "trainers"}  # module -> root path

# Which distribution carries which embedded repo. The core wheel holds the tiny test pair's repos (every version, as
# git repos); each companion holds the registry-default version of its repos, as plain folders
# (scripts/build_dists.py). Every embedded repo of registry.json is in exactly one of them (tests/test_packaging.py).
CORE_DISTRIBUTION = "heterofold-hub"
CORE_REPOS = ("heterofold/tiny-llama-code-to-tiny-qwen-code", "heterofold/tiny-qwen-code-to-tiny-llama-code")
COMPANIONS = {
    "heterofold-hub-adapters-smollm2-to-gemma3": ("heterofold/smollm2-135m-to-gemma3-270m",),
    "heterofold-hub-adapters-gemma3-to-smollm2": ("heterofold/gemma3-270m-to-smollm2-135m",
                                                  "heterofold/gemma3-270m-to-smollm2-135m-kv-ridge",
                                                  "heterofold/gemma3-270m-to-smollm2-135m-rank64"),
    "heterofold-hub-adapters-smollm2-tiny": ("heterofold/smollm2-135m-to-tiny-llama-code",
                                             "heterofold/tiny-llama-code-to-smollm2-135m"),
}
ADAPTERS_GROUP = "heterofold_hub.adapters"  # a companion's entry point: NAME = its data package
COMPANION_MANIFEST = "adapters.json"  # in a companion's data package: what it carries (written by the build)


def default_root() -> Path:
    """``$HF_FOLD_HOME``, else ``~/.cache/heterofold``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "heterofold").expanduser()


def models_dir() -> Path:
    """GGUF models converted to safetensors + tokenizer.json, one folder per GGUF file's sha256."""
    return default_root() / "models"


def kernels_dir() -> Path:
    """Compiled transfer kernels, one shared library per source and compiler identity."""
    return default_root() / "kernels"


def shipped_is_installed() -> bool:
    """True in a wheel install (the build put the shipped data in ``heterofold_hub/shipped/``: read-only, a
    reinstall replaces it), False in a checkout or an editable install, which use the repository root's files."""
    return SHIPPED_DIR.is_dir()


def shipped_file(name: str) -> Path:
    """The shipped ``name`` (``registry.json``, ``hub``, ``cards/adapter_card.md.j2``): the repository root's file in
    a checkout or an editable install, the installed copy in a wheel install. It may not exist (a wheel built
    without it): callers say what is missing."""
    return (SHIPPED_DIR if shipped_is_installed() else CHECKOUT_ROOT) / name


def is_installed_copy(path: str | os.PathLike) -> bool:
    """Is ``path`` shipped data installed from a wheel (``registry.json``, the embedded hub): read, never written?"""
    return shipped_is_installed() and Path(path).resolve().is_relative_to(SHIPPED_DIR)


def embedded_snapshots_dir() -> Path:
    """Where versions of an installed embedded hub are exported: under ``$HF_FOLD_HOME``, never site-packages."""
    return default_root() / "embedded" / "snapshots"


def distribution_of(repo_id: str) -> str | None:
    """The distribution that installs ``repo_id``'s files (:data:`CORE_DISTRIBUTION` or a companion), or None."""
    if repo_id in CORE_REPOS:
        return CORE_DISTRIBUTION
    return next((name for name, repos in COMPANIONS.items() if repo_id in repos), None)


# -- companion distributions ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Companion:
    """An installed companion distribution: ``root`` is its data package, holding ``<namespace>/<name>/<version>/``
    (one flat adapter folder per version it carries) and :data:`COMPANION_MANIFEST`."""

    distribution: str
    version: str
    root: Path

    def manifest(self) -> dict:
        """``{"repos": {repo_id: {"version", "commit", "files"}}, ...}``, as the build wrote it."""
        return json.loads((self.root / COMPANION_MANIFEST).read_text())

    def carries(self) -> dict[str, dict]:
        return self.manifest()["repos"]

    def folder(self, repo_id: str, version: str) -> Path | None:
        """The installed folder of ``repo_id`` ``version``, or None when this distribution does not carry it."""
        carried = self.carries().get(repo_id)
        return self.root / repo_id / version if carried and carried["version"] == version else None


def installed_companions() -> list[Companion]:
    """Every installed companion distribution, by its entry point in :data:`ADAPTERS_GROUP` (``NAME = package``);
    the package is located, not imported. Wherever pip put it (a venv, ``--user``, ``--target``), it is found."""
    from importlib.metadata import entry_points

    found = []
    for point in entry_points(group=ADAPTERS_GROUP):
        spec = importlib.util.find_spec(point.value)
        if spec is None or not spec.submodule_search_locations:
            continue  # a stale entry point whose package was removed: nothing to read
        root = Path(next(iter(spec.submodule_search_locations)))
        if (root / COMPANION_MANIFEST).is_file():
            found.append(Companion(point.dist.name if point.dist else point.name,
                                   point.dist.version if point.dist else "?", root))
    return sorted(found, key=lambda c: c.distribution)


# -- the root's modules, in a checkout -----------------------------------------------------------------------------
class _RootModules(importlib.abc.MetaPathFinder):
    """Finds exactly the names of :data:`ROOT_MODULES` at the repository root (their submodules then come from the
    package's own ``__path__``); every other name is left to the other finders."""

    def find_spec(self, fullname, path=None, target=None):
        name = ROOT_MODULES.get(fullname)
        if name is None:
            return None
        location = CHECKOUT_ROOT / name
        if location.is_dir():
            return importlib.util.spec_from_file_location(fullname, location / "__init__.py",
                                                          submodule_search_locations=[str(location)])
        return importlib.util.spec_from_file_location(fullname, location)


def serve_root_modules() -> None:
    """In a checkout, make ``heterofold_hub.cli`` and ``heterofold_hub.trainers`` importable from the root's
    ``cli.py`` and ``trainers/`` (a wheel holds them inside the package, where the usual import finds them)."""
    if shipped_is_installed() or (PACKAGE_DIR / "cli.py").exists():
        return
    if not any(isinstance(finder, _RootModules) for finder in sys.meta_path):
        # first: it answers for two names only, and must win over an editable install's finder of another checkout
        sys.meta_path.insert(0, _RootModules())
