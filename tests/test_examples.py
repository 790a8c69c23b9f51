"""The examples run as written, in a fresh process, on the shipped real pair."""

import subprocess
import sys

from helpers import ROOT


def test_two_agents_pass_a_conversation_back_and_forth_as_kv_caches():
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "two_agents.py")], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "reviewer's cache: ['native', 'mapped', 'native']" in lines  # template scaffolding native, document mapped
    assert "planner's cache: ['native', 'native', 'mapped']" in lines  # its own document, then the appended review
    assert any(line.startswith("reviewer (SmolLM2) wrote: 'Review:") for line in lines)
    assert any(line.startswith("planner (Gemma 3) recalls: ") for line in lines)
