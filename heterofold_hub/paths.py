"""Where HeteroFold Hub keeps files: the one module that reads ``$HF_FOLD_HOME`` and finds the shipped data.

``$HF_FOLD_HOME`` (default ``~/.cache/heterofold``) holds the local hub's repos and snapshots, GGUF models converted
for transformers (``models/``), the compiled transfer kernel (``kernels/``) and the snapshots exported from an
installed embedded hub (``embedded/``). It sits at the bottom of the package: anything may import it, and it
imports nothing of the project.

The shipped data (``registry.json``, the embedded hub ``hub/`` beside it, ``cards/adapter_card.md.j2``) lives at
the repository root. ``heterofold_hub/shipped/`` holds symlinks to those files, so a wheel (which copies what the
links point to) installs them there; :func:`shipped_file` resolves the links, so a checkout uses and writes the
root files themselves. See docs/packaging.md.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "HF_FOLD_HOME"


def default_root() -> Path:
    """``$HF_FOLD_HOME``, else ``~/.cache/heterofold``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "heterofold").expanduser()


def models_dir() -> Path:
    """GGUF models converted to safetensors + tokenizer.json, one folder per GGUF file's sha256."""
    return default_root() / "models"


def kernels_dir() -> Path:
    """Compiled transfer kernels, one shared library per source and compiler identity."""
    return default_root() / "kernels"


SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"


def shipped_file(name: str) -> Path:
    """The shipped ``name`` (``registry.json``, ``hub``, ``cards/adapter_card.md.j2``): the repository root's file
    in a checkout or an editable install (links resolved), the installed copy in a wheel install. It may not exist
    (a wheel built without it): callers say what is missing."""
    return (SHIPPED_DIR / name).resolve()


def shipped_is_installed() -> bool:
    """True when the shipped data is the wheel's copy in site-packages (read-only: a reinstall replaces it), False
    in a checkout or an editable install, where ``heterofold_hub/shipped/`` holds links to the project's files."""
    return not (SHIPPED_DIR / "registry.json").is_symlink()


def is_installed_copy(path: str | os.PathLike) -> bool:
    """Is ``path`` shipped data installed from a wheel (``registry.json``, the embedded hub): read, never written?"""
    return shipped_is_installed() and Path(path).resolve().is_relative_to(SHIPPED_DIR)


def embedded_snapshots_dir() -> Path:
    """Where versions of an installed embedded hub are exported: under ``$HF_FOLD_HOME``, never site-packages."""
    return default_root() / "embedded" / "snapshots"
