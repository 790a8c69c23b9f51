"""What every adapter hub shares: ``HubError``, repo-id and version rules, and the ``AdapterHub`` API.

A hub stores *repos* (``namespace/name``); each publish uploads a flat folder of adapter files (JSON config,
safetensors weights, README.md, plots) as one commit and tags it with an immutable semver version ``vX.Y.Z``, or
a pre-release ``vX.Y.Z-rc.N``: published and immutable like any version, but resolved only when pinned, so a candidate
can be kept and evaluated before users get it by default. ``download`` returns a local folder holding exactly one
version's files.
"""

from __future__ import annotations

import abc
import os
import re
from dataclasses import dataclass
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError

_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_PART = 96
_VERSION_RE = re.compile(r"v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-rc\.([1-9][0-9]*))?")
_REPO_RULE = (
    "expected 'namespace/name' (e.g. 'tester/pair-adapter'): exactly one '/', each part starting with a letter "
    f"or digit and made of letters, digits, '.', '_' or '-', at most {_MAX_PART} characters, no '..' or '--'"
)


class HubError(HeteroFoldError):
    """A publish or download that cannot go ahead; ``retryable`` is True when trying again later may work."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class PublishedVersion:
    repo_id: str
    version: str
    commit: str  # the git commit the version tag points at
    url_or_path: str  # where the version lives: the local git repo, or the version's page on the remote hub
    reused: bool = False  # True when the version was already in the hub with these exact files (nothing uploaded)
    evaluations_from: str | None = None  # a push: the pre-release whose evaluations this release took (same files)


def _repo_id_problem(repo_id) -> str | None:
    if not isinstance(repo_id, str) or not repo_id:
        return "it is empty or not a string"
    if "\\" in repo_id:
        return "it contains a backslash"
    if repo_id.startswith("/") or os.path.isabs(repo_id):
        return "it is an absolute path"
    parts = repo_id.split("/")
    if len(parts) != 2:
        return f"it has {len(parts)} part(s) separated by '/', not 2"
    for part in parts:
        if ".." in part:
            return f"part {part!r} contains '..'"
        if "--" in part:  # the Hub and its cache (models--namespace--name) reserve '--'
            return f"part {part!r} contains '--'"
        if len(part) > _MAX_PART:
            return f"part {part[:20]!r}... is {len(part)} characters long"
        if not _PART_RE.fullmatch(part):
            return f"part {part!r} has a character outside [A-Za-z0-9._-] or does not start with a letter or digit"
    return None


def validate_repo_id(repo_id: str) -> str:
    """Return ``repo_id`` if it is a safe ``namespace/name``; raise HubError naming the value and the rule."""
    problem = _repo_id_problem(repo_id)
    if problem is not None:
        raise HubError(f"Invalid repo id {repo_id!r}: {problem}; {_REPO_RULE}.")
    return repo_id


def validate_version(version: str) -> str:
    """Return ``version`` if it is ``vMAJOR.MINOR.PATCH`` (e.g. ``v1.0.0``) or a pre-release ``vMAJOR.MINOR.PATCH-rc.N``
    (e.g. ``v1.4.0-rc.1``); raise HubError otherwise."""
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise HubError(
            f"Invalid version {version!r}: versions must look like vMAJOR.MINOR.PATCH, e.g. 'v1.0.0' or 'v2.3.10' "
            "(a lowercase 'v' and three numbers without leading zeros), or a pre-release vMAJOR.MINOR.PATCH-rc.N, "
            "e.g. 'v1.4.0-rc.1'."
        )
    return version


def normalize_version(version: str) -> str:
    """``1.0.0`` and ``v1.0.0`` both mean ``v1.0.0`` (the tag name)."""
    return validate_version(version if str(version).startswith("v") else f"v{version}")


def split_ref(ref: str) -> tuple[str, str | None]:
    """``org/name@v1.0.0`` -> (``org/name``, ``v1.0.0``); no ``@`` -> latest."""
    repo_id, _, version = ref.partition("@")
    return repo_id, normalize_version(version) if version else None


def is_version(name: str) -> bool:
    return bool(_VERSION_RE.fullmatch(name))


def is_prerelease(version: str) -> bool:
    """Whether ``version`` is a pre-release (``v1.4.0-rc.1``): resolved only when pinned."""
    return _VERSION_RE.fullmatch(validate_version(version)).group(4) is not None


def version_key(version: str) -> tuple[int, int, int, int, int]:
    """Sort key: numeric, so v1.10.0 comes after v1.9.0, and semver's order for pre-releases: v1.4.0-rc.1 before
    v1.4.0-rc.2 before v1.4.0."""
    major, minor, patch, rc = _VERSION_RE.fullmatch(validate_version(version)).groups()
    return int(major), int(minor), int(patch), 0 if rc else 1, int(rc or 0)


def sort_versions(names) -> list[str]:
    """The names that are versions, oldest first (other tags are ignored)."""
    return sorted((n for n in names if is_version(n)), key=version_key)


def newest_release(versions) -> str | None:
    """The highest of ``versions`` that is not a pre-release: what resolves when no version is pinned (None if none)."""
    releases = [v for v in versions if not is_prerelease(v)]
    return max(releases, key=version_key) if releases else None


def default_release(repo_id: str, versions: list[str]) -> str:
    """``newest_release(versions)``, or the error that says why ``repo_id`` has none (nothing yet, or only
    pre-releases)."""
    latest = newest_release(versions)
    if latest is None:
        raise no_release(repo_id, versions)
    return latest


def next_patch(version: str) -> str:
    """The version to suggest after ``version``: the next patch (v1.0.1 after v1.0.0), or the next release candidate of
    the same version (v1.4.0-rc.2 after v1.4.0-rc.1)."""
    major, minor, patch, released, rc = version_key(version)
    return f"v{major}.{minor}.{patch + 1}" if released else f"v{major}.{minor}.{patch}-rc.{rc + 1}"


def no_release(repo_id: str, versions: list[str]) -> HubError:
    """Why ``repo_id`` has nothing to resolve by default: no version at all, or only pre-releases (pin one)."""
    if not versions:
        return HubError(f"{repo_id} has no published version yet: publish one (e.g. v1.0.0) first.")
    return HubError(f"{repo_id} has only pre-release versions ({', '.join(versions)}), and a pre-release is used only "
                    f"when pinned: ask for it by name (e.g. {repo_id}@{versions[-1]}), or publish a release.")


def already_published(repo_id: str, version: str, versions: list[str]) -> HubError:
    latest = versions[-1] if versions else version
    return HubError(
        f"Version {version} of {repo_id} is already published, and published versions are immutable: "
        f"bump the version (e.g. {next_patch(max(latest, version, key=version_key))}) and publish again."
    )


def version_not_found(repo_id: str, version: str, versions: list[str], where: str) -> HubError:
    known = ", ".join(versions) if versions else "none"
    return HubError(f"Version {version} of {repo_id} not found in {where}; published versions: {known}.")


def unknown_repo_hint(repo_id: str, known: list[str]) -> str:
    """What to say about ``repo_id`` missing from ``known`` repo ids: the closest few (difflib, ignoring case), not
    the whole list, which grows with the registry."""
    import difflib

    lowered = {k.lower(): k for k in known}
    close = [lowered[m] for m in difflib.get_close_matches(repo_id.lower(), list(lowered), n=3, cutoff=0.6)]
    if close:
        return f"the closest registered: {', '.join(close)} (`hf-fold list` shows all {len(known)})"
    return (f"no registered repo is close to it (`hf-fold list` shows all {len(known)}, `hf-fold search TEXT` "
            "finds them by text)")


def adapter_files(folder: str | os.PathLike) -> list[Path]:
    """The files to publish: every regular file of a flat folder (dotfiles such as .gitattributes are skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise HubError(f"Cannot publish {str(folder)!r}: it is not a folder.")
    entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    nested = [p.name for p in entries if p.is_dir()]
    if nested:
        raise HubError(f"Cannot publish {str(folder)!r}: adapter folders are flat, but it holds folder(s) {nested}.")
    files = [p for p in entries if p.is_file()]
    if not files:
        raise HubError(f"Cannot publish {str(folder)!r}: it holds no files.")
    return files


class AdapterHub(abc.ABC):
    """A store of versioned adapter repos (huggingface_hub style: ``repo_id`` first, keyword-only options)."""

    def publish(self, repo_id: str, folder: str | os.PathLike, *, version: str,
                message: str | None = None) -> PublishedVersion:
        """Upload every file of ``folder`` as one commit tagged ``version``; an existing version raises HubError."""
        validate_repo_id(repo_id)
        validate_version(version)
        files = adapter_files(folder)
        return self._publish(repo_id, Path(folder), files, version, message or f"Publish {repo_id} {version}")

    @abc.abstractmethod
    def _publish(self, repo_id: str, folder: Path, files: list[Path], version: str, message: str) -> PublishedVersion:
        """``publish`` after its arguments were checked: commit ``files`` and tag the commit ``version``."""

    @abc.abstractmethod
    def version_info(self, repo_id: str, version: str) -> PublishedVersion:
        """The published ``version`` of ``repo_id`` (the commit its tag points at); HubError if it does not exist."""

    @abc.abstractmethod
    def download(self, repo_id: str, *, version: str | None = None, local_files_only: bool = False) -> Path:
        """A local folder with exactly ``version``'s files (the latest version when None)."""

    @abc.abstractmethod
    def versions(self, repo_id: str) -> list[str]:
        """Published versions of ``repo_id``, oldest first; HubError if the repo does not exist."""

    @abc.abstractmethod
    def repos(self) -> list[str]:
        """Every repo id in the hub, sorted (NotImplementedError where the hub cannot list them)."""

    @abc.abstractmethod
    def exists(self, repo_id: str) -> bool:
        """Whether ``repo_id`` exists in the hub."""

    def latest(self, repo_id: str) -> str:
        """The newest published release of ``repo_id`` (pre-releases are skipped: they resolve only when pinned)."""
        return default_release(repo_id, self.versions(repo_id))
