"""Export the embedded hub's versions as Hugging Face Hub repo folders.

One flat folder per repo@version, ``<out>/<namespace>/<name>/<vX.Y.Z>/``, holding exactly the files that version
published (``adapter_config.json``, ``adapter.safetensors``, the ``README.md`` model card, ``metrics.json``), each
checked against the sha256 ``registry.json`` records. Such a folder is what ``huggingface_hub``'s
``upload_folder`` takes; :func:`upload` publishes each one to a Hub-compatible endpoint as a commit tagged with its
version (``RemoteHub.publish``), so the versions resolve there as they do in the embedded hub. The companion
distributions (``scripts/build_dists.py``) ship the same folders.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from heterofold_hub.hub.base import HubError, PublishedVersion, version_key
from heterofold_hub.hub.local import LocalHub
from heterofold_hub.hub.registry import AdapterEntry, Registry, VersionEntry, newest_release_of, open_registry
from heterofold_hub.hub.resolve import EMBEDDED_HUB_DIR, verify_files


@dataclass(frozen=True)
class ExportedVersion:
    repo_id: str
    version: str
    commit: str  # the embedded hub's commit of the version's tag
    folder: Path


def default_version(entry: AdapterEntry) -> VersionEntry:
    """The version a user resolves from this repo by default: its highest release (``Registry.find``'s rule per
    repo; a pre-release resolves only when pinned)."""
    chosen = newest_release_of(entry)
    if chosen is None:
        pre = f" (only pre-releases: {', '.join(v.version for v in entry.versions)})" if entry.versions else ""
        raise HubError(f"{entry.repo_id} has no released version to export{pre}.")
    return chosen


def export_version(hub: LocalHub, entry: AdapterEntry, version: VersionEntry, out: str | os.PathLike) -> ExportedVersion:
    """``entry``'s ``version`` from ``hub`` into ``out/<repo_id>/<version>/``, its files checked against the registry.
    The folder is written under a temp name and renamed into place: complete or absent. An existing folder is
    checked and kept (versions are immutable)."""
    target = Path(out) / entry.repo_id / version.version
    commit = hub.version_info(entry.repo_id, version.version).commit
    if target.is_dir():
        verify_files(target, version, entry.repo_id)
        return ExportedVersion(entry.repo_id, version.version, commit, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".tmp-{version.version}-") as tmp:
        snapshot = LocalHub(hub.root, snapshots=Path(tmp) / "snapshots").download(entry.repo_id, version=version.version)
        verify_files(snapshot, version, entry.repo_id)
        extra = sorted({p.name for p in snapshot.iterdir()} - set(version.files))
        if extra:
            raise HubError(f"{entry.repo_id} {version.version} holds {extra}, which registry.json does not list: the "
                           "export would publish files no hash vouches for. Fix the registry entry first.")
        os.rename(shutil.copytree(snapshot, Path(tmp) / "folder"), target)
    return ExportedVersion(entry.repo_id, version.version, commit, target)


def export_hub(out: str | os.PathLike, *, registry: Registry | str | os.PathLike | None = None,
               repos: list[str] | None = None, all_versions: bool = False) -> list[ExportedVersion]:
    """Every embedded repo of ``registry`` (the project's by default), or ``repos``, into ``out``: each repo's
    default version, or with ``all_versions`` every registered version (oldest first)."""
    registry = open_registry(registry)
    hub = LocalHub(registry.path.parent / EMBEDDED_HUB_DIR)
    entries = [e for e in registry.entries() if e.hub == "embedded"]
    unknown = sorted(set(repos or []) - {e.repo_id for e in entries})
    if unknown:
        raise HubError(f"Not embedded repos of {registry.path}: {unknown}; embedded: "
                       f"{', '.join(e.repo_id for e in entries)}.")
    exported = []
    for entry in entries:
        if repos is not None and entry.repo_id not in repos:
            continue
        chosen = sorted(entry.versions, key=lambda v: version_key(v.version)) if all_versions else [default_version(entry)]
        exported += [export_version(hub, entry, version, out) for version in chosen]
    return exported


def upload(exported: list[ExportedVersion], *, endpoint: str | None = None, token: str | None = None) -> list[PublishedVersion]:
    """Publish each exported folder to the Hub at ``endpoint`` (default ``$HF_ENDPOINT``, else huggingface.co), oldest
    version first per repo: one ``upload_folder`` commit each, tagged with its version. A version already there
    raises HubError (published versions are immutable)."""
    from heterofold_hub.hub.remote import RemoteHub

    hub = RemoteHub(endpoint, token=token)
    ordered = sorted(exported, key=lambda e: (e.repo_id, version_key(e.version)))
    return [hub.publish(e.repo_id, e.folder, version=e.version, message=f"Publish {e.repo_id} {e.version} "
                        f"(embedded hub commit {e.commit})") for e in ordered]
