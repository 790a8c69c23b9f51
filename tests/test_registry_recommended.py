"""A registry's recommended transfer setting is checked when the registry is read, by the rules the transfer itself
applies (it must load into a TransferConfig): a bad one is refused naming the file, the adapter version, the
field and the valid choices, instead of failing later inside transfer() as if the user had passed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from heterofold_hub.hub.registry import Registry, RegistryError
from heterofold_hub.transfer.selects import SELECT_READS

from helpers import ROOT

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"  # its receiver, tiny-qwen-code, has 3 layers


def registry_with(tmp_path: Path, recommended: dict) -> Path:
    """The project's registry with ``recommended`` on the newest evaluation of L2Q's newest version."""
    data = json.loads((ROOT / "registry.json").read_text())
    entry = next(e for e in data["adapters"] if e["repo_id"] == L2Q)
    entry["versions"][-1]["evaluations"][-1]["recommended"] = recommended
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def test_an_invalid_recommended_setting_is_refused_when_the_registry_is_read(tmp_path):
    path = registry_with(tmp_path, {"recompute": 5, "select": "nope", "repair_layers": 0})
    with pytest.raises(RegistryError) as err:
        Registry.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {L2Q} v1.1.0: ") and ".recommended: found " in message
    assert "recompute=5: pass a share of the context in [0, 1]" in message
    assert f"select='nope': choose one of {', '.join(SELECT_READS)}" in message
    assert err.value.reason == "recommended"


def test_repair_layers_beyond_the_receiver_is_refused_naming_its_layer_count(tmp_path):
    with pytest.raises(RegistryError, match=r"repair_layers=99: expected at most the receiver's 3 layers"):
        Registry.load(registry_with(tmp_path, {"recompute": 0.1, "select": "tail", "repair_layers": 99}))
    Registry.load(registry_with(tmp_path, {"recompute": 0.1, "select": "statement", "repair_layers": 3}))  # all 3: fine


def test_the_cli_refuses_the_registry_with_a_clear_error_not_a_traceback(tmp_path):
    path = registry_with(tmp_path, {"recompute": 5, "select": "nope", "repair_layers": 0})
    run = subprocess.run([sys.executable, str(ROOT / "cli.py"), "list", "--registry", str(path)], capture_output=True,
                         text=True, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400"))
    assert run.returncode == 1 and run.stdout == "" and "Traceback" not in run.stderr
    assert f"{L2Q} v1.1.0" in run.stderr and "select='nope'" in run.stderr
