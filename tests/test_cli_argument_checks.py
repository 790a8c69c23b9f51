"""Arguments that cannot work are usage errors (exit 2) before any model work, named with the fix: output paths
that cannot be written, JSONL lines that are not records with a text string, a --repair-layers beyond the
receiver, an empty --query. Each runs the real CLI in a subprocess on the tiny pair, with small flags, so that
where a check were missing the run would end quickly in the late failure instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
SMALL_EVAL = ["eval", "--methods", "kv-ridge", "--no-registered", "--windows", "2", "--calib-windows", "2",
              "--context-tokens", "32", "--continuation-tokens", "8"]
SMALL_BENCH = ["bench", "--sender", "heterofold/tiny-llama-code", "--receiver", "heterofold/tiny-qwen-code",
               "--contexts", "16", "--repeats", "1"]
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


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "file.txt"
    path.write_text("not a folder\n")
    return path


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


def test_eval_json_into_a_folder_is_refused_before_the_evaluation(tmp_path):
    refused(hf_fold(*SMALL_EVAL, "--json", str(tmp_path)), f"--json {tmp_path}: is a folder",
            f"e.g. {tmp_path / 'results.json'}")


def test_eval_json_under_a_file_is_refused_before_the_evaluation(a_file):
    refused(hf_fold(*SMALL_EVAL, "--json", str(a_file / "out.json")), f"{a_file} is a file")


def test_retrieval_plot_into_a_folder_is_refused(tmp_path):
    (tmp_path / "plots.png").mkdir()
    refused(hf_fold("eval", "--task", "retrieval", "--methods", "kv-ridge", "--no-registered", "--lengths", "256",
                    "--docs", "1", "--calib-windows", "2", "--plot", str(tmp_path / "plots.png")),
            f"--plot {tmp_path / 'plots.png'}: is a folder")


def test_pull_into_a_file_is_refused_before_downloading(a_file):
    refused(hf_fold("pull", L2Q, "--out", str(a_file)), f"--out {a_file}: is a file, not a folder")


def test_bench_json_into_a_folder_is_refused_before_timing(tmp_path):
    refused(hf_fold(*SMALL_BENCH, "--json", str(tmp_path)), f"--json {tmp_path}: is a folder")


@pytest.mark.parametrize("command", [
    ["compose", "--sender", "heterofold/tiny-llama-code", "--receiver", "heterofold/tiny-qwen-code", "--pivot",
     "gguf/smollm2-135m-instruct-q4_1", "--eval-windows", "0"],
    ["compress", "--adapter", L2Q, "--rank", "4", "--calib-windows", "2", "--eval-windows", "0"],
    ["train", "--method", "kv-ridge", "--windows", "2", "--eval-windows", "2", "--context-tokens", "32",
     "--continuation-tokens", "8"],
], ids=lambda c: c[0])
def test_an_out_folder_that_is_a_file_is_refused(a_file, command):
    refused(hf_fold(*command, "--out", str(a_file)), f"--out {a_file}: is a file, not a folder")


def test_offload_features_into_a_file_is_refused_before_training(a_file):
    refused(hf_fold("train", "--method", "heterofold", "--windows", "2", "--eval-windows", "2",
                    "--context-tokens", "32", "--continuation-tokens", "8", "--offload-features", str(a_file)),
            f"--offload-features {a_file}: is a file, not a folder")


def test_repair_layers_beyond_the_receiver_is_refused_before_fitting():
    refused(hf_fold(*SMALL_EVAL, "--repair-layers", "99"),
            "--repair-layers: 99, but the receiver heterofold/tiny-qwen-code has 3 layers; give 0 .. 3")


def test_bench_refuses_an_empty_query_for_a_prompt_reading_select():
    refused(hf_fold(*SMALL_BENCH, "--recompute", "0.1", "--select", "statement", "--query", ""),
            "--query '': --select statement reads the receiver's prompt")


@pytest.mark.parametrize("command", [SMALL_EVAL, SMALL_BENCH, ["eval", "--task", "retrieval", "--lengths", "64"]],
                         ids=["eval", "bench", "retrieval"])
def test_a_select_without_a_share_is_refused_not_dropped(command):
    """--select tail with --recompute 0 would silently run the pure transfer: each command says so, before any work."""
    refused(hf_fold(*command, "--select", "tail"), "--select tail: chooses positions to recompute, but --recompute is 0",
            "--recompute 0.12 --select tail")


def test_train_args_take_folders_as_text_as_an_experiment_gives_them(a_file, tmp_path):
    """An experiment's TOML gives ``[train.NAME]`` folders as strings: they are checked as the command line's are."""
    from heterofold_hub.errors import UsageError
    from heterofold_hub.trainers.train import TrainArgs

    args = TrainArgs(sender="a", receiver="b", out=str(tmp_path / "out"), offload_features=str(a_file),
                     init="adapter", init_adapter=str(tmp_path))
    assert isinstance(args.out, Path) and isinstance(args.offload_features, Path)
    with pytest.raises(UsageError) as problems:
        args.validate()
    assert f"--offload-features {a_file}: is a file" in str(problems.value)
    assert f"--init-adapter: {tmp_path} is not an adapter package" in str(problems.value)
