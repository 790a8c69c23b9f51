"""Two fidelity runs paired on their windows: the same figures as two rows scored side by side in one run, and a
clear refusal where the runs do not share their windows or their receiver's scores."""

from __future__ import annotations

import copy
import functools
import json

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.data.windows import make_windows
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.fidelity import evaluate
from heterofold_hub.evaluation.paired_runs import paired_between
from heterofold_hub.hub import LocalHub
from heterofold_hub.methods import load_adapter
from heterofold_hub.zoo import DEMO_PAIR

from helpers import ROOT, hf_fold

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"


@functools.cache
def pair_and_adapters():
    """The tiny pair, its shipped adapter and a copy with every map's weights nudged (another "lever")."""
    sender, receiver = Side.load(DEMO_PAIR[0]), Side.load(DEMO_PAIR[1])
    shipped = load_adapter(LocalHub(ROOT / "hub").download(L2Q, version="v1.1.0"))
    nudged = copy.deepcopy(shipped)
    with torch.no_grad():
        for p in nudged.parameters():
            p.mul_(0.9)
    return sender, receiver, shipped, nudged


def score(adapters: dict, *, context_tokens: int = 128, windows: int = 6) -> dict:
    sender, receiver, _, _ = pair_and_adapters()
    cut = make_windows(read_texts("bundled:unseen"), receiver, max_windows=windows, context_tokens=context_tokens,
                       continuation_tokens=32)
    result = evaluate(sender, receiver, adapters, cut, batch_size=6, progress=False, data="bundled:unseen")
    return json.loads(json.dumps(result))  # as a --json file reads back


def test_two_runs_paired_give_the_figures_of_one_run_scoring_both_rows():
    _, _, shipped, nudged = pair_and_adapters()
    together = score({"shipped": shipped, "nudged": nudged})["paired"]["shipped - nudged"]
    apart = paired_between(score({"shipped": shipped}), "shipped", score({"nudged": nudged}), "nudged")
    assert together["recovered"] != 0  # the nudge changes the figures, so the match below says something
    for key in ("recovered", "recovered_se", "kl", "kl_se"):
        assert apart[key] == pytest.approx(together[key], rel=1e-4, abs=1e-7), key
    assert (apart["windows"], apart["windows_better"]) == (together["windows"], together["windows_better"])


def test_runs_on_other_windows_or_rows_are_refused_naming_the_difference():
    _, _, shipped, _ = pair_and_adapters()
    short = score({"shipped": shipped})
    with pytest.raises(HeteroFoldError, match=r"not scored on the same windows \(6 and 6 windows, first difference at "
                                              r"window 0\).*--context-tokens"):
        paired_between(short, "shipped", score({"shipped": shipped}, context_tokens=96), "shipped")
    with pytest.raises(HeteroFoldError, match=r"has no transfer row 'heterofold'; its rows: shipped"):
        paired_between(short, "shipped", short, "heterofold")
    older = {k: v for k, v in short.items() if k != "per_window"}
    with pytest.raises(HeteroFoldError, match="keeps no per-window figures.*score it again"):
        paired_between(short, "shipped", older, "shipped")
    other_receiver = json.loads(json.dumps(short))
    other_receiver["per_window"]["methods"]["native"]["nll"][2] += 0.01
    with pytest.raises(HeteroFoldError, match="receiver's own prefill scored them differently"):
        paired_between(short, "shipped", other_receiver, "shipped")


@pytest.fixture(scope="module")
def two_eval_files(tmp_path_factory) -> tuple:
    """Two real `hf-fold eval --json` runs on the same windows: pure transfer, and a 25% recomputed tail."""
    folder = tmp_path_factory.mktemp("compare")
    common = ["eval", "--methods", "kv-ridge", "--calib-windows", "8", "--windows", "4", "--context-tokens", "128"]
    for name, extra in (("pure.json", []), ("tail.json", ["--recompute", "0.25", "--select", "tail"])):
        run = hf_fold(*common, *extra, "--json", str(folder / name))
        assert run.returncode == 0, run.stderr[-2000:]
    return folder / "pure.json", folder / "tail.json"


def test_cli_compare_pairs_every_shared_row_with_the_difference_of_its_figures(two_eval_files):
    pure, tail = two_eval_files
    run = hf_fold("compare", str(pure), str(tail), "--json")
    assert run.returncode == 0, run.stderr
    a, b = (json.loads(p.read_text())["methods"] for p in two_eval_files)
    rows = json.loads(run.stdout)
    assert [(r["first"], r["second"]) for r in rows] == [("kv-ridge", "kv-ridge"), ("heterofold", "heterofold")]
    for r in rows:  # same windows, same benefit: the paired difference is the difference of the two runs' figures
        assert r["recovered"] == pytest.approx(a[r["first"]]["recovered"] - b[r["second"]]["recovered"], abs=1e-5)
        assert r["kl"] == pytest.approx(a[r["first"]]["kl"] - b[r["second"]]["kl"], abs=1e-6)
        assert r["windows"] == 4 and r["recovered_se"] > 0
    table = hf_fold("compare", str(pure), str(tail), "--row", "heterofold").stdout
    assert "pure.json: heterofold\ttail.json: heterofold" in table and "kv-ridge" not in table


def test_cli_compare_refuses_other_windows_a_missing_file_and_an_unknown_row(two_eval_files, tmp_path):
    pure, tail = two_eval_files
    other = json.loads(tail.read_text())
    other["per_window"]["windows"][1] = "0" * 16  # a run cut from other text
    (tmp_path / "other.json").write_text(json.dumps(other))
    for args, said in (([str(pure), str(tmp_path / "other.json")], "not scored on the same windows"),
                       ([str(pure), str(tmp_path / "missing.json")], "missing.json: no such file"),
                       ([str(pure), str(tail), "--row", "recolor"], "has no transfer row 'recolor'; its rows: kv-ridge, heterofold")):
        run = hf_fold("compare", *args)
        assert run.returncode == 2 and said in run.stderr and "Traceback" not in run.stderr, run.stderr
        assert run.stdout == ""
