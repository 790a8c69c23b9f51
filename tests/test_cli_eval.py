"""`hf-fold eval` end to end on models saved as local folders (real files, real tokenizers)."""

import json

import pytest

from helpers import hf_fold


def test_eval_writes_table_and_json(pair_dirs):
    out = pair_dirs / "result.json"
    run = hf_fold("eval", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
                  "--data", str(pair_dirs / "heldout.jsonl"), "--calib-data", str(pair_dirs / "calib.txt"),
                  "--methods", "recolor,kv-ridge,dense-latent", "--context-tokens", "48", "--continuation-tokens", "8",
                  "--windows", "6", "--calib-windows", "6", "--json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["sender"] == str(pair_dirs / "sender") and result["context_tokens"] == 48
    assert set(result["methods"]) == {"native", "no-context", "recolor", "kv-ridge", "dense-latent"}
    for row in result["methods"].values():
        assert {"recovered", "kl", "top1", "nll"} <= set(row)
    native = result["methods"]["native"]
    assert native["kl"] == pytest.approx(0, abs=1e-6) and native["top1"] == 1 and native["recovered"] == pytest.approx(1)
    assert result["methods"]["no-context"]["recovered"] == pytest.approx(0, abs=1e-6)
    assert "kv-ridge" in run.stdout and "recovered" in run.stdout  # the table is data: stdout
    assert f"wrote {out}" in run.stderr and "wrote" not in run.stdout


def test_eval_refuses_overlapping_calibration_and_heldout(pair_dirs):
    run = hf_fold("eval", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
                  "--data", str(pair_dirs / "calib.txt"), "--calib-data", str(pair_dirs / "calib.txt"))
    assert run.returncode == 2 and "share passages" in run.stderr and run.stdout == ""


def test_eval_argument_problems_are_gathered():
    run = hf_fold("eval", "--methods", "magic", "--windows", "0", "--sender", "a", "--receiver", "a")
    assert run.returncode == 2 and run.stdout == ""
    for flag in ("--methods", "--windows", "--sender and --receiver"):
        assert flag in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_bench_writes_timings_json_and_plot(pair_dirs, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    run = hf_fold("bench", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
                  "--data", str(pair_dirs / "heldout.jsonl"), "--contexts", "16,48", "--repeats", "1",
                  "--json", str(out), "--plot", str(png))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert result["skipped"] == []
    # Cut at a character boundary, a context can come out a token or two short of the request, never over.
    assert all(n - 3 <= r["context_tokens"] <= n for n, r in zip((16, 48), rows)) and len(rows) == 2
    for row in rows:
        assert row["prefill_s"] > 0 and row["copy_s"] > 0 and row["plan_s"] > 0 and row["layer_bytes"] > 0
        assert set(row["transfer_s"]) == set(row["peak_extra_bytes"]) == {"heterofold", "kv-ridge", "dense-latent"}
        assert all(n > 0 for n in row["peak_extra_bytes"].values())
        # the hand-off: plan (warm, and a new pipeline's cold one) + map + recompute (none timed here)
        assert row["plan_cold_s"] > 0 and row["recompute_s"] == {}
        assert row["end_to_end_s"]["heterofold"] == pytest.approx(row["plan_s"] + row["transfer_s"]["heterofold"])
        assert row["speedup"]["map_only"]["heterofold"] > row["speedup"]["end_to_end"]["heterofold"] > 0
    assert result["checks"] == {"prefill_keeps_one_logit": True, "warnings": []}
    provenance = result["provenance"]
    assert "bench" in provenance["command"] and provenance["git"]["commit"] and provenance["threads"] >= 1
    assert provenance["adapters"]["heterofold"]["source"] == "fitted in this run"  # no adapter registered: recolor
    assert all(a["weights_sha256"].startswith("sha256:") for a in provenance["adapters"].values())
    assert "end-to-end" in run.stdout and "map only" in run.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_in_bfloat16_maps_in_bfloat16(pair_dirs, tmp_path):
    out = tmp_path / "bench.json"
    run = hf_fold("bench", "--sender", str(pair_dirs / "sender"), "--receiver", str(pair_dirs / "receiver"),
                  "--data", str(pair_dirs / "heldout.jsonl"), "--contexts", "32", "--repeats", "1", "--dtype", "bfloat16",
                  "--json", str(out))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["dtype"] == "bfloat16" and result["rows"][0]["transfer_s"]["heterofold"] > 0


def test_bench_argument_problems_are_gathered():
    run = hf_fold("bench", "--sender", "x", "--contexts", "4", "--repeats", "0", "--dtype", "fp8", "--device", "tpu")
    assert run.returncode == 2
    for flag in ("--sender and --receiver", "--contexts", "--repeats", "--dtype: 'fp8'; choose from float32",
                 "--device: 'tpu'"):
        assert flag in run.stderr
