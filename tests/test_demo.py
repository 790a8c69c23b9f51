"""``hf-fold demo``: the README's first command, one real hand-off run end to end in a fresh process."""

import json

from helpers import ROOT, hf_fold

from heterofold_hub.hub.base import is_prerelease
from heterofold_hub.transfer.config import TransferConfig


def registry_recommendation(repo_id: str) -> str:
    """The newest version's recommended setting as the registry records it, named as the demo names it."""
    entry = next(e for e in json.loads((ROOT / "registry.json").read_text())["adapters"] if e["repo_id"] == repo_id)
    resolved = [v for v in entry["versions"] if not is_prerelease(v["version"])][-1]  # pre-releases only when pinned
    recommended = [e["recommended"] for e in resolved.get("evaluations", []) if e.get("recommended")]
    return TransferConfig.from_dict(recommended[-1]).label


def test_the_demo_answers_with_its_own_prefill_and_the_recommended_setting_and_says_what_each_cost(tmp_path):
    out = tmp_path / "demo.json"
    run = hf_fold("demo", "--repeats", "1", "--json", str(out))
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    rows = {row["condition"]: row for row in result["rows"]}
    recommended = f"recommended: {registry_recommendation('heterofold/smollm2-135m-to-gemma3-270m')}"
    assert list(rows) == ["own prefill", "pure transfer", recommended]
    assert result["adapter"].startswith("heterofold/smollm2-135m-to-gemma3-270m")
    assert rows["own prefill"]["correct"] == 3 and rows[recommended]["correct"] == 3
    assert rows["pure transfer"]["correct"] < 3  # the mapped cache keeps the gist, not the facts
    assert rows["own prefill"]["speedup"] == 1.0
    for row in rows.values():
        assert row["seconds"] > 0 and row["speedup"] == rows["own prefill"]["seconds"] / row["seconds"]
    assert recommended in run.stdout and "73914" in run.stdout  # the table, on stdout
