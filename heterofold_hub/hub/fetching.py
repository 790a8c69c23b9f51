"""A registered version's files on local disk, each checked against the hash the registry recorded.

Torch-free on purpose: ``hf-fold show --card`` reads a card through here, and commands that only read the registry
must start without importing the model stack. Loading the files into an adapter is :mod:`heterofold_hub.hub.resolve`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError, IntegrityError
from heterofold_hub.hub import AdapterHub, HubError, LocalHub, get_hub
from heterofold_hub.hub.installed import InstalledHub
from heterofold_hub.hub.registry import AdapterEntry, Registry, VersionEntry
from heterofold_hub.paths import embedded_snapshots_dir, is_installed_copy

EMBEDDED_HUB_DIR = "hub"  # the "embedded" hub: this folder beside registry.json


def hub_for(entry_hub: str, registry: Registry, *, hub_dir=None, token: str | None = None) -> AdapterHub:
    """The hub a registry entry lives in: "embedded" is the ``hub/`` folder beside the registry file. The one
    installed with the wheel is only read, together with the companion distributions' adapters (InstalledHub)."""
    if entry_hub == "embedded":
        if registry.path is None:
            raise HeteroFoldError("This registry has no file path, so its embedded hub cannot be located.")
        if is_installed_copy(registry.path):
            return InstalledHub(registry.path.parent / EMBEDDED_HUB_DIR, snapshots=embedded_snapshots_dir())
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
            # The fix must be one a download then repairs: a local hub reuses a snapshot folder that exists (a file
            # deleted from it is then "missing"), and a Hugging Face cache links each file to a blob it reuses.
            fix = (f"Delete {path.resolve()} (the cached file it links to) so it is downloaded again"
                   if path.is_symlink() else f"Delete {folder} (the whole folder) so this version is downloaded again")
            raise IntegrityError(f"{repo_id} {version.version}: {path} has hash {actual[:19]}..., the registry "
                                 f"recorded {expected[:19]}...: the file is corrupt or was altered. {fix}; never "
                                 "load weights that fail this check.")


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
