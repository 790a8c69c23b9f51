"""What keeps `hf-fold bench`'s figures honest: the hand-off's sum, the prefill it beats, and the provenance block."""

import hashlib
import subprocess

import pytest
import torch

from heterofold_hub.evaluation.bench import hand_off, prefill_keeps_one_logit
from heterofold_hub.evaluation.provenance import adapter_record, git_state, provenance
from heterofold_hub.hub.package import WEIGHTS_NAME, save_adapter
from heterofold_hub.hub.resolve import ResolvedAdapter

from conftest import tiny_model
from helpers import ROOT, random_affine


def test_the_hand_off_sums_plan_map_and_recompute_and_keeps_the_map_only_ratio():
    row = hand_off({"prefill_s": 2.0, "plan_s": 0.1, "plan_cold_s": 0.3, "transfer_s": {"heterofold": 0.1, "kv-ridge": 0.05},
                    "recompute_s": {"heterofold": 0.2}})
    assert row["end_to_end_s"] == pytest.approx({"heterofold": 0.4, "kv-ridge": 0.15})  # no recompute timed: 0
    assert row["speedup"]["end_to_end"]["heterofold"] == pytest.approx(5.0)
    assert row["speedup"]["cold"]["heterofold"] == pytest.approx(2.0 / 0.6)
    assert row["speedup"]["map_only"] == pytest.approx({"heterofold": 20.0, "kv-ridge": 40.0})


class IgnoresLogitsToKeep(torch.nn.Module):
    """A receiver whose forward accepts ``logits_to_keep`` and computes the LM head over every position anyway."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, use_cache=True, logits_to_keep=0):
        return self.model(input_ids=input_ids, use_cache=use_cache)

    @property
    def device(self):
        return self.model.device


def test_a_prefill_that_ignores_logits_to_keep_is_caught():
    model, ids = tiny_model("llama", 50), torch.arange(1, 9)[None]
    assert prefill_keeps_one_logit(model, ids)
    assert not prefill_keeps_one_logit(IgnoresLogitsToKeep(model), ids)


def test_provenance_names_the_commit_versions_threads_and_command():
    block = provenance(argv=["hf-fold", "bench", "--contexts", "256,2048"])
    assert block["command"] == "hf-fold bench --contexts 256,2048"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert block["git"]["commit"] == head and isinstance(block["git"]["dirty"], bool)
    assert block["versions"]["torch"] == torch.__version__ and block["versions"]["transformers"]
    assert block["threads"] == torch.get_num_threads() and block["date"].endswith("+00:00")


def test_a_checkout_that_is_not_the_librarys_gives_no_commit(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert git_state(tmp_path / "nested") == {"commit": None, "dirty": None}


def test_adapter_records_name_the_source_and_the_weights_hash(tmp_path):
    adapter = random_affine(tiny_model("llama", 50, layers=3), tiny_model("qwen2", 40), 2, seed=0)
    fitted = adapter_record(adapter)
    assert fitted["source"] == "fitted in this run" and fitted["hashed"].startswith("weights in memory")
    save_adapter(adapter, tmp_path)  # records the file's hash in its config
    digest = "sha256:" + hashlib.sha256((tmp_path / WEIGHTS_NAME).read_bytes()).hexdigest()
    assert fitted["weights_sha256"] == digest  # the bytes a save would write
    published = adapter_record(adapter, ResolvedAdapter(adapter, tmp_path, repo_id="heterofold/a-to-b", version="v1.2.0"))
    assert published["source"] == "heterofold/a-to-b@v1.2.0" and published["weights_sha256"] == digest
    assert adapter_record(adapter, ResolvedAdapter(adapter, tmp_path))["source"] == str(tmp_path)
