"""The commands that only read registry.json (list, show, search), run as a user runs them: a real subprocess of the
CLI. They start without torch. The registry records where each version's published figures were measured, as its
card states."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
REGISTRY = json.loads((ROOT / "registry.json").read_text())
# Runs the CLI in this interpreter, then says on stderr whether torch was imported by the time it exited.
TORCH_PROBE = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(f\"\\ntorch imported: "
               "{'torch' in sys.modules}\\n\")); sys.argv = ['hf-fold', *sys.argv[1:]]; import cli; cli.run()")


@pytest.mark.parametrize("args", [["list"], ["search", "qwen"], ["show", L2Q], ["show", f"{L2Q}@1.0.0", "--no-card"],
                                  ["show", "--sender", "heterofold/tiny-llama-code", "--receiver",
                                   "heterofold/tiny-qwen-code"], ["list", "--json"]])
def test_read_only_commands_never_import_torch(args):
    run = subprocess.run([sys.executable, "-c", TORCH_PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout and "torch imported: False" in run.stderr, run.stderr[-500:]


def card_of(entry: dict, version: dict) -> str:
    """The model card a registered version published, from its commit in the embedded hub."""
    repo = ROOT / "hub" / "repos" / entry["repo_id"]
    return subprocess.run(["git", f"--git-dir={repo}", "show", f"{version['commit']}:README.md"], capture_output=True,
                          text=True, check=True).stdout


def card_split(card: str) -> tuple[str, str, str]:
    """(split, windows, context tokens) of a card's 'Held-out evaluation on `SPLIT`: N windows of T context'."""
    return re.search(r"Held-out evaluation on `([^`]+)`: (\d+) windows of (\d+) context", card).groups()


def test_every_registered_version_records_the_split_and_windows_its_card_states():
    for entry in REGISTRY["adapters"]:
        for version in entry["versions"]:
            split, windows, tokens = card_split(card_of(entry, version))
            metrics = version["metrics"]
            assert (metrics.get("data"), metrics.get("windows"), metrics.get("context_tokens")) == (
                split, int(windows), int(tokens)), (entry["repo_id"], version["version"])
