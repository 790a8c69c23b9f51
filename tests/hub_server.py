"""A loopback Hugging Face Hub: a small HTTP server the real ``huggingface_hub`` client talks to in tests.

``LoopbackHub(root)`` serves model repos stored under ``root`` on 127.0.0.1 at a free port::

    with LoopbackHub(tmp_path) as hub:
        HfApi(endpoint=hub.url, token="test-token").create_repo("tester/adapter")

On disk, each repo is ``<root>/models/<namespace>/<name>/`` holding ``repo.json``, content-addressed
``blobs/<git blob sha1>``, one JSON manifest per commit in ``commits/<sha>.json`` (parents, message, date,
path -> blob) and one file per ref in ``refs/heads/`` and ``refs/tags/``. Every write is atomic (temp file +
``os.replace``). Like the real Hub, a new repo starts with an "initial commit" holding ``.gitattributes``.

Endpoints (``{repo}`` is ``namespace/name``; ``{rev}`` is a branch, a tag or a full commit sha):

    GET       /api/whoami-v2                            user "tester" (any bearer token is accepted)
    POST      /api/repos/create                         create_repo; 409 if the repo exists
    POST      /api/validate-yaml                        README.md metadata check (always valid)
    GET       /api/models/{repo}[/revision/{rev}]       model_info / repo_info / repo_exists (sha, siblings)
    GET       /api/models/{repo}/tree/{rev}[/{path}]    list_repo_tree / list_repo_files / snapshot_download
    GET       /api/models/{repo}/refs                   list_repo_refs (branches and tags)
    GET       /api/models/{repo}/commits/{rev}          list_repo_commits (single page)
    POST      /api/models/{repo}/preupload/{rev}        upload mode: always "regular" (no LFS, no Xet)
    POST      /api/models/{repo}/commit/{branch}        NDJSON commit: header, file, deletedFile, deletedFolder;
                                                        412 if ``parentCommit`` is not the branch head
    POST      /api/models/{repo}/tag/{rev}              create_tag; 409 if the tag exists (tags are immutable)
    POST      /api/models/{repo}/branch/{branch}        create_branch; 409 if the branch exists
    HEAD|GET  /{repo}/resolve/{rev}/{path}              hf_hub_download / file_exists (single byte ranges)

Errors carry the ``X-Error-Code`` / ``X-Error-Message`` headers and ``{"error": ...}`` body the client maps to
its exceptions: ``RepoNotFound`` (RepositoryNotFoundError), ``RevisionNotFound`` (RevisionNotFoundError),
``EntryNotFound`` (RemoteEntryNotFoundError). Dataset/space/kernel repos get 404 RepoNotFound (400 on create).
Writes need an ``Authorization`` header; private repos are hidden from anonymous reads (401, as on the Hub).

``hub.kill_after(method, path_substring, after_bytes=..., times=...)`` makes the server drop matching requests,
to simulate it going away mid-pull or mid-push; ``hub.heal()`` undoes it. ``hub.requests`` logs every request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

USER = "tester"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SHA_RE = re.compile(r"[0-9a-f]{40}")
_OTHER_REPO_TYPES = ("datasets", "spaces", "kernels")
_GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"


class HubError(Exception):
    """An HTTP error answered the way the Hub does: status, X-Error-Code/X-Error-Message headers, JSON body."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **body):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body

    def response(self) -> _Response:
        # Header values must be latin-1: keep the ASCII-safe form of the message there.
        headers = {"X-Error-Message": self.message.encode("ascii", "replace").decode(), **self.headers}
        if self.code:
            headers["X-Error-Code"] = self.code
        return _json(self.status, {"error": self.message, **self.body}, headers)


def _repo_not_found(repo_id: str, status: int = 404) -> HubError:
    return HubError(status, f"Repository not found: {repo_id}", "RepoNotFound")


def _revision_not_found(revision: str) -> HubError:
    return HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: dict = field(default_factory=dict)
    offset: int = 0  # position of ``body`` in the whole file (range responses), used to cut killed transfers


def _json(status: int, obj, headers: dict | None = None) -> _Response:
    return _Response(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _git_blob_oid(data: bytes) -> str:
    # Same id the Hub reports (ETag, tree "oid", preupload "oid") for regular files: git's blob sha1.
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class _RepoStore:
    """Repos on disk: blobs by git oid, one JSON manifest per commit, one file per ref."""

    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()  # serialises every write (repo creation, commits, refs)

    def path(self, repo_id: str) -> Path:
        namespace, name = repo_id.split("/")
        return self.root / "models" / namespace / name

    def meta(self, repo_id: str) -> dict | None:
        meta_path = self.path(repo_id) / "repo.json"
        return json.loads(meta_path.read_text()) if meta_path.is_file() else None

    def create(self, repo_id: str, private: bool) -> bool:
        with self.lock:
            if self.meta(repo_id) is not None:
                return False
            meta = {"id": repo_id, "private": private, "createdAt": _now()}
            files = {".gitattributes": self.put_blob(repo_id, _GITATTRIBUTES)}
            sha = self.add_commit(repo_id, [], files, "initial commit", "")
            self.set_ref(repo_id, "heads", "main", sha)
            _atomic_write(self.path(repo_id) / "repo.json", json.dumps(meta).encode())  # last: repo now exists
            return True

    def refs(self, repo_id: str, kind: str) -> dict[str, str]:
        folder = self.path(repo_id) / "refs" / kind
        files = sorted(folder.iterdir()) if folder.is_dir() else []
        return {unquote(f.name): f.read_text() for f in files if not f.name.startswith(".tmp-")}

    def set_ref(self, repo_id: str, kind: str, name: str, sha: str) -> None:
        _atomic_write(self.path(repo_id) / "refs" / kind / quote(name, safe=""), sha.encode())

    def resolve(self, repo_id: str, revision: str) -> str | None:
        for kind in ("heads", "tags"):
            name = revision.removeprefix(f"refs/{kind}/")
            if (sha := self.refs(repo_id, kind).get(name)) is not None:
                return sha
        if _SHA_RE.fullmatch(revision) and (self.path(repo_id) / "commits" / f"{revision}.json").is_file():
            return revision
        return None

    def commit(self, repo_id: str, sha: str) -> dict:
        return json.loads((self.path(repo_id) / "commits" / f"{sha}.json").read_text())

    def put_blob(self, repo_id: str, data: bytes) -> dict:
        oid = _git_blob_oid(data)
        blob_path = self.path(repo_id) / "blobs" / oid
        if not blob_path.exists():
            _atomic_write(blob_path, data)
        return {"oid": oid, "size": len(data)}

    def blob(self, repo_id: str, oid: str) -> bytes:
        return (self.path(repo_id) / "blobs" / oid).read_bytes()

    def add_commit(self, repo_id: str, parents: list[str], files: dict, title: str, message: str) -> str:
        commit = {"parents": parents, "title": title, "message": message, "date": _now(), "files": files}
        # The commit id is a sha1 over the whole manifest, so it pins parents, message, date and file contents.
        sha = hashlib.sha1(json.dumps(commit, sort_keys=True).encode()).hexdigest()
        _atomic_write(self.path(repo_id) / "commits" / f"{sha}.json", json.dumps({"id": sha, **commit}).encode())
        return sha


class _HubApp:
    """Routes a request to an endpoint; every endpoint returns a _Response or raises HubError."""

    def __init__(self, store: _RepoStore):
        self.store = store
        self.url = ""  # set once the server is bound; used in the URLs the Hub returns

    def dispatch(self, method: str, path: str, query: dict, body: bytes, authorized: bool,
                 range_header: str | None = None) -> _Response:
        parts = [unquote(p) for p in path.strip("/").split("/")]  # split first: revisions may hold "%2F"
        if method == "POST" and not authorized:  # the Hub refuses anonymous writes
            raise HubError(401, "Invalid credentials in Authorization header")
        if parts[0] == "api":
            return self._api(method, parts[1:], query, body, authorized)
        if parts[0] in _OTHER_REPO_TYPES and "resolve" in parts:
            raise HubError(404, "LoopbackHub only serves model repos", "RepoNotFound")
        if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
            repo_id, revision, file_path = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            return self.resolve(repo_id, revision, file_path, authorized, method, range_header)
        raise HubError(404, f"Not found: {method} {path}")

    def _api(self, method: str, parts: list[str], query: dict, body: bytes, authorized: bool) -> _Response:
        if parts == ["whoami-v2"] and method == "GET":
            return self.whoami(authorized)
        if parts == ["repos", "create"] and method == "POST":
            return self.create_repo(json.loads(body or b"{}"))
        if parts == ["validate-yaml"] and method == "POST":
            return _json(200, {"errors": [], "warnings": []})
        if parts and parts[0] in _OTHER_REPO_TYPES:
            raise HubError(404, "LoopbackHub only serves model repos", "RepoNotFound")
        if len(parts) < 3 or parts[0] != "models":
            raise HubError(404, f"Not found: {method} /api/{'/'.join(parts)}")
        repo_id, action, rest = f"{parts[1]}/{parts[2]}", (parts[3:4] or [None])[0], parts[4:]
        self._check_repo(repo_id, authorized)
        routes = {
            ("GET", None): lambda: self.info(repo_id, "main"),
            ("GET", "revision"): lambda: self.info(repo_id, rest[0]),
            ("GET", "tree"): lambda: self.tree(repo_id, rest[0], "/".join(rest[1:]), query),
            ("GET", "refs"): lambda: self.list_refs(repo_id),
            ("GET", "commits"): lambda: self.commits(repo_id, rest[0]),
            ("POST", "preupload"): lambda: self.preupload(repo_id, rest[0], json.loads(body)),
            ("POST", "commit"): lambda: self.commit(repo_id, rest[0], query, body),
            ("POST", "tag"): lambda: self.create_ref(repo_id, "tags", json.loads(body)["tag"], rest[0]),
            ("POST", "branch"): lambda: self.create_ref(
                repo_id, "heads", rest[0], json.loads(body or b"{}").get("startingPoint") or "main"
            ),
        }
        route = routes.get((method, action))
        if route is None or (action not in (None, "refs") and not rest):
            raise HubError(404, f"Not found: {method} /api/{'/'.join(parts)}")
        return route()

    # -- helpers ------------------------------------------------------------------------------------------
    def _check_repo(self, repo_id: str, authorized: bool) -> dict:
        if not all(_NAME_RE.fullmatch(p) for p in repo_id.split("/")):
            raise _repo_not_found(repo_id)  # also keeps odd ids (e.g. "..") away from the filesystem
        meta = self.store.meta(repo_id)
        if meta is None:
            raise _repo_not_found(repo_id)
        if meta["private"] and not authorized:
            raise _repo_not_found(repo_id, status=401)  # the Hub hides private repos behind a 401
        return meta

    def _files_at(self, repo_id: str, revision: str) -> tuple[str, dict]:
        sha = self.store.resolve(repo_id, revision)
        if sha is None:
            raise _revision_not_found(revision)
        return sha, self.store.commit(repo_id, sha)["files"]

    # -- endpoints ----------------------------------------------------------------------------------------
    def whoami(self, authorized: bool) -> _Response:
        if not authorized:
            raise HubError(401, "Invalid credentials in Authorization header")
        return _json(200, {"type": "user", "name": USER, "fullname": "Loopback Tester", "orgs": [],
                           "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}}})

    def create_repo(self, payload: dict) -> _Response:
        if payload.get("type", "model") != "model":
            raise HubError(400, f"LoopbackHub only supports model repos, not {payload['type']!r}")
        repo_id = f"{payload.get('organization') or USER}/{payload.get('name')}"
        if not all(_NAME_RE.fullmatch(p) for p in repo_id.split("/")):
            raise HubError(400, f"Invalid repo name: {repo_id}")
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        if not self.store.create(repo_id, private):
            # create_repo(exist_ok=True) reads the repo URL from this 409 body
            raise HubError(409, "You already created this model repo", url=f"{self.url}/{repo_id}")
        return _json(200, {"url": f"{self.url}/{repo_id}", "name": repo_id, "id": repo_id})

    def info(self, repo_id: str, revision: str) -> _Response:
        meta = self.store.meta(repo_id)
        sha, files = self._files_at(repo_id, revision)
        siblings = [{"rfilename": p, "size": f["size"], "blobId": f["oid"]} for p, f in sorted(files.items())]
        return _json(200, {
            "_id": repo_id, "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0], "sha": sha,
            "lastModified": self.store.commit(repo_id, sha)["date"], "createdAt": meta["createdAt"],
            "private": meta["private"], "gated": False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "siblings": siblings,
        })

    def tree(self, repo_id: str, revision: str, prefix: str, query: dict) -> _Response:
        _, files = self._files_at(repo_id, revision)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        base = f"{prefix}/" if prefix else ""
        below = {p[len(base):]: f for p, f in files.items() if p.startswith(base)}
        if prefix and not below:
            raise HubError(404, f"Entry not found: {prefix}", "EntryNotFound")
        entries, folders = [], set()
        for rel, f in sorted(below.items()):
            *dirs, _ = rel.split("/")
            if dirs and not recursive:
                folders.add(dirs[0])
                continue
            folders.update("/".join(dirs[: i + 1]) for i in range(len(dirs)))
            entries.append({"type": "file", "path": base + rel, "oid": f["oid"], "size": f["size"]})
        for folder in sorted(folders):
            inside = sorted((p, f["oid"]) for p, f in below.items() if p.startswith(folder + "/"))
            oid = hashlib.sha1(json.dumps(inside).encode()).hexdigest()  # content-derived, like a git tree id
            entries.append({"type": "directory", "path": base + folder, "oid": oid, "size": 0})
        return _json(200, entries)

    def list_refs(self, repo_id: str) -> _Response:
        def refs(kind: str) -> list[dict]:
            items = self.store.refs(repo_id, kind).items()
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": sha} for n, sha in items]

        return _json(200, {"branches": refs("heads"), "converts": [], "tags": refs("tags"), "pullRequests": []})

    def commits(self, repo_id: str, revision: str) -> _Response:
        sha, history = self.store.resolve(repo_id, revision), []
        if sha is None:
            raise _revision_not_found(revision)
        while sha:
            c = self.store.commit(repo_id, sha)
            history.append({"id": sha, "title": c["title"], "message": c["message"], "date": c["date"],
                            "authors": [{"user": USER}]})
            sha = (c["parents"] or [None])[0]
        return _json(200, history)

    def preupload(self, repo_id: str, revision: str, payload: dict) -> _Response:
        sha, files = self._files_at(repo_id, revision)
        # "regular" for every file: the client then inlines contents in the commit (no LFS batch, no Xet).
        answers = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                    "oid": files.get(f["path"], {}).get("oid")} for f in payload["files"]]
        return _json(200, {"files": answers, "commitOid": sha})

    def commit(self, repo_id: str, branch: str, query: dict, body: bytes) -> _Response:
        if query.get("create_pr"):
            raise HubError(400, "LoopbackHub does not support pull requests")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The first NDJSON line of a commit must be its header")
        header = lines[0]["value"]
        with self.store.lock:
            head = self.store.refs(repo_id, "heads").get(branch.removeprefix("refs/heads/"))
            if head is None:
                raise _revision_not_found(branch)  # commits only go to existing branches
            parent = header.get("parentCommit")
            if parent and not head.startswith(parent):
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(self.store.commit(repo_id, head)["files"])
            for op in lines[1:]:
                self._apply(repo_id, files, op["key"], op["value"])
            sha = self.store.add_commit(repo_id, [head], files, header["summary"], header.get("description", ""))
            self.store.set_ref(repo_id, "heads", branch.removeprefix("refs/heads/"), sha)
        return _json(200, {"success": True, "commitOid": sha, "commitUrl": f"{self.url}/{repo_id}/commit/{sha}",
                           "commitMessage": header["summary"], "hookOutput": "", "pullRequestUrl": None})

    def _apply(self, repo_id: str, files: dict, key: str, value: dict) -> None:
        path = value["path"]
        if key == "file":
            raw = value["content"]
            data = base64.b64decode(raw) if value.get("encoding") == "base64" else raw.encode()
            files[path] = self.store.put_blob(repo_id, data)
        elif key in ("deletedFile", "deletedFolder"):
            folder = path.rstrip("/") + "/"
            doomed = [p for p in files if p == path or (key == "deletedFolder" and p.startswith(folder))]
            if not doomed:  # the client looks for this exact wording to explain failed deletions
                raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            for p in doomed:
                del files[p]
        else:
            raise HubError(400, f"LoopbackHub does not support {key!r} commit operations (no LFS/Xet storage)")

    def create_ref(self, repo_id: str, kind: str, name: str, revision: str) -> _Response:
        with self.store.lock:
            sha = self.store.resolve(repo_id, revision)
            if sha is None:
                raise _revision_not_found(revision)
            if name in self.store.refs(repo_id, kind):
                what = "Tag" if kind == "tags" else "Branch"
                raise HubError(409, f"{what} {name} already exists")
            self.store.set_ref(repo_id, kind, name, sha)
        return _json(200, {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha})

    def resolve(self, repo_id: str, revision: str, path: str, authorized: bool, method: str,
                range_header: str | None) -> _Response:
        self._check_repo(repo_id, authorized)
        sha, files = self._files_at(repo_id, revision)
        if path not in files:  # X-Repo-Commit lets the client cache the file's absence for this commit
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        entry = files[path]
        data = self.store.blob(repo_id, entry["oid"]) if method == "GET" else b""
        name = path.rsplit("/", 1)[-1]
        headers = {
            "X-Repo-Commit": sha, "ETag": f'"{entry["oid"]}"', "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{quote(name)}\";",
        }
        if method == "HEAD":  # headers only, but with the length of the whole file
            return _Response(200, b"", {**headers, "Content-Length": str(entry["size"])})
        return _byte_range(data, range_header, headers)


def _byte_range(data: bytes, range_header: str | None, headers: dict) -> _Response:
    """Answer a single ``bytes=start-[end]`` range (the client's resume requests) or the whole file."""
    match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header or "")
    if match is None:
        return _Response(200, data, headers)
    start, end = int(match[1]), int(match[2] or len(data) - 1)
    if start >= len(data):
        return _Response(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"})
    end = min(end, len(data) - 1)
    content_range = f"bytes {start}-{end}/{len(data)}"
    return _Response(206, data[start : end + 1], {**headers, "Content-Range": content_range}, offset=start)


@dataclass
class _KillRule:
    method: str
    path_substring: str
    after_bytes: int | None  # None: drop before answering; n: send the file's first n bytes, then hang up
    times: int | None  # requests left to kill; None: until heal()


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so no pooled keep-alive socket outlives a stopped server.
    protocol_version = "HTTP/1.0"
    server: _Server

    def do_GET(self):
        self._handle("GET")

    def do_HEAD(self):
        self._handle("HEAD")

    def do_POST(self):
        self._handle("POST")

    def log_message(self, format, *args):  # keep pytest output clean
        pass

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hub = self.server.hub
        kill = hub._on_request(method, url.path)
        if kill is not None and (method != "GET" or kill.after_bytes is None):
            return  # the server "went away": the request (even a commit) is never processed or answered
        authorized = self.headers.get("Authorization", "").startswith("Bearer ")
        try:
            response = hub._app.dispatch(
                method, url.path, parse_qs(url.query), body, authorized, self.headers.get("Range")
            )
        except HubError as error:
            response = error.response()
        except (KeyError, IndexError, ValueError) as error:  # malformed JSON/NDJSON/base64 from the client
            response = HubError(400, f"Malformed request: {error!r}").response()
        self._send(response, method, None if kill is None else kill.after_bytes)

    def _send(self, response: _Response, method: str, cut: int | None) -> None:
        self.send_response(response.status)
        headers = {"Content-Length": str(len(response.body)), **response.headers}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if method != "HEAD":
            # A killed transfer stops at the same file offset on every attempt, so resumes make no progress.
            end = len(response.body) if cut is None else max(0, cut - response.offset)
            self.wfile.write(response.body[:end])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: LoopbackHub


class LoopbackHub:
    """A Hub-compatible HTTP server on 127.0.0.1 (random free port), storing repos under ``root``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._app = _HubApp(_RepoStore(self.root))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._kills: list[_KillRule] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request received, in order

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LoopbackHub is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> LoopbackHub:
        if self._server is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._server = _Server(("127.0.0.1", 0), _Handler)
            self._server.hub = self
            self._app.url = self.url
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def kill_after(self, method: str, path_substring: str, *, after_bytes: int | None = None,
                   times: int | None = None) -> None:
        """Drop matching requests: unanswered, or (GET with ``after_bytes``) cut after that many file bytes.

        Killed non-GET requests (e.g. a commit) are never processed. ``times`` limits how many requests are
        killed; by default every match is, until ``heal()``.
        """
        with self._lock:
            self._kills.append(_KillRule(method.upper(), path_substring, after_bytes, times))

    def heal(self) -> None:
        with self._lock:
            self._kills.clear()

    def _on_request(self, method: str, path: str) -> _KillRule | None:
        with self._lock:
            self.requests.append((method, path))
            for rule in self._kills:
                if rule.method == method and rule.path_substring in path:
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times == 0:
                            self._kills.remove(rule)
                    return rule
        return None
