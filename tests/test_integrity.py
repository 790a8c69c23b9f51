"""Integrity of adapter packages and of the registry's view of the hub: every bad file is refused with a clear
error naming the file and the fix; weights are never unpickled and remote code never runs."""

from __future__ import annotations

import ast
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file, save_file

from heterofold_hub.commands.hub import run_push
from heterofold_hub.errors import HeteroFoldError, IntegrityError
from heterofold_hub.hub import HubError, LocalHub, RemoteHub
from heterofold_hub.methods import get_method
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.base_models.loading import load_model, load_tokenizer
from heterofold_hub.hub.publishing import push_package
from heterofold_hub.hub.registry import PairEnd, Registry
from heterofold_hub.hub.resolve import fetch, sha256_file
from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.config import CONFIG_NAME, WEIGHTS_NAME
from heterofold_hub.adapter.save_and_load import save_adapter, sha256_bytes

from helpers import ROOT

SPEC = dict(model_type="llama", rope="rotate_half", max_positions=512)


def make_package(folder: Path, seed: int = 0, **config) -> Path:
    """A real heterofold package: 3 sender layers -> 2 receiver layers, in_features 2x2x8=32, out_features 16."""
    torch.manual_seed(seed)
    adapter = get_method("heterofold")(AdapterConfig(
        method="heterofold", sender="tester/send", receiver="tester/recv", layer_sources=[[0, 1], [1, 2]],
        sender_spec={**SPEC, "num_layers": 3, "kv_heads": 2, "head_dim": 8},
        receiver_spec={**SPEC, "num_layers": 2, "kv_heads": 2, "head_dim": 8}, **config))
    with torch.no_grad():
        for p in adapter.parameters():
            p.normal_()
    save_adapter(adapter, folder)
    return folder


def edit_config(folder: Path, edit) -> None:
    data = json.loads((folder / CONFIG_NAME).read_text())
    edit(data)
    (folder / CONFIG_NAME).write_text(json.dumps(data))


def rewrite_weights(folder: Path, change) -> None:
    """Replace the weights by ``change(tensors)``, saved as valid safetensors, and record the new file's hash and
    size in the config: a package that looks consistent, so only the tensor check can refuse it."""
    save_file(change(load_file(folder / WEIGHTS_NAME)), folder / WEIGHTS_NAME)
    data = (folder / WEIGHTS_NAME).read_bytes()
    edit_config(folder, lambda c: c.update(weights_sha256=sha256_bytes(data), weights_bytes=len(data)))


@pytest.fixture
def package(tmp_path) -> Path:
    return make_package(tmp_path / "package")


def test_save_records_hash_and_size_and_loads_back(package):
    config = json.loads((package / CONFIG_NAME).read_text())
    data = (package / WEIGHTS_NAME).read_bytes()
    assert config["weights_sha256"] == sha256_bytes(data) and config["weights_bytes"] == len(data)
    loaded = load_adapter(package)
    assert loaded.config.weights_sha256 == config["weights_sha256"]
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in load_file(package / WEIGHTS_NAME).items())
    assert AdapterConfig.from_dict({k: v for k, v in config.items() if not k.startswith("weights_")})  # old configs parse


CORRUPTIONS = {
    "truncated": lambda data: data[:-7],
    "one-byte-flipped": lambda data: data[:-3] + bytes([data[-3] ^ 1]) + data[-2:],
    "byte-appended": lambda data: data + b"\0",
    "empty": lambda data: b"",
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_altered_weights_are_refused_against_the_recorded_hash(package, name):
    weights = package / WEIGHTS_NAME
    recorded = json.loads((package / CONFIG_NAME).read_text())
    weights.write_bytes(CORRUPTIONS[name](weights.read_bytes()))
    with pytest.raises(IntegrityError) as err:
        load_adapter(package)
    message = str(err.value)
    assert str(weights) in message and "hf-fold pull" in message
    if weights.stat().st_size != recorded["weights_bytes"]:
        assert f"is {weights.stat().st_size} bytes" in message and f"records {recorded['weights_bytes']} bytes" in message
    else:
        assert f"has hash {sha256_file(weights)}" in message and recorded["weights_sha256"] in message


def test_valid_weights_of_another_adapter_are_refused_by_the_hash(package, tmp_path):
    """Same names and shapes, different values: only the recorded hash can tell, and it does."""
    other = make_package(tmp_path / "other", seed=1)
    (package / WEIGHTS_NAME).write_bytes((other / WEIGHTS_NAME).read_bytes())
    with pytest.raises(IntegrityError, match="has hash sha256:.*but adapter_config.json records sha256:"):
        load_adapter(package)


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corrupt_weights_without_a_recorded_hash_give_a_clear_error(package, name):
    edit_config(package, lambda c: [c.pop("weights_sha256"), c.pop("weights_bytes")])  # saved before the field
    weights = package / WEIGHTS_NAME
    weights.write_bytes(CORRUPTIONS[name](weights.read_bytes()))
    if name == "one-byte-flipped":  # the last byte is tensor data: the file parses, the values are just different
        assert load_adapter(package)
        return
    with pytest.raises(IntegrityError) as err:
        load_adapter(package)
    assert f"{weights} is not a readable safetensors file" in str(err.value) and "truncated or corrupt" in str(err.value)


SHAPE_EDITS = {  # config edit -> what the error must name
    "head-dim": (lambda c: c["sender_spec"].update(head_dim=12), ["'k_weight' has shape [2, 32, 16]", "expects [2, 48, 16]"]),
    "layers": (lambda c: [c["receiver_spec"].update(num_layers=3), c["layer_sources"].append([2, 2])],
               ["'k_bias' has shape [2, 16]", "expects [3, 16]"]),
    "layers-only": (lambda c: c["receiver_spec"].update(num_layers=3), ["layer_sources has 2 entries", "3 layers"]),
    "huge": (lambda c: c["sender_spec"].update(kv_heads=10**6), ["expects [2, 16000000, 16]"]),  # never allocated
    "sources-width": (lambda c: c.update(layer_sources=[[0], [1]]), ["'v_weight' has shape [2, 32, 16]", "expects [2, 16, 16]"]),
}


@pytest.mark.parametrize("name", SHAPE_EDITS)
def test_config_dims_that_do_not_match_the_weights_name_the_tensor(package, name):
    edit, expected = SHAPE_EDITS[name]
    edit_config(package, edit)
    with pytest.raises(IntegrityError) as err:
        load_adapter(package)
    assert str(package / CONFIG_NAME) in str(err.value) or str(package / WEIGHTS_NAME) in str(err.value)
    for text in expected:
        assert text in str(err.value)


TENSOR_EDITS = {
    "missing": (lambda t: {k: v for k, v in t.items() if k != "v_bias"}, "'v_bias' is missing (expected shape [2, 16])"),
    "extra": (lambda t: {**t, "lora_A": torch.zeros(4, 4)}, "'lora_A' (shape [4, 4]) is not part of a heterofold adapter"),
    "nan": (lambda t: {**t, "k_bias": torch.full((2, 16), float("nan"))}, "'k_bias' holds NaN or inf values"),
    "int": (lambda t: {**t, "k_bias": torch.zeros(2, 16, dtype=torch.int32)}, "'k_bias' has dtype torch.int32"),
}


@pytest.mark.parametrize("name", TENSOR_EDITS)
def test_weights_that_do_not_match_the_config_name_the_tensor(package, name):
    change, expected = TENSOR_EDITS[name]
    rewrite_weights(package, change)
    with pytest.raises(IntegrityError) as err:
        load_adapter(package)
    assert expected in str(err.value) and "in_features 32" in str(err.value)


@pytest.mark.parametrize("text,expected", [
    ("{", "is not valid JSON"), ('{"method": "heterofold"}', r"lacks field\(s\) \['sender'"), (None, "wrong type")])
def test_a_broken_config_is_refused_naming_it(package, text, expected):
    if text is None:
        edit_config(package, lambda c: c.update(receiver_spec="qwen2"))
    else:
        (package / CONFIG_NAME).write_text(text)
    with pytest.raises(IntegrityError, match=expected) as err:
        load_adapter(package)
    assert str(package / CONFIG_NAME) in str(err.value)


def test_non_finite_weights_are_never_saved(tmp_path):
    adapter = load_adapter(make_package(tmp_path / "good"))
    with torch.no_grad():
        adapter.v_weight[0, 0, 0] = float("inf")
    with pytest.raises(IntegrityError, match=r"\['v_weight'\] hold NaN or inf"):
        save_adapter(adapter, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


class Payload:
    """Unpickling this creates a folder: proof that a pickle was executed."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


@pytest.mark.parametrize("name", ["adapter.bin", "adapter_model.pt"])
def test_pickle_weights_are_refused_never_unpickled(package, tmp_path, name):
    marker = tmp_path / "pickle-ran"
    (package / WEIGHTS_NAME).unlink()
    (package / name).write_bytes(pickle.dumps({"k_weight": Payload(marker)}))
    with pytest.raises(IntegrityError) as err:
        load_adapter(package)
    assert name in str(err.value) and "never unpickles" in str(err.value) and "safetensors" in str(err.value)
    assert not marker.exists()


def _source_files():
    found = [*(ROOT / "heterofold_hub").rglob("*.py"), *(ROOT / "trainers").rglob("*.py"), ROOT / "cli.py"]
    return sorted({p.resolve() for p in found})


def test_no_code_path_sets_trust_remote_code_or_unpickles():
    """Static check of every call in the library, the trainers and the CLI."""
    offences = []
    for path in _source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "trust_remote_code" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offences.append(f"{path}:{node.lineno} trust_remote_code={ast.unparse(kw.value)}")
                if kw.arg == "weights_only" and not (isinstance(kw.value, ast.Constant) and kw.value.value is True):
                    offences.append(f"{path}:{node.lineno} weights_only={ast.unparse(kw.value)}")
            name = ast.unparse(node.func)
            if name in ("torch.load", "pickle.load", "pickle.loads"):
                offences.append(f"{path}:{node.lineno} {name}(...)")
    assert offences == []


def test_a_model_with_custom_code_is_refused_and_its_code_never_runs(tmp_path):
    folder, marker = tmp_path / "custom-model", tmp_path / "custom-code-ran"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "custom-arch", "architectures": ["CustomModel"],
        "auto_map": {"AutoConfig": "custom.CustomConfig", "AutoModelForCausalLM": "custom.CustomModel"}}))
    (folder / "custom.py").write_text(f"import os\nos.mkdir({str(marker)!r})\n")
    for load in (load_model, load_tokenizer):
        with pytest.raises(HeteroFoldError, match="could not be loaded"):
            load(str(folder))
    assert not marker.exists()


# -- the registry's view of the hub ---------------------------------------------------------------------------
REPO = "tester/pkg"


def publishable(folder: Path, seed: int = 0) -> Path:
    """A package `hf-fold push` accepts: tokenizer fingerprints and a metrics.json for its pair."""
    package = make_package(folder, seed, sender_tokenizer="sha256:" + "1" * 64, receiver_tokenizer="sha256:" + "2" * 64)
    metrics = json.loads((Path(__file__).parent / "data" / "package" / "metrics.json").read_text())
    (package / "metrics.json").write_text(json.dumps({**metrics, "sender": "tester/send", "receiver": "tester/recv"}))
    return package


@pytest.fixture
def published(tmp_path):
    """REPO v1.0.0 pushed into a LocalHub and a registry file; returns (registry path, hub)."""
    registry, hub = tmp_path / "registry.json", LocalHub(tmp_path / "hub")
    push_package(publishable(tmp_path / "pkg"), repo_id=REPO, version="1.0.0", hub=hub, registry=registry)
    return registry, hub


def test_a_push_records_the_split_its_card_states(tmp_path):
    """A package whose metrics.json predates its "data" field: the registry records the held-out split the card
    names (its training arguments'), so list and show say what the card says."""
    package = publishable(tmp_path / "pkg")
    edit_config(package, lambda config: config.update(training_args={"heldout": "bundled:heldout"}))
    registry = tmp_path / "registry.json"
    push_package(package, repo_id=REPO, version="1.0.0", hub=LocalHub(tmp_path / "hub"), registry=registry)
    (version,) = Registry.load(registry).entries()[0].versions
    assert (version.metrics["data"], version.metrics["windows"]) == ("bundled:heldout", 96)
    card = (LocalHub(tmp_path / "hub").download(REPO, version="v1.0.0") / "README.md").read_text()
    assert "Held-out evaluation on `bundled:heldout`: 96 windows" in card


def _fetch(registry_path: Path, hub: LocalHub):
    registry = Registry.load(registry_path)
    (entry,) = registry.entries()
    return fetch(registry, entry, entry.versions[-1], hub_dir=hub.root)


def test_a_registered_file_missing_from_the_hub_names_repo_version_and_file(published):
    registry_path, hub = published
    data = json.loads(registry_path.read_text())
    data["adapters"][0]["versions"][0]["files"]["loss.png"] = "sha256:" + "ab" * 32  # never published
    registry_path.write_text(json.dumps(data))
    with pytest.raises(IntegrityError) as err:
        _fetch(registry_path, hub)
    message = str(err.value)
    assert f"{REPO} v1.0.0: loss.png is missing" in message and "the registry lists it" in message


def test_a_deleted_snapshot_file_is_named_and_the_fix_works(published):
    registry_path, hub = published
    snapshot = hub.download(REPO, version="v1.0.0")
    (snapshot / WEIGHTS_NAME).unlink()
    with pytest.raises(IntegrityError, match=f"{REPO} v1.0.0: {WEIGHTS_NAME} is missing from {snapshot}"):
        _fetch(registry_path, hub)
    for p in snapshot.iterdir():  # the fix the message gives: delete the folder so it is exported again
        p.unlink()
    snapshot.rmdir()
    assert load_adapter(_fetch(registry_path, hub)).config.receiver == "tester/recv"


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_corrupt_downloaded_file_names_a_fix_that_works(kind, tmp_path, request):
    """Doing what the message says (delete the path it names) gives a good download, not a second error: a local
    hub's snapshot folder, or the blob a Hugging Face cache links the file to."""
    cache = tmp_path / "cache"
    hub = LocalHub(tmp_path / "hub") if kind == "local" else RemoteHub(
        request.getfixturevalue("loopback_hub").url, token="test-token", cache_dir=cache)
    registry_path = tmp_path / "registry.json"
    push_package(publishable(tmp_path / "pkg"), repo_id=REPO, version="1.0.0", hub=hub, registry=registry_path)

    def fetched() -> Path:
        registry = Registry.load(registry_path)
        (entry,) = registry.entries()
        return fetch(registry, entry, entry.versions[-1], hub_dir=hub.root if kind == "local" else cache,
                     token="test-token")

    weights = fetched() / WEIGHTS_NAME
    weights.resolve().write_bytes(b"not the published weights")
    with pytest.raises(IntegrityError) as err:
        fetched()
    named = re.search(r"\. Delete (\S+) ", str(err.value)).group(1)
    target = weights if named == "it" else Path(named)
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    assert load_adapter(fetched()).config.receiver == "tester/recv"


def test_a_registered_version_the_hub_does_not_have_names_both(published):
    registry_path, hub = published
    registry_path.write_text(registry_path.read_text().replace('"v1.0.0"', '"v1.2.0"'))
    with pytest.raises(HubError) as err:
        _fetch(registry_path, hub)
    message = str(err.value)
    assert f"registry {registry_path} lists {REPO} v1.2.0" in message and "published versions: v1.0.0" in message


# -- all-or-nothing push ----------------------------------------------------------------------------------------
def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The real `hf-fold` in a subprocess (like helpers.hf_fold, with extra environment)."""
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **env}, timeout=300)


def push_args(package: Path, registry: Path, hub: LocalHub, version: str = "1.1.0") -> list[str]:
    return ["push", str(package), "--repo", REPO, "--version", version, "--hub-dir", str(hub.root),
            "--registry", str(registry)]


def half_written(root: Path) -> list[Path]:
    """Temp files of atomic writes (``.NAME.*.tmp``) and temp folders of the LocalHub (``.tmp-*``)."""
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp")]


def test_a_push_killed_between_hub_and_registry_rolls_forward_on_retry(published, tmp_path):
    registry_path, hub = published
    package, before, staging = publishable(tmp_path / "v2", seed=2), registry_path.read_bytes(), tmp_path / "staging"
    staging.mkdir()
    killed = cli(*push_args(package, registry_path, hub), HF_FOLD_FAULT="after-publish", TMPDIR=str(staging))
    assert killed.returncode == 137, killed.stdout + killed.stderr
    assert hub.versions(REPO) == ["v1.0.0", "v1.1.0"]  # it got as far as the hub...
    assert registry_path.read_bytes() == before and Registry.load(registry_path)  # ...the registry is untouched
    assert half_written(tmp_path) == [] and list(staging.iterdir()) == []

    other = publishable(tmp_path / "other", seed=3)  # a retry with other bytes: refused, nothing changes
    with pytest.raises(HeteroFoldError, match=r"already published .* with other files .*adapter.safetensors.*immutable"):
        push_package(other, repo_id=REPO, version="1.1.0", hub=hub, registry=registry_path)
    assert registry_path.read_bytes() == before

    console = Console(record=True, width=200)
    run_push(package, repo_id=REPO, version="1.1.0", hub=None, hub_dir=hub.root, token=None,
             registry_path=registry_path, license="apache-2.0", console=console)
    assert "was already in the hub with exactly these files" in console.export_text()

    registry = Registry.load(registry_path)
    entry, version = registry.find(PairEnd("tester/send"), PairEnd("tester/recv"))  # the resolver's choice
    assert version.version == "v1.1.0" and version.commit == hub.version_info(REPO, "v1.1.0").commit
    folder = fetch(registry, entry, version, hub_dir=hub.root)  # checks every recorded hash
    for name in (CONFIG_NAME, WEIGHTS_NAME, "metrics.json"):
        assert version.files[name] == sha256_file(package / name) == sha256_file(folder / name)
    assert half_written(tmp_path) == []


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_version_already_in_the_hub_is_registered_only_with_identical_files(kind, tmp_path, request):
    """The hub has the version, this registry does not (a stopped push, or a push into another registry)."""
    hub = LocalHub(tmp_path / "hub") if kind == "local" else RemoteHub(
        request.getfixturevalue("loopback_hub").url, token="test-token", cache_dir=tmp_path / "cache")
    package, first_registry, second_registry = publishable(tmp_path / "pkg"), tmp_path / "a.json", tmp_path / "b.json"
    first = push_package(package, repo_id=REPO, version="1.0.0", hub=hub, registry=first_registry)
    with pytest.raises(HeteroFoldError, match="with other files than this package"):
        push_package(publishable(tmp_path / "other", seed=1), repo_id=REPO, version="1.0.0", hub=hub,
                     registry=second_registry)
    assert not second_registry.exists()
    again = push_package(package, repo_id=REPO, version="1.0.0", hub=hub, registry=second_registry)
    assert again.reused and not first.reused and again.commit == first.commit
    registered = [Registry.load(path).entries()[0].versions[0] for path in (first_registry, second_registry)]
    assert registered[0] == registered[1]


RACER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from heterofold_hub import cli  # imported before the start signal, so both pushes really run at the same time
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
sys.argv = ["hf-fold", *sys.argv[3:]]
ready.touch()
while not go.exists():
    time.sleep(0.005)
cli.run()
"""


def test_two_concurrent_cli_pushes_of_one_version_have_one_winner(published, tmp_path):
    """The hub-level race is in test_hubs.py; this one is `hf-fold push` with its registry update."""
    registry_path, hub = published
    packages = [publishable(tmp_path / f"racer{i}", seed=10 + i) for i in range(2)]
    go = tmp_path / "go"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    racers = [subprocess.Popen([sys.executable, "-c", RACER.format(root=str(ROOT)), str(tmp_path / f"ready{i}"), str(go),
                                *push_args(package, registry_path, hub)], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, package in enumerate(packages)]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    results = [racer.communicate(timeout=120) for racer in racers]
    codes = [racer.returncode for racer in racers]
    assert sorted(codes) == [0, 1], results  # the loser failed (1); its command line was fine
    winner, loser = codes.index(0), codes.index(1)
    assert "already published" in results[loser][1] and "Traceback" not in "".join(results[loser])

    registry = Registry.load(registry_path)  # valid, and the version is there once, with the winner's files
    assert [v.version for v in registry.entries()[0].versions] == ["v1.0.0", "v1.1.0"]
    files = registry.entries()[0].versions[-1].files
    assert files[WEIGHTS_NAME] == sha256_file(packages[winner] / WEIGHTS_NAME)
    assert load_adapter(fetch(registry, registry.entries()[0], registry.entries()[0].versions[-1], hub_dir=hub.root))
    assert half_written(tmp_path) == []


def test_a_model_with_only_pickled_weights_is_refused(tmp_path):
    """A real model folder saved as pytorch_model.bin: load_model asks for safetensors and says why."""
    from conftest import tiny_model

    folder = tmp_path / "pickled-model"
    model = tiny_model("llama", 64)
    model.save_pretrained(folder)  # transformers 5 writes safetensors only: convert to the old pickle format
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(HeteroFoldError, match="no safetensors weights.*never loads pickled weights"):
        load_model(str(folder))
