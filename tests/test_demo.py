"""``hf-fold demo``: the README's first command, one real hand-off run end to end in a fresh process."""

import json

from helpers import hf_fold


def test_the_demo_answers_with_its_own_prefill_and_the_recommended_setting_and_says_what_each_cost(tmp_path):
    out = tmp_path / "demo.json"
    run = hf_fold("demo", "--repeats", "1", "--json", str(out))
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    rows = {row["condition"]: row for row in result["rows"]}
    assert list(rows) == ["own prefill", "pure transfer", "recommended: statement@0.05"]
    assert result["adapter"].startswith("heterofold/smollm2-135m-to-gemma3-270m")
    assert rows["own prefill"]["correct"] == 3 and rows["recommended: statement@0.05"]["correct"] == 3
    assert rows["pure transfer"]["correct"] < 3  # the mapped cache keeps the gist, not the facts
    assert rows["own prefill"]["speedup"] == 1.0
    for row in rows.values():
        assert row["seconds"] > 0 and row["speedup"] == rows["own prefill"]["seconds"] / row["seconds"]
    assert "recommended: statement@0.05" in run.stdout and "73914" in run.stdout  # the table, on stdout
