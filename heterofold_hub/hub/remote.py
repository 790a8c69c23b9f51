"""RemoteHub: versioned adapter repos on any Hub-compatible server, through the real ``huggingface_hub`` client.

On the server, a repo is a model repo ``namespace/name``; each publish is one ``upload_folder`` commit on
``main`` that makes the tree exactly the adapter folder (plus the Hub's ``.gitattributes``), and each version
is a tag ``vX.Y.Z`` on that commit. Tags are immutable, so a version's files never change.

Downloads go to the standard huggingface_hub cache (``cache_dir``, default ``$HF_HUB_CACHE``)::

    cache_dir/models--<namespace>--<name>/
      refs/<vX.Y.Z>                     commit sha of the tag, so the version resolves offline
      snapshots/<commit sha>/<files>    the folder ``download`` returns (symlinks into blobs/)
      blobs/<etag>                      file contents, written to ``*.incomplete`` first, then renamed
      trees/<commit sha>.json           the commit's file list, to tell a complete snapshot from a partial one

With ``local_files_only=True`` or ``HF_HUB_OFFLINE=1`` a version downloaded before loads from that cache.
"""

from __future__ import annotations

import glob
import hashlib
import importlib
import os
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile

from heterofold_hub.hub.base import (
    AdapterHub,
    HubError,
    PublishedVersion,
    already_published,
    newest_release,
    sort_versions,
    validate_repo_id,
    validate_version,
    version_not_found,
)

HF_ENDPOINT = "https://huggingface.co"
_HUB_FILES = [".gitattributes"]  # created by the Hub itself, not part of any adapter


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Exceptions meaning "the connection failed or dropped", whichever HTTP stack the client version uses."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                          ("requests.exceptions", ("ConnectionError", "Timeout", "ChunkedEncodingError"))):
        try:
            errors += [getattr(importlib.import_module(module), name) for name in names]
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


_TRANSPORT_ERRORS = _transport_errors()


def _transport_cause(error: BaseException) -> BaseException | None:
    """The connection failure behind ``error``, if any (the client wraps some in LocalEntryNotFoundError)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, _TRANSPORT_ERRORS) and not isinstance(error, OfflineModeIsEnabled):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _offline_env() -> bool:
    # Read at call time: huggingface_hub reads HF_HUB_OFFLINE once, at import.
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") or constants.HF_HUB_OFFLINE


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _same_content(entry: RepoFile, path: Path) -> bool:
    data = path.read_bytes()
    if entry.lfs is not None:  # LFS/Xet files are identified by the sha256 of their content
        return entry.lfs.sha256 == hashlib.sha256(data).hexdigest()
    return entry.blob_id == _git_blob_sha1(data)


class RemoteHub(AdapterHub):
    """Adapter repos on a Hub-compatible ``endpoint`` (default ``$HF_ENDPOINT``, else https://huggingface.co)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None,
                 cache_dir: str | os.PathLike | None = None):
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")
        self.token = token
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.api = HfApi(endpoint=self.endpoint, token=token)  # explicit: never the endpoint read at import

    def __repr__(self) -> str:
        return f"RemoteHub({self.endpoint!r})"

    # -- queries ------------------------------------------------------------------------------------------
    def repos(self) -> list[str]:
        raise NotImplementedError(f"RemoteHub cannot list every repo of {self.endpoint}; use versions(repo_id) "
                                  "or exists(repo_id) for a repo you know.")

    def exists(self, repo_id: str) -> bool:
        validate_repo_id(repo_id)
        with self._errors(repo_id):
            return self.api.repo_exists(repo_id)

    def versions(self, repo_id: str) -> list[str]:
        validate_repo_id(repo_id)
        with self._errors(repo_id):
            refs = self.api.list_repo_refs(repo_id)
        return sort_versions(tag.name for tag in refs.tags)

    def version_info(self, repo_id: str, version: str) -> PublishedVersion:
        validate_repo_id(repo_id)
        validate_version(version)
        with self._errors(repo_id, version=version):
            tags = {tag.name: tag.target_commit for tag in self.api.list_repo_refs(repo_id).tags}
        if version not in tags:
            raise version_not_found(repo_id, version, sort_versions(tags), f"the hub at {self.endpoint}")
        return PublishedVersion(repo_id, version, tags[version], f"{self.endpoint}/{repo_id}/tree/{version}")

    # -- publish ------------------------------------------------------------------------------------------
    def _publish(self, repo_id: str, folder: Path, files: list[Path], version: str, message: str) -> PublishedVersion:
        with self._errors(repo_id):
            self.api.create_repo(repo_id, exist_ok=True)
            versions = self.versions(repo_id)
            if version in versions:  # refuse before uploading anything
                raise already_published(repo_id, version, versions)
            commit = self._commit_folder(repo_id, folder, files, message)
            self._check_tree(repo_id, version, commit, files)
            self._create_tag(repo_id, version, commit, message)
        return PublishedVersion(repo_id, version, commit, f"{self.endpoint}/{repo_id}/tree/{version}")

    def _commit_folder(self, repo_id: str, folder, files: list[Path], message: str) -> str:
        # parent_commit makes the server refuse (412) the commit if main moved since we listed the files to
        # delete; delete_patterns="*" removes the previous version's files, so the tree is exactly `files`.
        head = self.api.repo_info(repo_id, revision="main").sha
        info = self.api.upload_folder(
            repo_id=repo_id, folder_path=folder, revision="main", parent_commit=head, commit_message=message,
            allow_patterns=[glob.escape(f.name) for f in files], delete_patterns="*",
        )
        return info.oid

    def _check_tree(self, repo_id: str, version: str, commit: str, files: list[Path]) -> None:
        """Tag only a commit that holds exactly ``files`` (a concurrent publish could have mixed trees)."""
        remote = {f.path: f for f in self.api.list_repo_tree(repo_id, revision=commit, recursive=True)
                  if isinstance(f, RepoFile) and f.path not in _HUB_FILES}
        local = {f.name: f for f in files}
        changed = {name for name in local.keys() & remote.keys() if not _same_content(remote[name], local[name])}
        differ = sorted((remote.keys() ^ local.keys()) | changed)
        if differ:
            raise HubError(f"Publishing {version} of {repo_id} was disturbed by another publish: commit {commit} "
                           f"differs from the folder on {differ}. Nothing was tagged; retry.", retryable=True)

    def _create_tag(self, repo_id: str, version: str, commit: str, message: str) -> None:
        try:
            self.api.create_tag(repo_id, tag=version, revision=commit, tag_message=message)
        except HfHubHTTPError as error:
            if error.response.status_code == 409:  # another publisher tagged this version first
                raise HubError(f"Version {version} of {repo_id} was published by someone else while this publish "
                               "ran; published versions are immutable: bump the version and publish again.") from error
            raise

    # -- download -----------------------------------------------------------------------------------------
    def download(self, repo_id: str, *, version: str | None = None, local_files_only: bool = False) -> Path:
        """The cached snapshot folder of ``version`` (latest when None); offline, only what was downloaded before."""
        validate_repo_id(repo_id)
        offline = local_files_only or _offline_env()
        if version is None:
            version = self._cached_latest(repo_id) if offline else self.latest(repo_id)
        validate_version(version)
        with self._errors(repo_id, version=version, offline=offline):
            folder = snapshot_download(
                repo_id, revision=version, cache_dir=self.cache_dir, endpoint=self.endpoint, token=self.token,
                local_files_only=offline, ignore_patterns=_HUB_FILES,
            )
        return Path(folder)

    def _cache_repo_dir(self, repo_id: str) -> Path:
        namespace, name = repo_id.split("/")
        return Path(self.cache_dir or constants.HF_HUB_CACHE) / f"models--{namespace}--{name}"

    def _cached_latest(self, repo_id: str) -> str:
        refs = self._cache_repo_dir(repo_id) / "refs"
        versions = sort_versions(p.name for p in refs.glob("v*")) if refs.is_dir() else []
        latest = newest_release(versions)
        if latest is None:
            pinned = f" (cached pre-releases, used only when pinned: {', '.join(versions)})" if versions else ""
            raise HubError(f"No released version of {repo_id} is in the local cache {self._cache_repo_dir(repo_id)}"
                           f"{pinned} and downloads are disabled (local_files_only / HF_HUB_OFFLINE=1): download it "
                           "once online.")
        return latest

    # -- errors -------------------------------------------------------------------------------------------
    @contextmanager
    def _errors(self, repo_id: str, *, version: str | None = None, offline: bool = False):
        """Turn the client's exceptions into HubErrors that say what to do."""
        try:
            yield
        except HubError:
            raise
        except RevisionNotFoundError as error:
            raise version_not_found(repo_id, version or "?", self._versions_or_empty(repo_id),
                                    f"the hub at {self.endpoint}") from error
        except RepositoryNotFoundError as error:
            raise HubError(f"Repo {repo_id} not found at {self.endpoint} (or it is private or gated and the token "
                           "cannot read it): check the repo id, the endpoint and the token.") from error
        except IncompleteSnapshotError as error:
            raise HubError(f"The cached copy of {repo_id} {version} is incomplete (an earlier download was "
                           "interrupted) and downloads are disabled: download it again online.") from error
        except LocalEntryNotFoundError as error:
            cause = _transport_cause(error)
            if cause is not None and not offline:
                raise self._unreachable(cause) from error
            raise HubError(f"{repo_id} {version} is not in the local cache and downloads are disabled "
                           "(local_files_only / HF_HUB_OFFLINE=1): download it once online.") from error
        except OfflineModeIsEnabled as error:
            raise HubError(f"Offline mode is on (HF_HUB_OFFLINE=1), but this needs {self.endpoint}: unset it, or "
                           "download with local_files_only=True.") from error
        except HfHubHTTPError as error:
            raise self._http_error(repo_id, error) from error
        except _TRANSPORT_ERRORS as error:
            raise self._unreachable(error) from error
        except OSError as error:
            if "Consistency check failed" in str(error):  # a truncated file the client refused to keep
                raise self._unreachable(error) from error
            raise

    def _versions_or_empty(self, repo_id: str) -> list[str]:
        try:
            return self.versions(repo_id)
        except HubError:
            return []

    def _http_error(self, repo_id: str, error: HfHubHTTPError) -> HubError:
        status = error.response.status_code
        detail = error.server_message or str(error).splitlines()[0]
        if status in (401, 403):
            return HubError(f"{self.endpoint} refused access to {repo_id} (HTTP {status}: {detail}): check the token.")
        if status == 412:  # parent_commit no longer the head of main
            return HubError(f"{repo_id} changed on {self.endpoint} during this publish (another publish in "
                            "progress?); nothing was tagged: retry.", retryable=True)
        retryable = status in (408, 429) or status >= 500
        return HubError(f"{self.endpoint} refused the request for {repo_id} (HTTP {status}: {detail})"
                        + ("; retry later." if retryable else "."), retryable=retryable)

    def _unreachable(self, error: BaseException) -> HubError:
        return HubError(f"The connection to {self.endpoint} failed or was dropped ({type(error).__name__}: {error}); "
                        "no half-written file is kept: retry later.", retryable=True)
