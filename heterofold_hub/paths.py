"""Where HeteroFold Hub keeps files on this machine: the one module that reads ``$HF_FOLD_HOME``.

``$HF_FOLD_HOME`` (default ``~/.cache/heterofold``) holds the local hub's repos and snapshots, GGUF models converted
for transformers (``models/``) and the compiled transfer kernel (``kernels/``). It sits at the bottom of the package:
anything may import it, and it imports nothing of the project.
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
