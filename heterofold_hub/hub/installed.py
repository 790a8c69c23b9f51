"""InstalledHub: the embedded hub of a wheel install, read-only, assembled from the distributions that carry it.

The core wheel holds the embedded hub's core repos (``paths.CORE_REPOS``: the tiny test pair, every version) as
git repos beside the installed ``registry.json``; reading a version exports it under ``$HF_FOLD_HOME`` as a
:class:`LocalHub` does. Each installed companion distribution (``paths.installed_companions``) holds the
registry-default version of its repos as plain adapter folders, read in place. Every other version the registry
lists stays in the project's repository: asking for one raises a :class:`HubError` that names how to get it.
"""

from __future__ import annotations

import os
from pathlib import Path

from heterofold_hub.hub.base import AdapterHub, HubError, PublishedVersion, sort_versions, validate_repo_id, validate_version
from heterofold_hub.hub.local import LocalHub
from heterofold_hub.paths import (
    COMPANIONS,
    CORE_DISTRIBUTION,
    FILES_URL,
    REPOSITORY_URL,
    Companion,
    distribution_of,
    installed_companions,
)


class InstalledHub(AdapterHub):
    """The core wheel's git repos under ``root`` (snapshots exported to ``snapshots``) plus ``companions`` (the
    installed companion distributions when None)."""

    def __init__(self, root: str | os.PathLike, *, snapshots: str | os.PathLike,
                 companions: list[Companion] | None = None):
        self.git = LocalHub(root, snapshots=snapshots)
        self.companions = installed_companions() if companions is None else companions

    def __repr__(self) -> str:
        return f"InstalledHub({str(self.git.root)!r}, companions={[c.distribution for c in self.companions]})"

    def _carried(self, repo_id: str) -> list[tuple[Companion, str]]:
        return [(c, carried["version"]) for c in self.companions if (carried := c.carries().get(repo_id))]

    # -- queries ------------------------------------------------------------------------------------------
    def repos(self) -> list[str]:
        return sorted({*self.git.repos(), *(repo for c in self.companions for repo in c.carries())})

    def exists(self, repo_id: str) -> bool:
        return self.git.exists(repo_id) or bool(self._carried(repo_id))

    def versions(self, repo_id: str) -> list[str]:
        """The versions installed here (a companion carries one per repo), oldest first."""
        validate_repo_id(repo_id)
        found = [version for _, version in self._carried(repo_id)]
        if self.git.exists(repo_id):
            found += self.git.versions(repo_id)
        elif not found:
            raise self.not_installed(repo_id, None)
        return sort_versions(set(found))

    def version_info(self, repo_id: str, version: str) -> PublishedVersion:
        validate_version(version)
        for companion, carried in self._carried(repo_id):
            if carried == version:
                commit = companion.carries()[repo_id]["commit"]
                return PublishedVersion(repo_id, version, commit, str(companion.folder(repo_id, version)))
        if self.git.exists(repo_id) and version in self.git.versions(repo_id):
            return self.git.version_info(repo_id, version)
        raise self.not_installed(repo_id, version)

    # -- download -----------------------------------------------------------------------------------------
    def download(self, repo_id: str, *, version: str | None = None, local_files_only: bool = False) -> Path:
        """The installed folder of ``version`` (the newest installed when None): a companion's folder as it is, or
        a core repo's version exported under ``$HF_FOLD_HOME``."""
        validate_repo_id(repo_id)
        if version is None:
            version = self.latest(repo_id)
        validate_version(version)
        for companion, carried in self._carried(repo_id):
            if carried == version:
                return companion.folder(repo_id, version)
        if self.git.exists(repo_id) and version in self.git.versions(repo_id):
            return self.git.download(repo_id, version=version)
        raise self.not_installed(repo_id, version)

    def _publish(self, repo_id: str, folder: Path, files: list[Path], version: str, message: str) -> PublishedVersion:
        raise HubError(f"The embedded hub installed with {CORE_DISTRIBUTION} is read-only: publish {repo_id} into your "
                       "own hub (hf-fold push --hub-dir DIR, or a Hub with --hub hf) and registry (--registry PATH).")

    # -- what to say when a version is not installed ---------------------------------------------------------
    def not_installed(self, repo_id: str, version: str | None) -> HubError:
        """Which distribution carries ``repo_id`` and how to install it; for a version no distribution carries
        (an older one), where every version is kept."""
        what = f"{repo_id} {version}" if version else repo_id
        carried = self._carried(repo_id)
        distribution = distribution_of(repo_id)
        if carried:
            have = ", ".join(f"{v} (in {c.distribution} {c.version})" for c, v in carried)
            return HubError(
                f"{what} is not installed: the installed distributions carry only {have}, the version the registry "
                f"resolves by default. Every older version stays in the embedded hub of the project's repository "
                f"({FILES_URL}hub/repos/{repo_id}): clone it (git clone {REPOSITORY_URL}) and read the clone's "
                f"registry, which finds its hub/ beside it (HF_FOLD_REGISTRY=heterofold-hub/registry.json, or "
                f"registry= in Python, --registry on the command line); or ask for {carried[-1][1]}.")
        if distribution in COMPANIONS:
            return HubError(
                f"{what} is not installed: its files ship in the companion distribution {distribution}, which is not "
                f"installed here. Install it (pip install {distribution}; from local wheels: pip install --no-index "
                f"--find-links DIST {distribution}), or clone the project's repository ({REPOSITORY_URL}), whose "
                "registry.json has every version in its hub/.")
        return HubError(f"{what} is not in the embedded hub installed with {CORE_DISTRIBUTION} (installed repos: "
                        f"{', '.join(self.repos()) or 'none'}); the registry lists it, so this install is incomplete: "
                        f"reinstall {CORE_DISTRIBUTION}, or read a checkout's registry ({REPOSITORY_URL}).")
