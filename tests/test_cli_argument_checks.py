"""Arguments that cannot work are usage errors (exit 2) before any model work, named with the fix: JSONL lines
that are not records with a text string. Each runs the real CLI in a subprocess on the tiny pair, with small flags, so that
where a check were missing the run would end quickly in the late failure instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

SMALL_EVAL = ["eval", "--methods", "kv-ridge", "--no-registered", "--windows", "2", "--calib-windows", "2",
              "--context-tokens", "32", "--continuation-tokens", "8"]
WORK_STARTED = ("loading models", "loading heterofold", "calibration", "evaluating", "Traceback")


def hf_fold(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400")  # wide: each message on one line
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def refused(run: subprocess.CompletedProcess, *expected: str) -> None:
    """Exit 2, nothing on stdout, one error naming ``expected``, and no sign that any model work began."""
    assert run.returncode == 2, (run.returncode, run.stderr[-3000:])
    assert run.stdout == "" and run.stderr.startswith("error: "), run.stderr[-3000:]
    for text in expected:
        assert text in run.stderr, run.stderr
    assert not [w for w in WORK_STARTED if w in run.stderr], run.stderr


@pytest.mark.parametrize("lines, expected", [
    (b'{"text": "def f(x):\\n    return x\\n"}\n{"text": 5}\n', ['line 2: "text" is int 5', '"text" string']),
    (b'{"text": "def f(x):\\n    return x\\n"}\n\xff\xfe\n', ["line 2: byte 0xff at column 1 is not UTF-8",
                                                               "re-save the file as UTF-8"]),
    (b'{"text": "fine"}\n\n["a list"]\n', ["line 3: found list", '{"text": "def f(x): ..."}']),
], ids=["text-not-a-string", "not-utf8", "not-an-object"])
def test_a_bad_jsonl_line_is_a_usage_error_naming_file_line_and_fix(tmp_path, lines, expected):
    data = tmp_path / "f.jsonl"
    data.write_bytes(lines)
    refused(hf_fold(*SMALL_EVAL, "--data", str(data)), f"{data}, line", *expected)
