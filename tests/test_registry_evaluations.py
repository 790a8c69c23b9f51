"""Evaluations added to published versions: appended (never rewritten), strict, and their recommended setting is
what HeteroFoldModel uses unless told otherwise."""

import json
import shutil

import pytest

from heterofold_hub.hub.registry import Registry, RegistryError
from heterofold_hub.modeling import HeteroFoldModel

from helpers import ROOT

REPO = "heterofold/tiny-llama-code-to-tiny-qwen-code"
EVALUATION = {"task": "retrieval-handoff", "data": "bundled:unseen", "date": "2026-12-02", "commit": "0" * 40,
              "command": "python benchmarks/handoff.py --name x", "results": {"kept": 0.9, "speedup": 6.5},
              "recommended": {"recompute": 0.1, "select": "tail", "repair_layers": 1}}


@pytest.fixture
def registry_copy(tmp_path):
    """The project's registry and embedded hub, copied (the hub linked) so the test may add to it."""
    shutil.copy(ROOT / "registry.json", tmp_path / "registry.json")
    (tmp_path / "hub").symlink_to(ROOT / "hub")
    return tmp_path / "registry.json"


def version_of(registry: Registry, repo: str):
    entry = next(e for e in registry.adapters if e.repo_id == repo)
    return entry.versions[-1]


def test_an_evaluation_is_appended_and_the_version_is_otherwise_unchanged(registry_copy):
    registry = Registry.load(registry_copy)
    before = version_of(registry, REPO).to_dict()
    registry.add_evaluation(repo_id=REPO, version=before["version"], evaluation=EVALUATION)
    registry.save(registry_copy)
    after = version_of(Registry.load(registry_copy), REPO).to_dict()
    earlier = before.pop("evaluations", [])  # the shipped registry's own re-measurements come first
    assert after.pop("evaluations") == earlier + [EVALUATION]
    assert after == before  # files, metrics and commit as published
    assert version_of(Registry.load(registry_copy), REPO).recommended == EVALUATION["recommended"]


@pytest.mark.parametrize("change, message", [
    ({"results": {"kept": float("nan")}}, "evaluation.results.kept: found NaN; expected a finite number"),
    ({"recommended": {"recompute": 0.1, "select": "tail"}}, "no key\\(s\\) repair_layers"),
    ({"commit": "abc"}, "commit: found 'abc'; expected a 40-hex-digit git commit"),
])
def test_a_bad_evaluation_is_refused_with_its_path(registry_copy, change, message):
    registry = Registry.load(registry_copy)
    with pytest.raises(RegistryError, match=message):
        registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version,
                                evaluation={**EVALUATION, **change})


def test_an_unpublished_version_cannot_be_evaluated(registry_copy):
    with pytest.raises(RegistryError, match="v9.9.9 is not registered .*publish it first"):
        Registry.load(registry_copy).add_evaluation(repo_id=REPO, version="v9.9.9", evaluation=EVALUATION)


def test_the_recommended_setting_is_the_default_and_recompute_0_the_pure_transfer(registry_copy):
    registry = Registry.load(registry_copy)
    registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=EVALUATION)
    registry.save(registry_copy)
    model = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code",
                                            registry=registry_copy)
    text = "def add(a, b):\n    return a + b\n" * 8
    prefill = model.prefill_sender(text)
    assert model.transfer(prefill, text).recompute == {"fraction": 0.1, "select": "tail", "repair_layers": 1,
                                                       "share": pytest.approx(0.1, abs=0.02)}
    assert model.transfer(prefill, text, recompute=0).recompute is None
    assert json.loads(registry_copy.read_text())["schema_version"] == 1


def test_a_recommendation_that_reads_the_prompt_applies_only_to_calls_that_pass_it(registry_copy):
    registry = Registry.load(registry_copy)
    evaluation = {**EVALUATION, "recommended": {"recompute": 0.2, "select": "statement", "repair_layers": 0}}
    registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=evaluation)
    registry.save(registry_copy)
    model = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code",
                                            registry=registry_copy)
    text = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    prefill = model.prefill_sender(text)
    assert model.transfer(prefill, text).recompute is None  # no prompt: the pure transfer, never an error
    asked = model.transfer(prefill, text, query="def sub(").recompute
    assert asked["select"] == "statement" and asked["fraction"] == 0.2 and 0 < asked["share"] <= 0.2
    assert model.transfer(prefill, text, query="def sub(", recompute=0).recompute is None
    from helpers import hf_fold

    shown = hf_fold("show", REPO, "--registry", str(registry_copy))
    assert "recompute 0.2 by statement (calls with query=)" in shown.stdout, shown.stdout + shown.stderr


def test_show_lists_the_evaluations_beside_the_published_metrics(registry_copy):
    from helpers import hf_fold

    registry = Registry.load(registry_copy)
    registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=EVALUATION)
    registry.save(registry_copy)
    shown = hf_fold("show", REPO, "--registry", str(registry_copy))
    assert shown.returncode == 0, shown.stderr
    assert "evaluations added after publishing" in shown.stdout
    assert "retrieval-handoff" in shown.stdout and "recompute 0.1 by tail + first 1 layers" in shown.stdout
