"""What this install runs with (versions, devices, folders, the CPU kernel): ``hf-fold env``, for bug reports."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

import torch

from heterofold_hub import __version__
from heterofold_hub.transfer import kernels
from heterofold_hub.paths import default_root
from heterofold_hub.hub.registry import default_registry_path

PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "lightning", "peft")


def describe() -> dict[str, str]:
    """Name -> value, in the order a bug report reads best."""
    info = {"heterofold-hub": __version__, "python": sys.version.split()[0], "platform": platform.platform()}
    for package in PACKAGES:
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = "not installed"
    info["cpu threads"] = str(torch.get_num_threads())
    info["cuda"] = (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
                    if torch.cuda.is_available() else "not available")
    info["cpu kernel"] = kernels.status()
    info["adapter home"] = str(default_root()) + ("" if os.environ.get("HF_FOLD_HOME") else " (set HF_FOLD_HOME to move it)")
    info["registry"] = str(default_registry_path())
    info["hub endpoint"] = os.environ.get("HF_ENDPOINT") or "https://huggingface.co (HF_ENDPOINT unset)"
    return info
