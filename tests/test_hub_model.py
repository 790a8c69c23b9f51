"""HeteroFoldModel.from_pretrained through registry.json, push/pull round trips on the embedded hub and on the
loopback Hub server, wrong pairs refused, the prefill fallback, and the browsing commands."""

import json
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.hub import LocalHub, RemoteHub
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.base_models.loading import Side, load_model, resolve
from heterofold_hub.hub.publishing import push_package
from heterofold_hub.hub.registry import NoAdapterError, Registry, load_default_registry
from heterofold_hub.hub.resolve import fetch, pair_end, resolve_adapter
from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.save_and_load import check_pair, save_adapter
from heterofold_hub.zoo import DEMO_PAIR

from helpers import ROOT, hf_fold

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
Q2L = "heterofold/tiny-qwen-code-to-tiny-llama-code"
TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"


def shipped_package(repo_id: str, tmp_path: Path) -> Path:
    """A copy of a shipped adapter version as a plain package folder (the files `hf-fold train` writes)."""
    registry = load_default_registry()
    folder = LocalHub(registry.path.parent / "hub").download(repo_id, version="v1.0.0")
    package = tmp_path / repo_id.split("/")[1]
    package.mkdir()
    for name in ("adapter_config.json", "adapter.safetensors", "metrics.json"):
        shutil.copyfile(folder / name, package / name)
    return package


@pytest.mark.parametrize("sender,receiver,repo_id", [(*DEMO_PAIR, L2Q), (*DEMO_PAIR[::-1], Q2L)])
def test_from_pretrained_resolves_the_shipped_adapter_and_generates(sender, receiver, repo_id):
    model = HeteroFoldModel.from_pretrained(sender, receiver, load_sender=True, local_files_only=True)
    assert (model.resolved.repo_id, model.resolved.version) == (repo_id, "v1.1.0")  # the newest
    assert model.resolved.metrics["recovered"] > 0.8
    with torch.no_grad():
        cache = model.sender.model(**model.sender.tokenizer(TEXT, return_tensors="pt"), use_cache=True).cache
    result = model.transfer(cache, TEXT)
    assert not result.prefilled
    assert result.cache.layers[0].keys.shape[2] == len(model.receiver.tokenizer(TEXT).input_ids) - 1
    assert model.generate(result, max_new_tokens=6, min_new_tokens=6, do_sample=False).shape == (1, 6)


def test_shipped_v1_1_0_records_the_weights_hash_and_v1_0_0_stays_pinnable():
    """v1.1.0 re-published v1.0.0's weights and metrics with the weights hash in the config; v1.0.0 is unchanged
    (no recorded hash, still loads) and still resolves when pinned."""
    registry = load_default_registry()
    for entry in (e for e in registry.entries() if e.repo_id in (L2Q, Q2L)):
        old, new = entry.versions
        assert (old.version, new.version) == ("v1.0.0", "v1.1.0")
        assert all(old.files[name] == new.files[name] for name in ("adapter.safetensors", "metrics.json"))
        assert load_adapter(fetch(registry, entry, new)).config.weights_sha256 == new.files["adapter.safetensors"]
        assert load_adapter(fetch(registry, entry, old)).config.weights_sha256 is None
    pinned = HeteroFoldModel.from_pretrained(*DEMO_PAIR, revision="v1.0.0", local_files_only=True)
    assert (pinned.resolved.repo_id, pinned.resolved.version) == (L2Q, "v1.0.0")


def test_default_load_maps_a_cache_from_a_sender_it_never_loaded():
    """The app-code default (``load_sender=False``): the sender's cache comes from another process or
    agent; its RoPE is rebuilt from the sender's config and the result equals a loaded sender's."""
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, local_files_only=True)
    assert model.sender.model is None
    sender = Side.load(DEMO_PAIR[0])
    with torch.no_grad():
        cache = sender.model(**sender.tokenizer(TEXT, return_tensors="pt"), use_cache=True).cache
    result = model.transfer(cache, TEXT)
    loaded = HeteroFoldModel.from_pretrained(*DEMO_PAIR, load_sender=True, local_files_only=True).transfer(cache, TEXT)
    for a, b in zip(result.cache.layers, loaded.cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_map_dtype_narrows_only_the_adapter():
    """``map_dtype=torch.bfloat16``: the adapter's products in bf16, the receiver and its cache float32, and the
    cache close to the float32 map's; a dtype that is not one is refused before anything is mapped."""
    sender = Side.load(DEMO_PAIR[0])
    with torch.no_grad():
        cache = sender.model(**sender.tokenizer(TEXT, return_tensors="pt"), use_cache=True).cache
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, map_dtype=torch.bfloat16, local_files_only=True)
    assert model.adapter.compute_dtype == torch.bfloat16 and model.receiver.model.dtype == torch.float32
    full = HeteroFoldModel.from_pretrained(*DEMO_PAIR, local_files_only=True).transfer(cache, TEXT)
    for a, b in zip(model.transfer(cache, TEXT).cache.layers, full.cache.layers):
        assert a.keys.dtype == torch.float32 and not torch.equal(a.keys, b.keys)
        assert (a.keys - b.keys).abs().max() < 0.1 * b.keys.abs().max()
    with pytest.raises(HeteroFoldError, match="map_dtype='bf16'"):
        HeteroFoldModel.from_pretrained(*DEMO_PAIR, map_dtype="bf16", local_files_only=True)


def test_local_paths_and_loaded_models_resolve_by_fingerprint():
    """A local copy of a registered model is matched on tokenizer fingerprint and KV layout, not on its id."""
    folders = [str(resolve(name)) for name in DEMO_PAIR]
    by_path = HeteroFoldModel.from_pretrained(*folders)
    assert by_path.resolved.repo_id == L2Q
    receiver = load_model(folders[1])  # a loaded transformers model
    by_model = HeteroFoldModel.from_pretrained(folders[0], receiver)
    assert by_model.resolved.repo_id == L2Q and by_model.receiver.model is receiver


def test_an_adapter_for_another_pair_is_refused_naming_both_sides(tmp_path):
    q2l = shipped_package(Q2L, tmp_path)
    with pytest.raises(PairMismatchError) as err:
        HeteroFoldModel.from_pretrained(*DEMO_PAIR, adapter=q2l)
    message = str(err.value)
    assert "heterofold/tiny-qwen-code -> heterofold/tiny-llama-code" in message  # what the adapter was fitted for
    assert f"{DEMO_PAIR[0]} -> {DEMO_PAIR[1]}" in message  # what was asked


def test_a_changed_tokenizer_is_not_resolved(tmp_path):
    data = json.loads(load_default_registry().path.read_text())
    for entry in data["adapters"]:
        entry["receiver"]["tokenizer"] = "sha256:" + "0" * 64  # as if the receiver's tokenizer had changed
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NoAdapterError) as err:
        HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=path)
    assert "sha256:000000000000" in str(err.value) and "the loaded receiver has sha256:" in str(err.value)


def test_a_different_revision_is_refused_naming_both():
    sender, receiver = Side.load(DEMO_PAIR[0]), Side.load(DEMO_PAIR[1])
    adapter = resolve_adapter(sender, receiver).adapter
    adapter.config = replace(adapter.config, receiver_revision="a" * 40)  # fitted on one revision...
    receiver.model.config._commit_hash = "b" * 40  # ...loaded at another
    with pytest.raises(PairMismatchError) as err:
        check_pair(adapter, sender, receiver, source="test")
    assert "a" * 40 in str(err.value) and "b" * 40 in str(err.value)
    # The registry refuses the same way when both revisions are recorded.
    entry = load_default_registry().pairs_for(receiver_id=DEMO_PAIR[1])[0]
    registry = Registry([replace(entry, receiver=replace(entry.receiver, revision="a" * 40))])
    with pytest.raises(NoAdapterError) as miss:
        registry.find(pair_end(sender), replace(pair_end(receiver), revision="b" * 40))
    assert "revision " + "a" * 40 in str(miss.value) and "b" * 40 in str(miss.value)


def test_no_adapter_falls_back_to_prefill_only_when_asked(pair_dirs):
    sender, receiver = str(pair_dirs / "sender"), str(pair_dirs / "receiver")
    with pytest.raises(NoAdapterError, match="hf-fold train --sender"):
        HeteroFoldModel.from_pretrained(sender, receiver)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = HeteroFoldModel.from_pretrained(sender, receiver, fallback="prefill")
    assert any("prefill" in str(w.message) for w in caught)
    batch = model.transfer(None, [TEXT, TEXT[:20]])
    assert batch.prefilled and batch.input_ids.shape[0] == 2
    assert model.generate(batch, max_new_tokens=3, min_new_tokens=3, do_sample=False).shape == (2, 3)
    # The fallback cache continues exactly like the receiver's own prefill of the same text.
    result = model.transfer(None, TEXT)
    ids = model.receiver.tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        native = model.receiver.model(input_ids=ids).logits[0, -1]
        step = model.receiver.model(input_ids=result.input_ids[:1, -1:], cache=result.cache,
                                    attention_mask=result.attention_mask).logits[0, -1]
    torch.testing.assert_close(step, native, atol=1e-4, rtol=1e-4)


@pytest.fixture(params=["embedded", "remote"])
def target_hub(request, tmp_path):
    if request.param == "embedded":
        return LocalHub(tmp_path / "hub")
    return RemoteHub(request.getfixturevalue("loopback_hub").url, token="test-token", cache_dir=tmp_path / "cache")


def test_push_then_pull_round_trip_versions_and_pinning(target_hub, tmp_path):
    package = shipped_package(L2Q, tmp_path)
    registry = Registry.empty(tmp_path / "registry.json")
    repo_id = "tester/l2q"
    push_package(package, repo_id=repo_id, version="1.0.0", hub=target_hub, registry=registry)
    with pytest.raises(Exception, match="already published"):
        push_package(package, repo_id=repo_id, version="v1.0.0", hub=target_hub, registry=registry)
    push_package(package, repo_id=repo_id, version="1.1.0", hub=target_hub, registry=registry)

    reloaded = Registry.load(tmp_path / "registry.json")
    assert [v.version for v in reloaded.entries()[0].versions] == ["v1.0.0", "v1.1.0"]
    for version in ("v1.0.0", "v1.1.0"):
        folder = Path(target_hub.download(repo_id, version=version))
        for name in ("adapter_config.json", "adapter.safetensors", "metrics.json"):
            assert (folder / name).read_bytes() == (package / name).read_bytes()
        card = (folder / "README.md").read_text()
        assert f"# {repo_id}" in card and version in card
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=reloaded, adapter=repo_id, revision="v1.0.0",
                                            hub_dir=None if isinstance(target_hub, LocalHub) else tmp_path / "cache")
    assert (model.resolved.repo_id, model.resolved.version) == (repo_id, "v1.0.0")


def test_push_to_hub_then_offline_load_in_a_fresh_process(loopback_hub, tmp_path):
    """Push to a Hub-compatible server, pull once, stop the server: HF_HUB_OFFLINE=1 still loads it."""
    registry, cache = tmp_path / "registry.json", tmp_path / "cache"
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR)
    model.push_to_hub("tester/l2q", version="1.0.0", hub=loopback_hub.url, token="test-token", registry=registry)
    assert Registry.load(registry).entries()[0].hub == loopback_hub.url
    online = HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=registry, hub_dir=cache)
    assert online.resolved.repo_id == "tester/l2q"
    loopback_hub.stop()
    code = (f"from heterofold_hub import HeteroFoldModel; m = HeteroFoldModel.from_pretrained("
            f"{DEMO_PAIR[0]!r}, {DEMO_PAIR[1]!r}, registry={str(registry)!r}, hub_dir={str(cache)!r}, "
            f"local_files_only=True); print(m.resolved.repo_id, m.resolved.version)")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["tester/l2q", "v1.0.0"]


def test_tampered_weights_are_refused(tmp_path):
    registry_path = tmp_path / "registry.json"
    hub = LocalHub(tmp_path / "hub")
    push_package(shipped_package(L2Q, tmp_path), repo_id="tester/l2q", version="1.0.0", hub=hub,
                 registry=Registry.empty(registry_path))
    weights = hub.download("tester/l2q", version="v1.0.0") / "adapter.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])  # truncated on disk after download
    with pytest.raises(Exception, match="corrupt or was altered"):
        HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=registry_path, adapter="tester/l2q")


def test_cli_push_list_show_search_pull(tmp_path):
    package = shipped_package(Q2L, tmp_path)
    registry, hub = str(tmp_path / "registry.json"), str(tmp_path / "hub")
    run = hf_fold("push", str(package), "--repo", "tester/q2l", "--version", "2.0.0", "--hub-dir", hub, "--registry", registry)
    assert run.returncode == 0, run.stdout + run.stderr
    listed = hf_fold("list", "--registry", registry, "--family", "qwen2")
    assert listed.returncode == 0 and "tester/q2l" in listed.stdout and "v2.0.0" in listed.stdout
    assert "tester/q2l" not in hf_fold("list", "--registry", registry, "--method", "kv-ridge").stdout
    shown = hf_fold("show", "tester/q2l@2.0.0", "--registry", registry)
    assert shown.returncode == 0 and "adapter.safetensors" in shown.stdout and "v2.0.0" in shown.stdout
    assert "tester/q2l" in hf_fold("search", "TINY-QWEN", "--registry", registry).stdout
    out = tmp_path / "pulled"
    pulled = hf_fold("pull", "tester/q2l@2.0.0", "--out", str(out), "--hub-dir", hub, "--registry", registry)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert (out / "adapter.safetensors").read_bytes() == (package / "adapter.safetensors").read_bytes()
    again = hf_fold("push", str(package), "--repo", "tester/q2l", "--version", "2.0.0", "--hub-dir", hub, "--registry", registry)
    assert again.returncode == 1 and "already published" in again.stderr and "Traceback" not in again.stderr


def test_a_push_with_a_stale_registry_keeps_the_other_entries(tmp_path):
    """Two pushers that loaded registry.json before either wrote: the second must not drop the first's entry
    (push re-reads the file under a lock before it adds its version)."""
    package = shipped_package(L2Q, tmp_path)
    path, hub = tmp_path / "registry.json", LocalHub(tmp_path / "hub")
    first, second = Registry.empty(path), Registry.empty(path)  # both loaded while the file did not exist
    push_package(package, repo_id="tester/l2q-a", version="1.0.0", hub=hub, registry=first)
    push_package(package, repo_id="tester/l2q-b", version="1.0.0", hub=hub, registry=second)
    assert [e.repo_id for e in Registry.load(path).entries()] == ["tester/l2q-a", "tester/l2q-b"]


def test_shipped_registry_lists_both_directions():
    run = hf_fold("list")
    assert run.returncode == 0 and L2Q in run.stdout and Q2L in run.stdout
    assert load_default_registry().path == ROOT / "registry.json"


def test_list_show_and_search_serve_scripts():
    """--json parses as the registry's own records; piped output is one tab-separated line per adapter with whole
    ids, so `hf-fold list | grep tiny-qwen-code` finds them."""
    listed = json.loads(hf_fold("list", "--json").stdout)
    assert {L2Q, Q2L} <= {e["repo_id"] for e in listed}
    lines = [line.split("\t") for line in hf_fold("list").stdout.splitlines()]
    assert {(L2Q, *DEMO_PAIR), (Q2L, *DEMO_PAIR[::-1])} <= {(row[0], row[2], row[3]) for row in lines}
    shown = json.loads(hf_fold("show", f"{L2Q}@1.0.0", "--json").stdout)
    assert shown["repo_id"] == L2Q and [v["version"] for v in shown["versions"]] == ["v1.0.0"]
    found = json.loads(hf_fold("search", "tiny-qwen", "--json").stdout)
    assert {L2Q, Q2L} <= {e["repo_id"] for e in found}


def test_a_pushed_prerelease_is_listed_and_pulled_only_when_pinned(tmp_path):
    package = shipped_package(L2Q, tmp_path)
    registry, hub = str(tmp_path / "registry.json"), str(tmp_path / "hub")
    for version in ("1.0.0", "1.1.0-rc.1"):
        run = hf_fold("push", str(package), "--repo", "tester/l2q", "--version", version, "--hub-dir", hub,
                      "--registry", registry)
        assert run.returncode == 0, run.stdout + run.stderr
    listed = hf_fold("list", "--registry", registry).stdout
    assert "v1.0.0" in listed and "rc" not in listed  # the version a user resolves
    shown = hf_fold("show", "tester/l2q", "--registry", registry).stdout
    assert "v1.1.0-rc.1 (pre-release: pin it)" in shown
    default = hf_fold("pull", "tester/l2q", "--hub-dir", hub, "--registry", registry)
    pinned = hf_fold("pull", "tester/l2q@1.1.0-rc.1", "--hub-dir", hub, "--registry", registry)
    assert default.stdout.startswith("tester/l2q v1.0.0:") and pinned.stdout.startswith("tester/l2q v1.1.0-rc.1:")

    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=registry, hub_dir=hub)
    assert (model.resolved.repo_id, model.resolved.version) == ("tester/l2q", "v1.0.0")
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=registry, hub_dir=hub, revision="v1.1.0-rc.1")
    assert model.resolved.version == "v1.1.0-rc.1"


RECOMMENDED = {"recompute": 0.25, "select": "tail", "repair_layers": 0}


def test_a_release_pushed_with_a_prereleases_files_takes_its_evaluations(tmp_path):
    package = shipped_package(L2Q, tmp_path)
    registry_path, hub = tmp_path / "registry.json", LocalHub(tmp_path / "hub")
    push_package(package, repo_id="tester/l2q", version="1.1.0-rc.1", hub=hub, registry=Registry.empty(registry_path))
    registry = Registry.load(registry_path)
    registry.add_evaluation(repo_id="tester/l2q", version="v1.1.0-rc.1", evaluation={
        "task": "retrieval-handoff", "data": "bundled:unseen", "date": "2026-12-07T00:00:00+00:00",
        "commit": "ab" * 20, "command": "a hand-off run", "results": {"kept_code_512": 0.95},
        "recommended": RECOMMENDED})
    registry.save()

    other = tmp_path / "other"  # another package (other weights) released as 1.0.0: nothing to take
    shutil.copytree(package, other)
    nudged = load_adapter(package)
    with torch.no_grad():
        for p in nudged.parameters():
            p.mul_(2)
    save_adapter(nudged, other)
    assert push_package(other, repo_id="tester/l2q", version="1.0.0", hub=hub, registry=registry_path).evaluations_from is None

    run = hf_fold("push", str(package), "--repo", "tester/l2q", "--version", "1.1.0", "--hub-dir", str(hub.root),
                  "--registry", str(registry_path))
    assert run.returncode == 0, run.stderr
    assert "v1.1.0 took the evaluations of v1.1.0-rc.1" in run.stderr
    versions = {v.version: v for v in Registry.load(registry_path).entries()[0].versions}
    assert versions["v1.1.0"].evaluations == versions["v1.1.0-rc.1"].evaluations and not versions["v1.0.0"].evaluations
    model = HeteroFoldModel.from_pretrained(*DEMO_PAIR, registry=registry_path, hub_dir=hub.root)
    assert model.resolved.version == "v1.1.0" and model.resolved.recommended == RECOMMENDED
