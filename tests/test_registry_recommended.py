"""A registry's recommended transfer setting is checked when the registry is read, by the rules the transfer itself
applies (heterofold_hub.transfer.settings_rules): a bad one is refused naming the file, the adapter version, the
field and the valid choices, instead of failing later inside transfer() as if the user had passed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub.registry import Registry, RegistryError
from heterofold_hub.transfer.settings_rules import PROMPT_SELECTS, SELECT_NAMES, check_recommended, settings_problems

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
    assert "recompute=5: expected a share of the context in [0, 1]" in message
    assert f"select='nope': expected one of {', '.join(SELECT_NAMES)}" in message
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


def test_the_rules_are_the_transfers_own():
    """settings_rules states what the selectors and RecomputeSettings accept, without torch: the same names, the
    same prompt readers, the same accepted values."""
    from heterofold_hub.transfer.recompute import RecomputeSettings
    from heterofold_hub.transfer.selection import SELECTORS, needs_query

    assert SELECT_NAMES == tuple(SELECTORS)
    assert PROMPT_SELECTS == {name for name in SELECTORS if needs_query(name)}
    cases = [dict(recompute=r, select=s, repair_layers=k, mapped_key_scale=m)
             for r in (-0.1, 0, 0.05, 1, 1.5, True) for s in ("content", "nope", "oracle") for k in (0, 2, -1)
             for m in (0, 0.7, 4, 4.5)]
    for case in cases:
        try:
            RecomputeSettings(fraction=case["recompute"], select=case["select"], repair_layers=case["repair_layers"],
                              mapped_key_scale=case["mapped_key_scale"])
            accepted = True
        except HeteroFoldError:
            accepted = False
        assert accepted == (not settings_problems(**case)), case
    assert check_recommended({"recompute": 0.05, "select": "statement", "repair_layers": 0}) == []
