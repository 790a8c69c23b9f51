"""The embedded hub exported as Hugging Face Hub repo folders (scripts/export_hub.py, heterofold_hub.hub.export):
one flat folder per repo@version holding exactly the published files, which loads as an adapter, and which the real
``huggingface_hub`` client uploads to a Hub-compatible server (tests/hub_server.py on 127.0.0.1) and downloads back
at the version's tag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import HfApi, snapshot_download

from heterofold_hub.errors import IntegrityError
from heterofold_hub.hub.export import export_hub
from heterofold_hub.hub.resolve import sha256_file
from heterofold_hub.methods import load_adapter

from helpers import ROOT

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
REGISTRY = {a["repo_id"]: a for a in json.loads((ROOT / "registry.json").read_text())["adapters"]}


def registered_files(repo_id: str, version: str) -> dict[str, str]:
    return next(v for v in REGISTRY[repo_id]["versions"] if v["version"] == version)["files"]


def test_an_exported_version_is_the_registered_files_and_loads_as_an_adapter(tmp_path):
    [exported] = export_hub(tmp_path, repos=[L2Q])
    assert (exported.version, exported.folder) == ("v1.1.0", tmp_path / L2Q / "v1.1.0")  # the default: the newest
    files = registered_files(L2Q, "v1.1.0")
    assert {p.name: sha256_file(p) for p in exported.folder.iterdir()} == files  # exactly these, these bytes
    adapter = load_adapter(exported.folder)
    assert (adapter.config.sender, adapter.config.receiver) == (REGISTRY[L2Q]["sender"]["id"],
                                                                REGISTRY[L2Q]["receiver"]["id"])
    assert (exported.folder / "README.md").read_text().startswith("---\n")  # the model card, with its front matter


def test_an_altered_export_is_refused_when_exported_again(tmp_path):
    [exported] = export_hub(tmp_path, repos=[L2Q])
    weights = exported.folder / "adapter.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(IntegrityError, match="corrupt or was altered"):
        export_hub(tmp_path, repos=[L2Q])


def test_the_script_exports_every_version_and_uploads_them_tagged_to_a_hub(tmp_path, loopback_hub):
    out = tmp_path / "exported"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_hub.py"), "--out", str(out), "--repo", L2Q,
                          "--all-versions", "--upload", loopback_hub.url, "--token", "test-token"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    versions = [v["version"] for v in REGISTRY[L2Q]["versions"]]
    assert sorted(p.name for p in (out / L2Q).iterdir()) == versions
    api = HfApi(endpoint=loopback_hub.url, token="test-token")
    assert sorted(tag.name for tag in api.list_repo_refs(L2Q).tags) == versions
    for version in versions:
        folder = snapshot_download(L2Q, revision=version, endpoint=loopback_hub.url, token="test-token",
                                   cache_dir=tmp_path / "hf-cache")
        downloaded = {p.name: sha256_file(p) for p in Path(folder).iterdir() if p.name != ".gitattributes"}
        assert downloaded == registered_files(L2Q, version)
        load_adapter(folder)
