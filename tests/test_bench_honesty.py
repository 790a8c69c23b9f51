"""What keeps `hf-fold bench`'s figures honest: the hand-off's sum, the prefill it beats, and the provenance block."""

import hashlib
import re
import subprocess

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.commands.bench import BenchArgs
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.bench import WITH_RECOMPUTE, hand_off, prefill_keeps_one_logit, run_bench
from heterofold_hub.evaluation.provenance import adapter_record, cpu_record, git_state, provenance
from heterofold_hub.adapter.config import WEIGHTS_NAME
from heterofold_hub.adapter.save_and_load import save_adapter
from heterofold_hub.hub.registry import PairEnd, Registry
from heterofold_hub.hub.resolve import ResolvedAdapter
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.sender import last_hidden_states, prefill_sender, surprisal_from_hidden

from conftest import tiny_model
from helpers import ROOT, random_affine, texts


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
    assert set(block["cpu"]) == {"model", "bf16_flags"}


def test_the_cpu_record_names_the_model_and_its_bf16_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_record(info) == {"model": "AMD EPYC 9R14", "bf16_flags": ["avx512_bf16"]}
    info.write_text("processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2\n")
    assert cpu_record(info)["bf16_flags"] == []
    assert cpu_record(tmp_path / "absent")["bf16_flags"] is None


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
    folder = adapter_record(adapter, ResolvedAdapter(adapter, tmp_path), registry=Registry.empty())
    assert folder["source"] == str(tmp_path) and folder["registered_as"] is None


def test_a_folder_holding_a_registered_versions_weights_names_that_version(tmp_path):
    """A package `hf-fold pull` wrote is a plain folder; its record still says which published version it is."""
    adapter = random_affine(tiny_model("llama", 50, layers=3), tiny_model("qwen2", 40), 2, seed=0)
    save_adapter(adapter, tmp_path / "pulled")
    digest = "sha256:" + hashlib.sha256((tmp_path / "pulled" / WEIGHTS_NAME).read_bytes()).hexdigest()
    registry = Registry.empty(tmp_path / "registry.json")
    spec = {"model_type": "llama", "num_layers": 3, "kv_heads": 2, "head_dim": 16, "rope": "rotate_half", "max_positions": 512}
    end = PairEnd("tiny/a", "sha256:" + "0" * 64, "sha256:" + "1" * 64, spec)
    for version, weights in (("v1.0.0", "sha256:" + "2" * 64), ("v1.1.0", digest)):
        registry.add_version(repo_id="heterofold/a-to-b", hub="embedded", method="heterofold", sender=end,
                             receiver=end, version=version, commit="ab" * 20, files={WEIGHTS_NAME: weights},
                             metrics={"recovered": 0.5}, summary="a test adapter")
    registry.save()
    record = adapter_record(adapter, ResolvedAdapter(adapter, tmp_path / "pulled"), registry=tmp_path / "registry.json")
    assert record["source"] == str(tmp_path / "pulled") and record["registered_as"] == "heterofold/a-to-b@v1.1.0"


@pytest.fixture(scope="module")
def tiny_pair(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    return sender, receiver, random_affine(sender.model, receiver.model, 2, seed=3, method="heterofold")


@pytest.mark.parametrize("select, extra", [("content", True), ("tail", False)])
def test_a_bench_with_recompute_times_the_users_call_and_adds_the_senders_extra_pass(tiny_pair, select, extra):
    sender, receiver, adapter = tiny_pair
    settings = TransferConfig(recompute=0.25, select=select)
    result = run_bench(sender, receiver, {"heterofold": adapter}, texts(), [48], repeats=1, recompute=settings)
    row, variant = result["rows"][0], WITH_RECOMPUTE
    assert row["recompute"] == settings.to_dict() and row["recompute_of"] == {variant: "heterofold"}
    # the timed call (map + recompute) is what the user pays; the derived recompute is exactly that minus the map
    both = row["map_recompute_s"][variant]
    assert row["transfer_s"]["heterofold"] + row["recompute_s"][variant] == pytest.approx(both)
    assert (variant in row["sender_extra_s"]) is extra  # content reads the sender's surprisal; tail reads nothing
    assert row["end_to_end_s"][variant] == pytest.approx(row["plan_s"] + both + row["sender_extra_s"].get(variant, 0.0))
    assert row["speedup"]["end_to_end"][variant] == pytest.approx(row["prefill_s"] / row["end_to_end_s"][variant])
    # the pure transfer stays beside it, plan + map only
    assert row["end_to_end_s"]["heterofold"] == pytest.approx(row["plan_s"] + row["transfer_s"]["heterofold"])


def test_a_bench_without_recompute_records_none(tiny_pair):
    sender, receiver, adapter = tiny_pair
    row = run_bench(sender, receiver, {"heterofold": adapter}, texts(), [32], repeats=1,
                    recompute=TransferConfig())["rows"][0]  # all zero: the pure transfer
    assert (row["recompute"], row["recompute_s"], row["sender_extra_s"]) == (None, {}, {})
    assert row["end_to_end_s"]["heterofold"] == pytest.approx(row["plan_s"] + row["transfer_s"]["heterofold"])


def test_the_bench_surprisal_pass_is_the_one_prefill_sender_computes(tiny_pair):
    sender, _, _ = tiny_pair
    prefill = prefill_sender(sender, texts()[0][:300], surprisal=True)
    hidden = last_hidden_states(sender, prefill)
    again = surprisal_from_hidden(sender.model, hidden, prefill.input_ids, prefill.attention_mask)
    assert torch.allclose(again, prefill.surprisal, atol=1e-5) and prefill.surprisal.abs().sum() > 0


@pytest.mark.parametrize("flags, message", [
    ({"recompute": 0.1, "select": "query"}, "--select query reads the receiver's prompt: give it with --query TEXT"),
    ({"recompute": 1.5}, "recompute=1.5: pass a share of the context in [0, 1]"),
    ({"select": "oracle"}, "--select oracle needs the facts' character spans"),
])
def test_bench_recompute_flags_are_checked_before_anything_loads(flags, message):
    with pytest.raises(HeteroFoldError, match=re.escape(message)):
        BenchArgs(sender="a", receiver="b", **flags).validate()


def test_bench_runs_a_given_pair_one_way_or_both():
    one = BenchArgs(sender="a", receiver="b")
    assert one.directions() == [("a", "b")]
    assert BenchArgs(sender="a", receiver="b", both_ways=True).directions() == [("a", "b"), ("b", "a")]
