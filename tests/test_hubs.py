"""Adapter hubs end to end: LocalHub on real git, RemoteHub through the real huggingface_hub client and the
loopback server. Publish and download by version, immutability, id/version rules, concurrent and killed
publishes, dropped connections and offline reloads."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import heterofold_hub
from heterofold_hub.hub import (
    HubError, LocalHub, PublishedVersion, RemoteHub, get_hub, validate_repo_id, validate_version, version_key,
)
from heterofold_hub.hub.local import git

REPO = "tester/pair-adapter"
TOKEN = "test-token"
WEIGHTS = "adapter_model.safetensors"
PACKAGE_DIR = Path(heterofold_hub.__file__).parent
# Child processes load heterofold_hub.hub without running heterofold_hub/__init__.py (torch + transformers,
# several seconds): the whole file must stay under 30 s.
CHILD_PRELUDE = textwrap.dedent(f"""
    import sys, types
    package = types.ModuleType("heterofold_hub")
    package.__path__ = [{str(PACKAGE_DIR)!r}]
    sys.modules["heterofold_hub"] = package
""")



@pytest.fixture(params=["local", "remote"])
def hub(request, tmp_path):
    """Each hub kind, empty: a LocalHub folder, or a RemoteHub on a fresh loopback server and cache."""
    if request.param == "local":
        return LocalHub(tmp_path / "local")
    server = request.getfixturevalue("loopback_hub")
    return RemoteHub(server.url, token=TOKEN, cache_dir=tmp_path / "cache")


@pytest.fixture
def fast_retries(monkeypatch):
    """The client waits 1 s before each of its 5 resume attempts; keep the waits short."""
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda seconds: real_sleep(min(seconds, 0.01)))


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b"")


def write_adapter(folder: Path, scale: float, *, extra: str | None = None, shape=(8, 16)) -> dict[str, bytes]:
    """An adapter folder (real safetensors weights, JSON config, README, plot); returns its files' bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"proj.weight": torch.full(shape, scale)}, folder / WEIGHTS)
    (folder / "adapter_config.json").write_text(json.dumps({"rank": 4, "scale": scale}))
    (folder / "README.md").write_text(f"# Pair adapter, scale {scale}\n")
    (folder / "loss.png").write_bytes(tiny_png())
    if extra:
        (folder / extra).write_text("{}")
    return files_of(folder)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def child_command(code: str, *args) -> list[str]:
    """A python command running ``code`` (with ``sys.argv[1:] == args``) in a fresh process."""
    return [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code), *map(str, args)]


# -- both hubs --------------------------------------------------------------------------------------------
def test_publish_and_download_each_version_exact_bytes(hub, tmp_path):
    v1 = write_adapter(tmp_path / "v1", 1.0)
    v2 = write_adapter(tmp_path / "v2", 2.0, extra="tokenizer_map.json")
    (tmp_path / "v2" / "README.md").unlink()  # a file dropped in v1.1.0 must not linger in its snapshot
    del v2["README.md"]

    first = hub.publish(REPO, tmp_path / "v1", version="v1.0.0", message="first")
    second = hub.publish(REPO, tmp_path / "v2", version="v1.1.0")
    assert isinstance(first, PublishedVersion) and (first.repo_id, first.version) == (REPO, "v1.0.0")
    assert len(first.commit) == 40 and first.commit != second.commit

    assert files_of(hub.download(REPO, version="v1.0.0")) == v1
    assert files_of(hub.download(REPO, version="v1.1.0")) == v2
    assert files_of(hub.download(REPO)) == v2  # latest
    weights = load_file(hub.download(REPO, version="v1.0.0") / WEIGHTS)["proj.weight"]
    assert torch.equal(weights, torch.full((8, 16), 1.0))
    assert hub.download(REPO, version="v1.0.0") == hub.download(REPO, version="v1.0.0")  # reused, not re-fetched
    assert hub.versions(REPO) == ["v1.0.0", "v1.1.0"]


def test_versions_sorted_numerically_and_latest(hub, tmp_path):
    for version, scale in (("v1.9.0", 9.0), ("v1.10.0", 10.0), ("v1.2.0", 2.0)):
        write_adapter(tmp_path / version, scale)
        hub.publish(REPO, tmp_path / version, version=version)
    assert hub.versions(REPO) == ["v1.2.0", "v1.9.0", "v1.10.0"]
    assert files_of(hub.download(REPO)) == files_of(tmp_path / "v1.10.0")
    assert hub.exists(REPO) and not hub.exists("tester/missing")


def test_a_prerelease_is_kept_and_pinned_but_never_resolved_by_default(hub, tmp_path):
    for version, scale in (("v1.4.0-rc.2", 4.2), ("v1.3.0", 3.0), ("v1.4.0-rc.1", 4.1)):
        write_adapter(tmp_path / version, scale)
        hub.publish(REPO, tmp_path / version, version=version)
    assert hub.versions(REPO) == ["v1.3.0", "v1.4.0-rc.1", "v1.4.0-rc.2"]
    assert hub.latest(REPO) == "v1.3.0"
    assert files_of(hub.download(REPO)) == files_of(tmp_path / "v1.3.0")  # not the newer candidates
    assert files_of(hub.download(REPO, version="v1.4.0-rc.1")) == files_of(tmp_path / "v1.4.0-rc.1")
    # Offline, the default is the newest release in the cache too (the remote hub reads its cache's refs).
    assert files_of(hub.download(REPO, local_files_only=True)) == files_of(tmp_path / "v1.3.0")
    with pytest.raises(HubError, match=r"v1\.4\.0-rc\.1 of tester/pair-adapter is already published.*v1\.4\.0-rc\.3"):
        hub.publish(REPO, tmp_path / "v1.3.0", version="v1.4.0-rc.1")
    assert files_of(hub.download(REPO, version="v1.4.0-rc.1")) == files_of(tmp_path / "v1.4.0-rc.1")

    write_adapter(tmp_path / "v1.4.0", 4.0)
    hub.publish(REPO, tmp_path / "v1.4.0", version="v1.4.0")  # the release sorts after its candidates
    assert hub.versions(REPO)[-1] == "v1.4.0" and files_of(hub.download(REPO)) == files_of(tmp_path / "v1.4.0")


def test_a_repo_of_only_prereleases_names_them_and_how_to_pin_one(hub, tmp_path):
    write_adapter(tmp_path / "rc", 1.0)
    hub.publish(REPO, tmp_path / "rc", version="v1.0.0-rc.1")
    with pytest.raises(HubError, match=r"only pre-release versions \(v1\.0\.0-rc\.1\).*"
                                       r"tester/pair-adapter@v1\.0\.0-rc\.1"):
        hub.download(REPO)
    assert files_of(hub.download(REPO, version="v1.0.0-rc.1")) == files_of(tmp_path / "rc")


def test_republishing_a_version_is_refused_and_keeps_the_original(hub, tmp_path):
    original = write_adapter(tmp_path / "adapter", 1.0)
    hub.publish(REPO, tmp_path / "adapter", version="v1.0.0")
    write_adapter(tmp_path / "adapter", 5.0)
    with pytest.raises(HubError, match=r"v1\.0\.0 of tester/pair-adapter is already published.*bump the version"):
        hub.publish(REPO, tmp_path / "adapter", version="v1.0.0")
    assert hub.versions(REPO) == ["v1.0.0"]
    assert files_of(hub.download(REPO, version="v1.0.0")) == original  # first download: read from the repo


def test_download_of_missing_repo_or_version_explains(hub, tmp_path):
    with pytest.raises(HubError, match="tester/missing not found"):
        hub.download("tester/missing")
    write_adapter(tmp_path / "adapter", 1.0)
    hub.publish(REPO, tmp_path / "adapter", version="v1.0.0")
    with pytest.raises(HubError, match=r"v9\.9\.9 of tester/pair-adapter not found.*published versions: v1\.0\.0"):
        hub.download(REPO, version="v9.9.9")


# -- id and version rules ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../x", "/abs/x", "a/b/c", "a", "a/b c", "a\\b", "a/..b", "-a/b", "a/" + "b" * 97])
def test_bad_repo_ids_are_refused_everywhere(bad, tmp_path):
    with pytest.raises(HubError) as error:
        validate_repo_id(bad)
    assert repr(bad) in str(error.value) and "namespace/name" in str(error.value)
    write_adapter(tmp_path / "adapter", 1.0)
    local = LocalHub(tmp_path / "local")
    remote = RemoteHub("http://127.0.0.1:9", token=TOKEN, cache_dir=tmp_path / "cache")  # never contacted
    for call in (lambda: local.publish(bad, tmp_path / "adapter", version="v1.0.0"),
                 lambda: local.download(bad), lambda: remote.download(bad),
                 lambda: remote.publish(bad, tmp_path / "adapter", version="v1.0.0")):
        with pytest.raises(HubError, match="Invalid repo id"):
            call()
    assert not (tmp_path / "local").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("bad", ["1.0", "v1", "latest", "1.0.0", "v1.0", "v01.0.0", "V1.0.0", "v1.0.0-rc1",
                                 "v1.0.0-rc.0", "v1.0.0-rc.01", "v1.0.0-beta.1", "v1.0.0-rc.1.2"])
def test_bad_versions_are_refused_everywhere(bad, tmp_path):
    with pytest.raises(HubError) as error:
        validate_version(bad)
    assert repr(bad) in str(error.value) and "vMAJOR.MINOR.PATCH" in str(error.value)
    write_adapter(tmp_path / "adapter", 1.0)
    remote = RemoteHub("http://127.0.0.1:9", token=TOKEN, cache_dir=tmp_path / "cache")
    for hub in (LocalHub(tmp_path / "local"), remote):
        with pytest.raises(HubError, match="Invalid version"):
            hub.publish(REPO, tmp_path / "adapter", version=bad)
        with pytest.raises(HubError, match="Invalid version"):
            hub.download(REPO, version=bad)


def test_good_ids_versions_and_hub_selection(tmp_path, monkeypatch):
    for good in ("tester/pair-adapter", "A1/b.c_d-e", "x/" + "y" * 96):
        assert validate_repo_id(good) == good
    assert sorted(["v1.10.0", "v1.9.0", "v0.0.1", "v2.0.0"], key=version_key) == [
        "v0.0.1", "v1.9.0", "v1.10.0", "v2.0.0"]
    assert sorted(["v2.0.0", "v2.0.0-rc.10", "v1.9.0", "v2.0.0-rc.2"], key=version_key) == [
        "v1.9.0", "v2.0.0-rc.2", "v2.0.0-rc.10", "v2.0.0"]  # semver: candidates before their release

    monkeypatch.setenv("HF_FOLD_HOME", str(tmp_path / "home"))
    assert get_hub().root == tmp_path / "home" and get_hub("local", hub_dir=tmp_path / "x").root == tmp_path / "x"
    assert get_hub("hf").endpoint == "https://huggingface.co"
    remote = get_hub("http://127.0.0.1:1234/", token=TOKEN, hub_dir=tmp_path / "c")
    assert isinstance(remote, RemoteHub) and remote.endpoint == "http://127.0.0.1:1234"
    with pytest.raises(HubError, match="Unknown hub 'ftp://x'"):
        get_hub("ftp://x")
    with pytest.raises(HubError, match="adapter folders are flat"):
        (tmp_path / "nested" / "sub").mkdir(parents=True)
        LocalHub(tmp_path / "local").publish(REPO, tmp_path / "nested", version="v1.0.0")


# -- LocalHub: races and crashes --------------------------------------------------------------------------
PUBLISH_AT = """
    import time
    from heterofold_hub.hub import HubError, LocalHub
    root, folder, start = sys.argv[1:4]
    while time.time() < float(start):  # both publishers start at the same instant
        pass
    try:
        print("won", LocalHub(root).publish({repo!r}, folder, version="v1.0.0").commit)
    except HubError as error:
        print("lost", error)
"""


def test_local_concurrent_publish_of_one_version_has_one_winner(tmp_path):
    root = tmp_path / "local"
    folders = {name: write_adapter(tmp_path / name, scale) for name, scale in (("a", 1.0), ("b", 2.0))}
    start = str(time.time() + 1.5)  # after both children have imported
    children = {name: subprocess.Popen(child_command(PUBLISH_AT.format(repo=REPO), root, tmp_path / name, start),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name in folders}
    results = {name: child.communicate(timeout=60) for name, child in children.items()}
    outcomes = {name: out.split(" ", 1) for name, (out, err) in results.items()}
    assert sorted(kind for kind, _ in outcomes.values()) == ["lost", "won"], results
    winner = next(name for name, (kind, _) in outcomes.items() if kind == "won")
    loser_message = next(text for kind, text in outcomes.values() if kind == "lost")
    assert "already published" in loser_message or "in progress" in loser_message

    hub = LocalHub(root)
    assert hub.versions(REPO) == ["v1.0.0"]
    assert files_of(hub.download(REPO, version="v1.0.0")) == folders[winner]  # the whole tree, one publisher's
    assert git("rev-parse", "v1.0.0^{commit}", repo=hub.repo_path(REPO)) == outcomes[winner][1].strip()


HOLD_LOCK_AND_DIE = """
    import time
    from heterofold_hub.hub import LocalHub
    from heterofold_hub.hub.base import adapter_files
    hub = LocalHub(sys.argv[1])
    with hub.publish_lock({repo!r}):  # everything a publish does before it tags, then "crash"
        repo = hub._ensure_repo({repo!r})
        print(hub._commit_files(repo, adapter_files(sys.argv[2]), "never tagged"), flush=True)
        time.sleep(60)
"""


def test_local_publish_killed_midway_leaves_no_version_and_no_stuck_lock(tmp_path):
    root = tmp_path / "local"
    files = write_adapter(tmp_path / "adapter", 1.0)
    child = subprocess.Popen(child_command(HOLD_LOCK_AND_DIE.format(repo=REPO), root, tmp_path / "adapter"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        orphan = child.stdout.readline().strip()
        assert len(orphan) == 40, child.stderr.read()
        with pytest.raises(HubError, match=rf"Another publish of {REPO} is in progress \(pid {child.pid}") as busy:
            LocalHub(root, lock_timeout=0.2).publish(REPO, tmp_path / "adapter", version="v1.0.0")
        assert busy.value.retryable
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()

    hub = LocalHub(root, lock_timeout=2.0)
    repo = hub.repo_path(REPO)
    assert git("cat-file", "-t", orphan, repo=repo) == "commit"  # it got as far as the commit...
    assert hub.versions(REPO) == [] and git("tag", "--list", repo=repo) == ""  # ...but no version exists
    published = hub.publish(REPO, tmp_path / "adapter", version="v1.0.0")  # the dead pid's lock does not block
    assert files_of(hub.download(REPO, version="v1.0.0")) == files
    assert git("rev-parse", "refs/heads/main", repo=repo) == published.commit
    assert (root / "locks" / f"{REPO}.lock").read_text().strip() == str(os.getpid())


# -- RemoteHub: races, dropped connections, offline -------------------------------------------------------
def test_remote_concurrent_publish_of_one_version_has_one_winner(loopback_hub, tmp_path):
    folders = {name: write_adapter(tmp_path / name, scale) for name, scale in (("a", 1.0), ("b", 2.0))}
    RemoteHub(loopback_hub.url, token=TOKEN).api.create_repo(REPO)
    outcomes, barrier = {}, threading.Barrier(2)

    def publish(name):
        barrier.wait()
        try:
            outcomes[name] = RemoteHub(loopback_hub.url, token=TOKEN).publish(REPO, tmp_path / name, version="v1.0.0")
        except HubError as error:
            outcomes[name] = error

    threads = [threading.Thread(target=publish, args=(name,)) for name in folders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [name for name, outcome in outcomes.items() if isinstance(outcome, PublishedVersion)]
    assert len(winners) == 1 and len(outcomes) == 2, outcomes
    hub = RemoteHub(loopback_hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
    assert files_of(hub.download(REPO, version="v1.0.0")) == folders[winners[0]]


def test_remote_tag_taken_after_the_check_is_refused(loopback_hub, tmp_path):
    """The narrowest race: a rival tags the version between our commit and our create_tag (server answers 409)."""
    write_adapter(tmp_path / "rival", 1.0)
    write_adapter(tmp_path / "ours", 2.0)
    rival = RemoteHub(loopback_hub.url, token=TOKEN).publish(REPO, tmp_path / "rival", version="v0.1.0")

    class RacedHub(RemoteHub):
        def _check_tree(self, repo_id, version, commit, files):
            super()._check_tree(repo_id, version, commit, files)
            self.api.create_tag(repo_id, tag=version, revision=rival.commit)  # the rival wins the tag

    with pytest.raises(HubError, match="v1.0.0 of tester/pair-adapter was published by someone else"):
        RacedHub(loopback_hub.url, token=TOKEN).publish(REPO, tmp_path / "ours", version="v1.0.0")
    refs = RemoteHub(loopback_hub.url, token=TOKEN).api.list_repo_refs(REPO)
    assert {tag.name: tag.target_commit for tag in refs.tags}["v1.0.0"] == rival.commit


def test_remote_connection_dropped_mid_download_is_retryable(loopback_hub, tmp_path, fast_retries):
    files = write_adapter(tmp_path / "adapter", 1.0, shape=(64, 64))
    hub = RemoteHub(loopback_hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
    hub.publish(REPO, tmp_path / "adapter", version="v1.0.0")
    loopback_hub.kill_after("GET", "/resolve/", after_bytes=len(files[WEIGHTS]) // 2)

    with pytest.raises(HubError, match="retry") as dropped:
        hub.download(REPO, version="v1.0.0")
    assert dropped.value.retryable
    storage = tmp_path / "cache" / "models--tester--pair-adapter"
    cached = {p.name: p.read_bytes() for p in storage.glob("snapshots/*/*") if p.exists()}
    assert WEIGHTS not in cached and all(files[name] == data for name, data in cached.items())  # no half file
    assert not list(storage.glob("blobs/*.incomplete"))

    loopback_hub.heal()
    assert files_of(hub.download(REPO, version="v1.0.0")) == files


OFFLINE_LOAD = """
    import hashlib, json
    from heterofold_hub.hub import HubError, RemoteHub
    hub = RemoteHub(sys.argv[1], cache_dir=sys.argv[2])
    folder = hub.download({repo!r}, version="v1.0.0", local_files_only=True)
    latest = hub.download({repo!r})  # HF_HUB_OFFLINE=1: the newest version in the cache
    try:
        hub.download({repo!r}, version="v1.1.0")
        missing = "downloaded?!"
    except HubError as error:
        missing = str(error)
    print(json.dumps({{"files": {{p.name: p.read_bytes().hex() for p in folder.iterdir()}},
                      "same": folder == latest, "missing": missing}}))
"""


def test_remote_offline_reload_from_cache_in_a_fresh_process(loopback_hub, tmp_path):
    files = write_adapter(tmp_path / "v1", 1.0)
    write_adapter(tmp_path / "v2", 2.0)
    hub = RemoteHub(loopback_hub.url, token=TOKEN, cache_dir=tmp_path / "cache")
    hub.publish(REPO, tmp_path / "v1", version="v1.0.0")
    hub.publish(REPO, tmp_path / "v2", version="v1.1.0")
    hub.download(REPO, version="v1.0.0")  # only v1.0.0 reaches the cache
    url = loopback_hub.url
    loopback_hub.stop()  # nothing answers any more

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    env.pop("HF_ENDPOINT", None)
    command = child_command(OFFLINE_LOAD.format(repo=REPO), url, tmp_path / "cache")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert {name: bytes.fromhex(data) for name, data in report["files"].items()} == files
    assert report["same"] and "v1.1.0" in report["missing"] and "not in the local cache" in report["missing"]

    # Online mode with the server gone and nothing cached: a retryable error, not a crash.
    with pytest.raises(HubError, match="retry") as unreachable:
        RemoteHub(url, token=TOKEN, cache_dir=tmp_path / "fresh").download(REPO, version="v1.0.0")
    assert unreachable.value.retryable
