"""The commands that only read registry.json (list, show, search), run as a user runs them: a real subprocess of the
CLI. They start without torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ROOT

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
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
