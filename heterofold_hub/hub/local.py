"""LocalHub: the embedded default hub, a folder of plain git repositories (no server, no network).

On disk (``root`` is the ``LocalHub(root)`` argument, else ``$HF_FOLD_HOME``, else ``~/.cache/heterofold``)::

    root/
      repos/<namespace>/<name>/                bare git repository: each published version is an annotated tag
                                               ``vX.Y.Z`` on a commit whose tree is the adapter folder (flat);
                                               branch ``main`` follows the most recent publish
      locks/<namespace>/<name>.lock            flock()ed while a publish runs; holds the publisher's pid
      snapshots/<namespace>/<name>/<vX.Y.Z>/   one version's files, exported with ``git archive`` (``snapshots=``
                                               puts them elsewhere: an installed embedded hub's go under
                                               ``$HF_FOLD_HOME/embedded/snapshots``, never into site-packages)

Publishing is crash-safe: the files become git objects and a commit *before* the tag is created, and creating
the tag is the single atomic step that makes a version exist. A publisher killed midway leaves at most
unreferenced objects behind: no tag, so the version can be published again. The per-repo lock is an
``flock``, which the kernel drops when its holder dies, so a dead publisher never blocks later ones.
A snapshot folder is written under a temp name and renamed into place: it is complete or absent.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from heterofold_hub.hub.base import (
    AdapterHub,
    HubError,
    PublishedVersion,
    _repo_id_problem,
    already_published,
    default_release,
    sort_versions,
    validate_repo_id,
    validate_version,
    version_not_found,
)
from heterofold_hub.paths import default_root

_GIT_IDENTITY = ("-c", "user.name=hf-fold", "-c", "user.email=hf-fold@localhost")


def _git_env() -> dict[str, str]:
    # Only our explicit --git-dir counts: drop inherited GIT_DIR/GIT_INDEX_FILE/... and the user's config
    # (signing, hooks paths, prompts), so publishing behaves the same on every machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


def git(*args: str, repo: Path | None = None, input: bytes | None = None) -> str:
    """Run ``git`` (on ``repo`` when given) and return its stripped stdout; HubError if it fails."""
    command = ["git", *_GIT_IDENTITY, *([f"--git-dir={repo}"] if repo is not None else []), *args]
    try:
        result = subprocess.run(command, input=input, capture_output=True, env=_git_env(), check=False)
    except FileNotFoundError as error:
        raise HubError("LocalHub needs the `git` program: install git and make sure it is on PATH.") from error
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        raise HubError(f"git {' '.join(args[:2])} failed in {repo}: {stderr}")
    return result.stdout.decode().strip()


class LocalHub(AdapterHub):
    """Versioned adapter repos in a local folder of bare git repos (see the module docstring for the layout)."""

    def __init__(self, root: str | os.PathLike | None = None, *, lock_timeout: float = 10.0,
                 snapshots: str | os.PathLike | None = None):
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.lock_timeout = lock_timeout  # how long a publish waits for another publish of the same repo
        # Exported versions go to root/snapshots, or elsewhere for a hub that must stay untouched (an installed one).
        self.snapshots = Path(snapshots).expanduser() if snapshots is not None else self.root / "snapshots"

    def __repr__(self) -> str:
        return f"LocalHub({str(self.root)!r})"

    # -- paths --------------------------------------------------------------------------------------------
    def repo_path(self, repo_id: str) -> Path:
        return self.root / "repos" / validate_repo_id(repo_id)

    def snapshot_path(self, repo_id: str, version: str) -> Path:
        return self.snapshots / validate_repo_id(repo_id) / validate_version(version)

    def _existing_repo(self, repo_id: str) -> Path:
        repo = self.repo_path(repo_id)
        if not (repo / "HEAD").is_file():
            raise HubError(f"Repo {repo_id} not found in the local hub {self.root}: check the id or publish a "
                           f"version first (repos here: {', '.join(self.repos()) or 'none'}).")
        return repo

    # -- queries ------------------------------------------------------------------------------------------
    def repos(self) -> list[str]:
        base = self.root / "repos"
        found = (f"{ns.name}/{repo.name}" for ns in base.glob("*") for repo in ns.glob("*")
                 if (repo / "HEAD").is_file())
        return sorted(repo_id for repo_id in found if _repo_id_problem(repo_id) is None)  # skips temp folders

    def exists(self, repo_id: str) -> bool:
        return (self.repo_path(repo_id) / "HEAD").is_file()

    def versions(self, repo_id: str) -> list[str]:
        tags = git("for-each-ref", "--format=%(refname:strip=2)", "refs/tags/", repo=self._existing_repo(repo_id))
        return sort_versions(tags.splitlines())

    def version_info(self, repo_id: str, version: str) -> PublishedVersion:
        validate_version(version)
        repo, versions = self._existing_repo(repo_id), self.versions(repo_id)
        if version not in versions:
            raise version_not_found(repo_id, version, versions, f"the local hub {self.root}")
        return PublishedVersion(repo_id, version, git("rev-parse", f"refs/tags/{version}^{{commit}}", repo=repo), str(repo))

    # -- publish ------------------------------------------------------------------------------------------
    def _publish(self, repo_id: str, folder: Path, files: list[Path], version: str, message: str) -> PublishedVersion:
        with self.publish_lock(repo_id):
            repo = self._ensure_repo(repo_id)
            versions = self.versions(repo_id)
            if version in versions:
                raise already_published(repo_id, version, versions)
            commit = self._commit_files(repo, files, message)
            self._tag(repo, version, commit, message)
        return PublishedVersion(repo_id, version, commit, str(repo))

    @contextmanager
    def publish_lock(self, repo_id: str):
        """Hold the repo's exclusive publish lock; HubError (retryable) if another publisher keeps it too long."""
        path = self.root / "locks" / f"{validate_repo_id(repo_id)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, path, repo_id)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for the "in progress" message
            yield
        finally:
            os.close(fd)  # releases the flock (the kernel does the same if this process dies)

    def _acquire(self, fd: int, path: Path, repo_id: str) -> None:
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = path.read_text().strip() or "unknown"
                    raise HubError(f"Another publish of {repo_id} is in progress (pid {holder}, lock {path}): "
                                   "retry when it has finished.", retryable=True) from None
                time.sleep(0.05)

    def _ensure_repo(self, repo_id: str) -> Path:
        repo = self.repo_path(repo_id)
        if not (repo / "HEAD").is_file():
            # Initialise under a temp name, then rename: the repo folder is complete or absent.
            repo.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=repo.parent, prefix=f".tmp-{repo.name}-"))
            try:
                git("init", "--quiet", "--bare", "--template=", "--initial-branch=main", str(tmp))  # no sample hooks
                os.rename(tmp, repo)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return repo

    def _commit_files(self, repo: Path, files: list[Path], message: str) -> str:
        """Write ``files`` as a commit on top of main without touching any ref; returns the commit sha."""
        entries = b"".join(
            b"100644 blob %s\t%s\0" % (git("hash-object", "-w", "--no-filters", "--", str(f), repo=repo).encode(),
                                       os.fsencode(f.name))
            for f in files
        )
        tree = git("mktree", "-z", repo=repo, input=entries)
        parent = self._main(repo)
        return git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message, repo=repo)

    def _main(self, repo: Path) -> str | None:
        heads = git("for-each-ref", "--format=%(objectname)", "refs/heads/main", repo=repo)
        return heads or None

    def _tag(self, repo: Path, version: str, commit: str, message: str) -> None:
        # The tag is the commit point of a publish; moving main afterwards only keeps the history linear.
        git("tag", "--annotate", "--message", message, version, commit, repo=repo)
        git("update-ref", "refs/heads/main", commit, repo=repo)

    # -- download -----------------------------------------------------------------------------------------
    def download(self, repo_id: str, *, version: str | None = None, local_files_only: bool = False) -> Path:
        """The snapshot folder of ``version`` (latest when None), exported on first use and reused after.

        ``local_files_only`` is accepted for API parity: a LocalHub never uses the network.
        """
        validate_repo_id(repo_id)
        if version is not None and self.snapshot_path(repo_id, version).is_dir():
            return self.snapshot_path(repo_id, version)  # tags are immutable, so a snapshot never goes stale
        versions = self.versions(repo_id)
        if version is None:
            version = default_release(repo_id, versions)  # the tags just listed: no second listing
        if version not in versions:
            raise version_not_found(repo_id, version, versions, f"the local hub {self.root}")
        target = self.snapshot_path(repo_id, version)
        if not target.is_dir():
            self._export(self.repo_path(repo_id), version, target)
        return target

    def _export(self, repo: Path, version: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".tmp-{version}-"))
        try:
            archive, files = tmp / "archive.tar", tmp / "files"
            git("archive", "--format=tar", f"--output={archive}", f"refs/tags/{version}", repo=repo)
            with tarfile.open(archive) as tar:
                tar.extractall(files, filter="data")
            try:
                os.rename(files, target)
            except OSError:
                if not target.is_dir():  # not a concurrent download that got there first
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
