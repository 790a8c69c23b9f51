"""The experiment harness (``python -m benchmarks``): configs are checked with messages that say what to fix, and a
stage run end to end on the tiny pair writes the library's figures under one provenance block of real values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import ROOT

sys.path.insert(0, str(ROOT))
from benchmarks import config  # noqa: E402
from benchmarks.config import ConfigError  # noqa: E402

TINY = ("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")
TINY_ADAPTER = "heterofold/tiny-llama-code-to-tiny-qwen-code@v1.1.0"


def write_config(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


HEAD = f'description = "d"\nsender = "{TINY[0]}"\nreceiver = "{TINY[1]}"\n'


@pytest.mark.parametrize("body, named", [
    ('[score]\nadapters = ["a/b@v1.0.0"]\nwindow = [4]\n', ["score.window", "unknown key", "windows"]),
    ('[score]\nadapters = ["heterofold/x"]\n', ["score.adapters", "'heterofold/x'", "repo@version"]),
    ('[score]\nadapters = ["a/b@v1.0.0"]\ncontexts = [512, 2048]\nwindows = [48]\n', ["score.windows", "one count per context"]),
    ('[score]\nadapters = ["train:kv"]\n', ["score.adapters", "train:kv", "no [train.kv]"]),
    ('[train.kv]\nmethod = "kv-ridge"\nwindos = 3\n', ["train.kv.windos", "not an hf-fold train argument", "windows"]),
    ('[score]\nadapters = ["a/b@v1.0.0"]\nwindows = ["48"]\n', ["score.windows", "list of int"]),
    ('[bench]\nrepeats = "3"\n', ["bench.repeats", "not of type int"]),
    ('[scroe]\nadapters = []\n', ["scroe", "unknown key", "score"]),
    ("", ["stages", "none"]),
])
def test_a_bad_config_is_refused_naming_the_key_and_the_fix(tmp_path, body, named):
    path = write_config(tmp_path, "bad", HEAD + body)
    with pytest.raises(ConfigError) as refused:
        config.load(path)
    message = str(refused.value)
    assert str(path) in message and all(part in message for part in named), message


def test_an_unknown_experiment_lists_the_known_ones(tmp_path):
    write_config(tmp_path, "known", HEAD + '[bench]\n')
    with pytest.raises(ConfigError, match="no experiment 'unknwon'.*known: known"):
        config.load("unknwon", tmp_path)


def test_every_committed_config_loads():
    experiments = config.load_all()
    assert experiments and all(e.stages for e in experiments)


def harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_the_runner_refuses_a_bad_config_with_exit_2(tmp_path):
    write_config(tmp_path, "bad", HEAD + '[score]\nadapters = ["a/b@v1.0.0"]\nwindow = [4]\n')
    run = harness("--experiments", str(tmp_path), "run", "bad", "--stage", "score")
    assert run.returncode == 2 and "score.window: unknown key" in run.stderr, run.stderr


def test_list_names_every_experiment():
    run = harness("list")
    assert run.returncode == 0, run.stderr
    assert [line.split()[0] for line in run.stdout.splitlines()] == [e.name for e in config.load_all()]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def test_a_tiny_score_stage_writes_the_library_figures_under_one_provenance_block(tmp_path):
    experiments, results = tmp_path / "experiments", tmp_path / "results"
    experiments.mkdir()
    write_config(experiments, "tiny-check", HEAD + f"""
        [score]
        adapters = ["{TINY_ADAPTER}"]
        contexts = [256]
        windows = [6]
        batch_size = 6
        """)
    run = harness("--experiments", str(experiments), "--results", str(results), "run", "tiny-check", "--stage", "score")
    assert run.returncode == 0, run.stderr
    written = json.loads((results / "tiny-check.json").read_text())
    assert written["experiment"] == "tiny-check" and list(written["stages"]) == ["score"]
    block, result = written["stages"]["score"]["provenance"], written["stages"]["score"]["result"]["256"]

    # the provenance block: real values of this checkout and process
    assert block["recorded"] is True
    assert block["git"]["commit"] == git("rev-parse", "HEAD")
    source_changes = git("status", "--porcelain", "--", ".", ":(exclude)benchmarks/results", ":(exclude)runs")
    assert block["git"]["dirty"] is bool(source_changes)
    assert block["versions"]["torch"] == torch.__version__
    assert block["command"].endswith("run tiny-check --stage score") and block["command"].startswith("python -m benchmarks")
    assert block["threads"] >= 1 and block["date"].startswith("20")
    assert [m["id"] for m in block["models"].values()] == list(TINY)
    registry = json.loads((ROOT / "registry.json").read_text())
    repo, version = TINY_ADAPTER.split("@")
    published = next(v for e in registry["adapters"] if e["repo_id"] == repo for v in e["versions"]
                     if v["version"] == version)
    record = block["adapters"][TINY_ADAPTER]
    assert record["source"] == TINY_ADAPTER and record["weights_sha256"] in json.dumps(published)

    # the figures: finite, and the library's own on the same windows
    assert result["adapters"] == {"heterofold": TINY_ADAPTER} and result["windows"] == 6
    row = result["methods"]["heterofold"]
    assert all(math.isfinite(row[k]) for k in ("recovered", "recovered_se", "kl", "nll", "top1"))
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.fidelity import evaluate
    from heterofold_hub.hub.resolve import resolve_adapter

    sender, receiver = Side.load(TINY[0]), Side.load(TINY[1])
    adapter = resolve_adapter(sender, receiver, adapter=repo, version=version).adapter
    windows = make_windows(read_texts("bundled:unseen"), receiver, max_windows=6, context_tokens=256,
                           continuation_tokens=64)
    direct = evaluate(sender, receiver, {"heterofold": adapter}, windows, batch_size=6, data="bundled:unseen")
    for key in ("recovered", "kl", "nll", "top1"):
        assert row[key] == pytest.approx(direct["methods"]["heterofold"][key], rel=1e-5, abs=1e-6), key
    assert result["benefit"] == pytest.approx(direct["benefit"], rel=1e-5)


def test_running_a_second_stage_keeps_the_first(tmp_path):
    from benchmarks.record import read, write_stage

    write_stage("x", "score", {"recorded": True}, {"512": {"a": 1}}, tmp_path)
    write_stage("x", "bench", {"recorded": True}, {"directions": []}, tmp_path)
    assert list(read("x", tmp_path)["stages"]) == ["score", "bench"]
