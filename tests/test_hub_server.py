"""The loopback Hub against the real huggingface_hub client: repos, commits, tags, downloads, errors, dropped links."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest
import torch
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.torch import load_file, save_file


REPO = "tester/pair-adapter"
WEIGHTS, CONFIG = "adapter_model.safetensors", "adapter_config.json"



@pytest.fixture
def api(loopback_hub):
    return HfApi(endpoint=loopback_hub.url, token="test-token")


def write_adapter(folder: Path, scale: float) -> dict[str, bytes]:
    """A small adapter folder (real safetensors weights + JSON config); returns its files' bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"proj.weight": torch.full((4, 8), scale)}, folder / WEIGHTS)
    (folder / CONFIG).write_text(json.dumps({"rank": 4, "alpha": 8}))
    return {name: (folder / name).read_bytes() for name in (WEIGHTS, CONFIG)}


@pytest.fixture
def published(api, tmp_path):
    """REPO with two commits (the second changes the weights) and tag v1.0.0 on the first."""
    api.create_repo(REPO)
    v1 = write_adapter(tmp_path / "v1", 1.0)
    first = api.upload_folder(repo_id=REPO, folder_path=tmp_path / "v1", commit_message="v1", revision="main")
    api.create_tag(REPO, tag="v1.0.0", revision=first.oid)
    v2 = write_adapter(tmp_path / "v2", 2.0)
    second = api.upload_folder(repo_id=REPO, folder_path=tmp_path / "v2", commit_message="v2", revision="main")
    return {"first": first.oid, "second": second.oid, "v1": v1, "v2": v2}


def test_create_repo_conflict_and_exist_ok(api, loopback_hub):
    url = api.create_repo(REPO, private=True)
    assert url.repo_id == REPO and url.startswith(loopback_hub.url)
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo(REPO)
    assert conflict.value.response.status_code == 409
    assert api.create_repo(REPO, exist_ok=True).repo_id == REPO

    assert api.repo_exists(REPO) and not api.repo_exists("tester/missing")
    info = api.model_info(REPO)
    assert info.private is True and [s.rfilename for s in info.siblings] == [".gitattributes"]
    assert api.whoami()["name"] == "tester"
    with pytest.raises(BadRequestError):  # only model repos are served
        api.create_repo("tester/some-dataset", repo_type="dataset")


def test_commits_tags_and_refs(api, published, tmp_path):
    first, second = published["first"], published["second"]
    assert len(first) == len(second) == 40 and first != second
    refs = api.list_repo_refs(REPO)
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", second)]
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0.0", first)]
    assert [c.title for c in api.list_repo_commits(REPO)] == ["v2", "v1", "initial commit"]

    with pytest.raises(HfHubHTTPError) as duplicate:  # tags are immutable
        api.create_tag(REPO, tag="v1.0.0", revision=second)
    assert duplicate.value.response.status_code == 409
    assert api.list_repo_refs(REPO).tags[0].target_commit == first

    assert api.model_info(REPO, revision="v1.0.0").sha == first
    assert api.model_info(REPO).sha == second
    assert sorted(api.list_repo_files(REPO, revision="v1.0.0")) == [".gitattributes", CONFIG, WEIGHTS]
    assert api.file_exists(REPO, WEIGHTS) and not api.file_exists(REPO, "missing.bin")

    # A commit based on a stale parent is refused, as on the Hub (412), and leaves main alone.
    with pytest.raises(HfHubHTTPError) as stale:
        api.upload_file(path_or_fileobj=b"late", path_in_repo="notes.txt", repo_id=REPO, parent_commit=first)
    assert stale.value.response.status_code == 412
    assert api.model_info(REPO).sha == second


def test_download_by_tag_branch_and_commit(api, published, loopback_hub, tmp_path):
    cache, url = tmp_path / "cache", loopback_hub.url
    by_tag = hf_hub_download(REPO, WEIGHTS, revision="v1.0.0", cache_dir=cache, endpoint=url)
    by_main = hf_hub_download(REPO, WEIGHTS, revision="main", cache_dir=cache, endpoint=url)
    by_sha = hf_hub_download(REPO, WEIGHTS, revision=published["second"], cache_dir=cache, endpoint=url)
    assert Path(by_tag).read_bytes() == published["v1"][WEIGHTS]
    assert Path(by_main).read_bytes() == Path(by_sha).read_bytes() == published["v2"][WEIGHTS]
    assert torch.equal(load_file(by_tag)["proj.weight"], torch.full((4, 8), 1.0))
    assert f"snapshots/{published['first']}/" in Path(by_tag).as_posix()

    for revision, key, sha in (("v1.0.0", "v1", "first"), ("main", "v2", "second")):
        folder = Path(snapshot_download(REPO, revision=revision, cache_dir=cache, endpoint=url))
        assert folder.name == published[sha]
        assert {name: (folder / name).read_bytes() for name in (WEIGHTS, CONFIG)} == published[key]


def test_offline_reload_from_cache_in_fresh_process(published, loopback_hub, tmp_path):
    cache = tmp_path / "cache"
    path = hf_hub_download(REPO, WEIGHTS, revision="v1.0.0", cache_dir=cache, endpoint=loopback_hub.url)
    expected = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    hub_url = loopback_hub.url
    loopback_hub.stop()  # nothing left to answer: the reload must come from the cache alone

    script = textwrap.dedent(f"""
        import hashlib
        from huggingface_hub import hf_hub_download
        path = hf_hub_download({REPO!r}, {WEIGHTS!r}, revision="v1.0.0", cache_dir={str(cache)!r})
        print(hashlib.sha256(open(path, "rb").read()).hexdigest())
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": hub_url, "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == expected


def test_missing_repo_revision_and_file_raise_client_errors(api, published, loopback_hub, tmp_path):
    cache, url = tmp_path / "cache", loopback_hub.url
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("tester/missing", WEIGHTS, cache_dir=cache, endpoint=url)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("tester/missing")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, WEIGHTS, revision="v9.9.9", cache_dir=cache, endpoint=url)
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO, revision="v9.9.9", cache_dir=cache, endpoint=url)
    with pytest.raises(RevisionNotFoundError):
        api.create_tag(REPO, tag="v2.0.0", revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.safetensors", revision="v1.0.0", cache_dir=cache, endpoint=url)


def test_connection_killed_mid_download_leaves_no_partial_file(published, loopback_hub, tmp_path, monkeypatch):
    # The client waits 1 s before each of its 5 resume attempts; skip the waits to keep the test fast.
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: real_sleep(min(seconds, 0.01)))
    cache, url, size = tmp_path / "cache", loopback_hub.url, len(published["v2"][WEIGHTS])
    loopback_hub.kill_after("GET", f"/resolve/main/{WEIGHTS}", after_bytes=size // 2)

    with pytest.raises(httpx2.RemoteProtocolError):
        hf_hub_download(REPO, WEIGHTS, revision="main", cache_dir=cache, endpoint=url)
    assert loopback_hub.requests.count(("GET", f"/{REPO}/resolve/main/{WEIGHTS}")) > 1  # the client did retry
    storage = cache / "models--tester--pair-adapter"
    assert not list(storage.glob(f"snapshots/*/{WEIGHTS}"))  # no pointer to a half file
    assert not list(storage.glob("blobs/*"))  # no truncated blob and no leftover *.incomplete

    loopback_hub.heal()  # the server is back: the same call now completes
    path = hf_hub_download(REPO, WEIGHTS, revision="main", cache_dir=cache, endpoint=url)
    assert Path(path).read_bytes() == published["v2"][WEIGHTS]


def test_connection_killed_mid_push_leaves_branch_unchanged(api, published, loopback_hub):
    loopback_hub.kill_after("POST", "/commit/", times=1)
    with pytest.raises(httpx2.RemoteProtocolError):
        api.upload_file(path_or_fileobj=b"{}", path_in_repo="extra.json", repo_id=REPO, commit_message="lost")
    assert api.model_info(REPO).sha == published["second"]
    assert "extra.json" not in api.list_repo_files(REPO)

    retried = api.upload_file(path_or_fileobj=b"{}", path_in_repo="extra.json", repo_id=REPO, commit_message="ok")
    assert api.list_repo_refs(REPO).branches[0].target_commit == retried.oid
    assert "extra.json" in api.list_repo_files(REPO)
