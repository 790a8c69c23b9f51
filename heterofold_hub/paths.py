"""Where HeteroFold Hub keeps files: the one module that reads ``$HF_FOLD_HOME``, finds the shipped data and serves
the package's two modules that live at the repository root.

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
  ``heterofold_hub/trainers/`` and ``heterofold_hub/shipped/``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

HOME_ENV = "HF_FOLD_HOME"

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent  # the repository root, in a checkout
SHIPPED_DIR = PACKAGE_DIR / "shipped"  # in a wheel only: the root's registry.json, cards/ and hub/ (core repos)
ROOT_MODULES = {"heterofold_hub.cli": "cli.py", "heterofold_hub.trainers": "trainers"}  # module -> root path


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
