"""From a (sender, receiver) pair to a loaded, verified adapter: registry lookup, hub download, integrity
check of every file against the hashes the registry recorded, and the pair check against the loaded models."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import HeteroFoldError, IntegrityError
from .fingerprint import tokenizer_fingerprint
from .hub import AdapterHub, HubError, LocalHub, get_hub
from .methods.base import PairAdapter
from .models import Side
from .registry import AdapterEntry, PairEnd, Registry, VersionEntry, open_registry
from .saving import check_pair, load_adapter

EMBEDDED_HUB_DIR = "hub"  # the "embedded" hub: this folder beside registry.json


@dataclass
class ResolvedAdapter:
    """A loaded adapter and where it came from (``repo_id``/``version`` are None for a plain folder)."""

    adapter: PairAdapter
    folder: Path
    repo_id: str | None = None
    version: str | None = None
    metrics: dict | None = None


def pair_end(side: Side) -> PairEnd:
    """What the registry matches a side on: id, revision, tokenizer fingerprint and KV layout."""
    return PairEnd(side.name, side.revision, tokenizer_fingerprint(side.tokenizer), side.spec.to_dict())


def hub_for(entry_hub: str, registry: Registry, *, hub_dir=None, token: str | None = None) -> AdapterHub:
    """The hub a registry entry lives in: "embedded" is the ``hub/`` folder beside the registry file."""
    if entry_hub == "embedded":
        if registry.path is None:
            raise HeteroFoldError("This registry has no file path, so its embedded hub cannot be located.")
        return LocalHub(registry.path.parent / EMBEDDED_HUB_DIR)
    return get_hub(entry_hub, hub_dir=hub_dir, token=token)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def verify_files(folder: Path, version: VersionEntry, repo_id: str) -> None:
    """Every file the registry recorded is present with the recorded hash (no truncated or altered weights)."""
    for name, expected in sorted(version.files.items()):
        path = folder / name
        if not path.is_file():
            raise IntegrityError(
                f"{repo_id} {version.version}: {name} is missing from {folder}, but the registry lists it for this "
                f"version. Delete {folder} so it is downloaded again; if it is still missing, the hub's copy of "
                f"{version.version} lacks it and does not match the registry: pin another version "
                f"(`hf-fold pull {repo_id}@VERSION`) or ask the publisher to fix the registry entry.")
        actual = sha256_file(path)
        if actual != expected:
            raise IntegrityError(f"{repo_id} {version.version}: {path} has hash {actual[:19]}..., the registry "
                                 f"recorded {expected[:19]}...: the file is corrupt or was altered. Delete it to "
                                 "download it again; never load weights that fail this check.")


def fetch(registry: Registry, entry: AdapterEntry, version: VersionEntry, *, hub_dir=None, token: str | None = None,
          local_files_only: bool = False) -> Path:
    """A local folder with ``version``'s files from the entry's hub, each checked against its recorded hash."""
    hub = hub_for(entry.hub, registry, hub_dir=hub_dir, token=token)
    try:
        folder = Path(hub.download(entry.repo_id, version=version.version, local_files_only=local_files_only))
    except HubError as err:
        if err.retryable:  # a dropped connection, not a registry/hub disagreement
            raise
        raise HubError(f"The registry {registry.path} lists {entry.repo_id} {version.version} in hub {entry.hub!r}, "
                       f"but that hub cannot provide it: {err}") from err
    verify_files(folder, version, entry.repo_id)
    return folder


def resolve_adapter(
    sender: Side,
    receiver: Side,
    *,
    adapter: str | Path | None = None,
    version: str | None = None,
    registry: Registry | str | Path | None = None,
    min_recovered: float | None = None,
    local_files_only: bool = False,
    hub_dir=None,
    token: str | None = None,
) -> ResolvedAdapter:
    """The adapter for exactly this pair: ``adapter`` (a package folder) if given, else the registry's best fit.

    Raises ``NoAdapterError`` (what exists, how to train one) when nothing fits, ``PairMismatchError`` when a
    given package was fitted for other models, ``HeteroFoldError`` when a file fails its integrity check.
    """
    if adapter is not None and Path(adapter).is_dir():
        loaded = load_adapter(adapter)
        check_pair(loaded, sender, receiver, source=adapter)
        return ResolvedAdapter(loaded, Path(adapter))
    registry = open_registry(registry)
    if adapter is not None:  # a repo id: it must be registered and fit this pair like any other candidate
        entry, chosen = _pinned_repo(registry, str(adapter), version, sender, receiver, min_recovered)
    else:
        entry, chosen = registry.find(pair_end(sender), pair_end(receiver), version=version, min_recovered=min_recovered)
    folder = fetch(registry, entry, chosen, hub_dir=hub_dir, token=token, local_files_only=local_files_only)
    loaded = load_adapter(folder)
    check_pair(loaded, sender, receiver, source=f"{entry.repo_id} {chosen.version}")
    return ResolvedAdapter(loaded, folder, entry.repo_id, chosen.version, dict(chosen.metrics))


def _pinned_repo(registry: Registry, repo_id: str, version, sender: Side, receiver: Side,
                 min_recovered) -> tuple[AdapterEntry, VersionEntry]:
    entry = next((e for e in registry.entries() if e.repo_id == repo_id), None)
    if entry is None:
        raise HeteroFoldError(f"Adapter {repo_id!r} is neither a package folder nor in the registry "
                              f"{registry.path}; registered repos: {', '.join(e.repo_id for e in registry.entries()) or 'none'}.")
    solo = Registry([entry], registry.path)
    return solo.find(pair_end(sender), pair_end(receiver), version=version, min_recovered=min_recovered)
