"""One provenance block for every results file: what produced its numbers, so they can be reproduced and compared.

::

    result["provenance"] = provenance({"heterofold": adapter_record(adapter, resolved)})

gives the date, the exact command line, the git commit of the code that ran (and whether it had local changes),
library versions, torch's thread count, the CPU (whether it multiplies bf16 natively decides what bf16 maps gain) and, per adapter, where it came from (``repo@version``, a folder, a
composition, or fitted in this run) with the sha256 of its weights; a folder whose weights are those of a
registered version (a package ``hf-fold pull`` wrote, say) also names that version.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch

import heterofold_hub

CHECKOUT = Path(heterofold_hub.__file__).resolve().parents[1]  # the folder holding heterofold_hub/
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")
NOT_SOURCE = (":(exclude)benchmarks/results", ":(exclude)runs")  # results written here do not make the code dirty


def provenance(adapters: dict[str, dict] | None = None, *, argv: list[str] | None = None) -> dict:
    """The block: ``date`` (UTC), ``command`` (``argv``, default this process's), ``git``, ``versions``,
    ``threads``, ``cpu`` (:func:`cpu_record`) and ``adapters`` (name -> :func:`adapter_record`)."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(sys.argv if argv is None else argv),
        "git": git_state(),
        "versions": library_versions(),
        "threads": torch.get_num_threads(),
        "cpu": cpu_record(),
        "adapters": adapters or {},
    }


def git_state(root: Path = CHECKOUT) -> dict:
    """``{"commit", "dirty"}`` of the checkout the library runs from: ``dirty`` when source files differ from the
    commit (results folders aside). Both None when the library is not run from a git checkout (an installed
    wheel), rather than reporting whatever repository happens to enclose it."""
    def git(*args: str) -> str | None:
        try:
            run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return run.stdout.strip() if run.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--", ".", *NOT_SOURCE)
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of x86 CPUs that multiply bf16 in hardware


def cpu_record(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """``{"model", "bf16_flags"}``: the CPU's model name and which of :data:`BF16_FLAGS` it has (None where
    ``/proc/cpuinfo`` is not there to say): the same bf16 maps gain much more on a CPU with them."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return {"model": platform.processor() or None, "bf16_flags": None}
    first = text.split("\n\n", 1)[0]  # the first processor's block; the others repeat it
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name"), "bf16_flags": [f for f in BF16_FLAGS if f in flags]}


def library_versions() -> dict[str, str | None]:
    """Versions of Python, heterofold_hub and the libraries its numbers depend on (None: not installed)."""
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "heterofold_hub": heterofold_hub.__version__,
            **{name: version(name) for name in LIBRARIES}, "torch": torch.__version__}


def adapter_record(adapter, resolved=None, *, registry=None) -> dict:
    """Where ``adapter`` came from and the sha256 of its weights.

    ``resolved``: the :class:`~heterofold_hub.hub.resolve.ResolvedAdapter` it was loaded through, if any (gives
    ``repo@version``, the folder, or the composed path); without it the adapter was fitted in this run. The hash is
    the one its config records for the published ``adapter.safetensors``, else that of its weights as they are in
    memory (``hashed`` says which). A folder's record adds ``registered_as`` (``repo@version``) when ``registry``
    (default: the one the loader reads) lists a version with exactly these weights."""
    from heterofold_hub.adapter.save_and_load import adapter_bytes, sha256_bytes

    config = adapter.config
    record = {"method": config.method, "sender": config.sender, "receiver": config.receiver}
    if resolved is None:
        record["source"] = "fitted in this run"
    elif resolved.path is not None:
        record["source"] = f"composed {resolved.path.describe()}"
    elif resolved.repo_id is not None:
        record["source"] = f"{resolved.repo_id}@{resolved.version}"
    else:
        record["source"] = str(resolved.folder)
    if config.weights_sha256 is not None:
        record.update(weights_sha256=config.weights_sha256, hashed="adapter.safetensors as saved")
    else:
        record.update(weights_sha256=sha256_bytes(adapter_bytes(adapter)), hashed="weights in memory (never saved)")
    if resolved is not None and resolved.folder is not None and resolved.repo_id is None:
        record["registered_as"] = registered_version(record["weights_sha256"], registry)
    return record


def registered_version(weights_sha256: str, registry=None) -> str | None:
    """``repo@version`` of the registered version whose ``adapter.safetensors`` has this hash, or None. Where a
    candidate was promoted (``v1.4.0-rc.2`` then ``v1.4.0``, the same weights), the release."""
    from heterofold_hub.adapter.config import WEIGHTS_NAME
    from heterofold_hub.hub.base import is_prerelease, version_key
    from heterofold_hub.hub.registry import open_registry

    found = [(entry.repo_id, version.version) for entry in open_registry(registry).entries()
             for version in entry.versions if version.files.get(WEIGHTS_NAME) == weights_sha256]
    if not found:
        return None
    repo_id, version = max(found, key=lambda rv: (not is_prerelease(rv[1]), version_key(rv[1])))
    return f"{repo_id}@{version}"
