"""Evaluations added to published versions: appended (never rewritten), strict, and their recommended setting is
what HeteroFoldModel uses unless told otherwise."""

import json
import shutil

import pytest
import torch

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
    assert model.transfer(prefill, text).recompute == {"recompute": 0.1, "select": "tail", "repair_layers": 1,
                                                       "mapped_key_scale": 1.0, "share": pytest.approx(0.1, abs=0.02)}
    assert model.transfer(prefill, text, recompute=0).recompute is None
    assert json.loads(registry_copy.read_text())["schema_version"] == 1


def test_a_recommendation_that_reads_the_prompt_uses_the_query_or_waits_for_the_receivers_prompt(registry_copy):
    registry = Registry.load(registry_copy)
    evaluation = {**EVALUATION, "recommended": {"recompute": 0.2, "select": "statement", "repair_layers": 0}}
    registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=evaluation)
    registry.save(registry_copy)
    model = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code",
                                            registry=registry_copy)
    text = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    prefill = model.prefill_sender(text)
    waiting = model.transfer(prefill, text)  # no query: the pure transfer's cache, the recompute deferred
    assert waiting.recompute["deferred"] and waiting.recompute["select"] == "statement"
    kw = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert model.generate(waiting, **kw).shape == (1, 3)  # no prompt either: continues from the pure transfer
    asked = model.transfer(prefill, text, query="def sub(")
    assert asked.recompute["select"] == "statement" and asked.recompute["recompute"] == 0.2
    assert 0 < asked.recompute["share"] <= 0.2
    assert torch.equal(model.generate(waiting, prompt="def sub(", **kw), model.generate(asked, prompt="def sub(", **kw))
    assert model.transfer(prefill, text, query="def sub(", recompute=0).recompute is None
    from helpers import hf_fold

    shown = hf_fold("show", REPO, "--registry", str(registry_copy))
    assert "recompute 0.2 by statement (reads the prompt)" in shown.stdout, (
        shown.stdout + shown.stderr)


def test_show_lists_the_evaluations_beside_the_published_metrics(registry_copy):
    from helpers import hf_fold

    registry = Registry.load(registry_copy)
    registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=EVALUATION)
    registry.save(registry_copy)
    shown = hf_fold("show", REPO, "--registry", str(registry_copy))
    assert shown.returncode == 0, shown.stderr
    assert "evaluations added after publishing" in shown.stdout
    assert "retrieval-handoff" in shown.stdout and "recompute 0.1 by tail + first 1 layers" in shown.stdout


def _handoff_file(path, stage: str, result: dict, *, dirty: bool = False):
    """A hand-off experiment's results file, as the harness writes it (one stage, with its provenance)."""
    block = {"recorded": True, "date": "2026-12-02T16:00:00+00:00", "command": "python -m benchmarks run x",
             "git": {"commit": "ab" * 20, "dirty": dirty},
             "adapters": {"heterofold": {"source": f"{REPO}@v1.1.0"}}}
    path.write_text(json.dumps({"experiment": {}, "stages": {stage: {"provenance": block, "result": result}}}))


def _speed_file(path, speedups: dict[str, float]):
    """A handoff-speed results file timing ``speedups`` (setting -> end-to-end speed-up) at 2047 tokens."""
    timed = {"settings": {name: {"speedup": x} for name, x in speedups.items()}}
    _handoff_file(path, "handoff-speed", {"lengths": {"2047": timed}})


def _cells(length: int, kept: dict[str, tuple[float, float]]) -> dict:
    """A hand-off result at one length: per setting (share kept, share recomputed), 96 documents."""
    rows = {name: {"kept": k, "recomputed_share": r} for name, (k, r) in kept.items()}
    rows |= {"native": {"kept": 1.0, "recomputed_share": 1.0}, "transfer": {"kept": 0.0, "recomputed_share": 0.0}}
    return {"docs": 96, "data": "bundled:unseen", "formats": {"code": {str(length): rows}}}


def test_recommend_records_the_least_recompute_that_keeps_90_percent_everywhere(registry_copy, tmp_path):
    """Of the settings measured at every length, the one recomputing least among those keeping >= 90% of native in
    every cell: not the cheapest overall (it fails a cell), not one measured at one length only."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    results = tmp_path / "results"
    results.mkdir()
    _handoff_file(results / "real-s2g-handoff.json", "handoff", _cells(512, {
        "tail@0.01": (0.95, 0.01), "tail@0.05": (0.92, 0.05), "tail@0.2": (0.97, 0.2), "oracle": (1.0, 0.005)}))
    _handoff_file(results / "real-s2g-handoff-2048.json", "handoff", _cells(2048, {
        "tail@0.01": (0.6, 0.01), "tail@0.05": (0.91, 0.05), "tail@0.2": (0.99, 0.2)}))
    _speed_file(results / "real-s2g-handoff-speed.json", {"transfer": 40.0, "tail@0.05": 9.5})
    evaluate_registry.main(["recommend", "--registry", str(registry_copy), "--results", str(results)])
    entry = next(e for e in Registry.load(registry_copy).adapters if e.repo_id == REPO)
    version = next(v for v in entry.versions if v.version == "v1.1.0")
    evaluation = version.evaluations[-1]
    assert evaluation.recommended == {"recompute": 0.05, "select": "tail", "repair_layers": 0}
    assert evaluation.results["kept_code_2048"] == 0.91 and evaluation.results["speedup_2047"] == 9.5
    _handoff_file(results / "real-s2g-handoff-2048.json", "handoff", _cells(2048, {"tail@0.05": (0.91, 0.05)}),
                  dirty=True)
    with pytest.raises(SystemExit, match="uncommitted changes"):
        evaluate_registry.main(["recommend", "--registry", str(registry_copy), "--results", str(results)])


def test_recommend_judges_a_setting_on_every_cell_or_leaves_it_out(registry_copy, tmp_path, capsys):
    """Facts at 2048 tokens measured on code first and on prose in a later run: until then the cheaper setting, which
    keeps 90% in every cell it has, lacks the prose cell at 2048 and is not recommended on five cells of six; the one
    measured in all six is, and the one left out is named with the cell it lacks."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    results = tmp_path / "results"
    results.mkdir()
    both = {"tail@0.05": (0.95, 0.05), "tail@0.2": (0.97, 0.2)}
    short = _cells(512, both)
    short["formats"]["prose"] = _cells(512, both)["formats"]["code"]
    _handoff_file(results / "real-s2g-handoff.json", "handoff", short)
    _handoff_file(results / "real-s2g-handoff-2048-code.json", "handoff", _cells(2048, both))
    prose = _cells(2048, {"tail@0.2": (0.99, 0.2)})
    prose["formats"] = {"prose": prose["formats"]["code"]}
    _handoff_file(results / "real-s2g-handoff-2048-prose.json", "handoff", prose)
    _speed_file(results / "real-s2g-handoff-speed.json", {"transfer": 40.0, "tail@0.05": 9.5, "tail@0.2": 4.0})
    evaluate_registry.main(["recommend", "--registry", str(registry_copy), "--results", str(results)])
    assert "tail@0.05: left out, not measured on prose 2048" in capsys.readouterr().out
    evaluation = version_of(Registry.load(registry_copy), REPO).evaluations[-1]
    assert evaluation.recommended == {"recompute": 0.2, "select": "tail", "repair_layers": 0}
    assert {key for key in evaluation.results if key.startswith("kept_")} == {
        f"kept_{fmt}_{n}" for fmt in ("code", "prose") for n in (512, 2048)}


def test_recommend_reads_the_named_pairs_experiments_and_never_recommends_the_oracle(registry_copy, tmp_path):
    """``--experiments real-g2s-handoff`` reads that pair's files only; the oracle (it needs the answer's place) keeps
    the most for the least but is no setting a user can run; a missing speed file is named with its command."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    results = tmp_path / "results"
    results.mkdir()
    _handoff_file(results / "real-g2s-handoff.json", "handoff", _cells(512, {
        "oracle": (1.0, 0.005), "oracle+2": (1.0, 0.1), "statement@0.05": (0.93, 0.03), "tail@0.01": (0.5, 0.01)}))
    _handoff_file(results / "real-s2g-handoff.json", "handoff", _cells(512, {"tail@0.01": (0.99, 0.01)}))
    argv = ["recommend", "--registry", str(registry_copy), "--results", str(results),
            "--experiments", "real-g2s-handoff"]
    with pytest.raises(SystemExit, match=r"no real-g2s-handoff-speed\*\.json .*run real-g2s-handoff-speed"):
        evaluate_registry.main(argv)
    _speed_file(results / "real-g2s-handoff-speed.json", {"transfer": 20.0, "statement@0.05": 12.0})
    evaluate_registry.main(argv)
    evaluation = version_of(Registry.load(registry_copy), REPO).evaluations[-1]
    assert evaluation.recommended == {"recompute": 0.05, "select": "statement", "repair_layers": 0}
    assert evaluation.results["kept_code_512"] == 0.93 and evaluation.results["speedup_2047"] == 12.0


def test_recommend_prefers_the_setting_that_keeps_more_for_the_same_recompute_and_records_its_key_scale(
        registry_copy, tmp_path):
    """Two settings recomputing the same positions (the keys left mapped scaled or not): the one whose lowest cell
    keeps more is recorded, its ``mapped_key_scale`` with it, and it loads as the version's recommended config."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry
    from heterofold_hub.transfer.config import TransferConfig

    results = tmp_path / "results"
    results.mkdir()
    _handoff_file(results / "real-s2g-handoff.json", "handoff", _cells(512, {
        "statement@0.05": (0.93, 0.03), "statement@0.05 k0.7": (1.2, 0.03), "statement@0.05 k0.5": (0.95, 0.03)}))
    _speed_file(results / "real-s2g-handoff-speed.json", {"transfer": 40.0, "statement@0.05 k0.7": 9.0})
    evaluate_registry.main(["recommend", "--registry", str(registry_copy), "--results", str(results)])
    version = next(v for e in Registry.load(registry_copy).adapters if e.repo_id == REPO
                   for v in e.versions if v.version == "v1.1.0")
    recommended = version.evaluations[-1].recommended
    assert recommended == {"recompute": 0.05, "select": "statement", "repair_layers": 0, "mapped_key_scale": 0.7}
    assert TransferConfig.from_dict(recommended).label == "statement@0.05 k0.7"
    from helpers import hf_fold

    shown = hf_fold("show", REPO, "--registry", str(registry_copy))
    assert "recompute 0.05 by statement (reads the prompt), keys left mapped x0.7" in shown.stdout, shown.stderr


def test_a_recommended_key_scale_is_checked_like_the_other_fields(registry_copy):
    registry = Registry.load(registry_copy)
    bad = {**EVALUATION, "recommended": {**EVALUATION["recommended"], "mapped_key_scale": "0.7"}}
    with pytest.raises(RegistryError, match="recommended.mapped_key_scale: found str '0.7'; expected a number"):
        registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=bad)
    zero = {**EVALUATION, "recommended": {**EVALUATION["recommended"], "mapped_key_scale": 0.0}}
    with pytest.raises(RegistryError, match="mapped_key_scale"):
        registry.add_evaluation(repo_id=REPO, version=version_of(registry, REPO).version, evaluation=zero)


def test_recommend_takes_the_speed_ups_from_the_newest_speed_run_that_timed_the_setting(registry_copy, tmp_path):
    """A setting added after the first speed run is timed in a second one (``PREFIX-speed-k07``): its speed-ups come
    from there, and a setting no speed run timed is refused, naming the files read."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    results = tmp_path / "results"
    results.mkdir()
    _handoff_file(results / "real-g2s-handoff.json", "handoff", _cells(512, {
        "statement@0.05": (0.6, 0.03), "statement@0.05 k0.7": (1.1, 0.03)}))
    _speed_file(results / "real-g2s-handoff-speed.json", {"transfer": 15.0, "statement@0.05": 8.0})
    argv = ["recommend", "--registry", str(registry_copy), "--results", str(results),
            "--experiments", "real-g2s-handoff"]
    with pytest.raises(SystemExit, match=r"statement@0.05 k0.7 is not timed in real-g2s-handoff-speed\.json"):
        evaluate_registry.main(argv)
    _speed_file(results / "real-g2s-handoff-speed-k07.json", {"transfer": 16.0, "statement@0.05 k0.7": 8.4})
    evaluate_registry.main(argv)
    evaluation = version_of(Registry.load(registry_copy), REPO).evaluations[-1]
    assert evaluation.recommended == {"recompute": 0.05, "select": "statement", "repair_layers": 0,
                                      "mapped_key_scale": 0.7}
    assert evaluation.results["speedup_2047"] == 8.4 and evaluation.results["speedup_transfer_2047"] == 16.0
    assert "real-g2s-handoff-speed-k07.json" in evaluation.command


def test_recommend_reads_the_adapters_own_dtype_not_a_bf16_twins_run(registry_copy, tmp_path):
    """A hand-off run with the products in bf16 (``map_dtype``) of cells the float32 runs measured, whose file
    sorts after theirs: the recommendation keeps the float32 cells, and its record names only the files it read."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    results = tmp_path / "results"
    results.mkdir()
    _handoff_file(results / "real-g2s-handoff.json", "handoff", _cells(512, {"statement@0.05 k0.7": (1.2, 0.03)}))
    _handoff_file(results / "real-g2s-handoff-1024.json", "handoff",
                  _cells(1024, {"statement@0.05 k0.7": (1.25, 0.02)}))
    _handoff_file(results / "real-g2s-handoff-bf16.json", "handoff",
                  {**_cells(1024, {"statement@0.05 k0.7": (0.5, 0.02)}), "map_dtype": "bfloat16"})
    _speed_file(results / "real-g2s-handoff-speed.json", {"transfer": 15.0, "statement@0.05 k0.7": 8.4})
    evaluate_registry.main(["recommend", "--registry", str(registry_copy), "--results", str(results),
                            "--experiments", "real-g2s-handoff"])
    evaluation = version_of(Registry.load(registry_copy), REPO).evaluations[-1]
    assert evaluation.results["kept_code_1024"] == 1.25 and evaluation.results["kept_code_512"] == 1.2
    assert "real-g2s-handoff-bf16.json" not in evaluation.command


def test_score_one_version_writes_a_file_of_its_own_and_record_adds_only_its_evaluation(registry_copy, tmp_path):
    """``score --version`` measures the named version alone (beside native and no context) without touching the
    pair's full file, and ``record`` adds one evaluation to it and none to the versions it did not score, once."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    out = tmp_path / "scores"
    chosen = f"{REPO}@v1.1.0"
    evaluate_registry.main(["score", "--registry", str(registry_copy), "--out", str(out), "--version", chosen,
                            "--windows", "2", "--context-tokens", "64", "--continuation-tokens", "16"])
    [written] = out.glob("*.json")
    assert written.name == "heterofold--tiny-llama-code__heterofold--tiny-qwen-code__" \
                           "tiny-llama-code-to-tiny-qwen-code@v1.1.0.json"
    result = json.loads(written.read_text())
    assert set(result["methods"]) == {"native", "no-context", chosen}
    assert len(result["per_window"]["windows"]) == 2

    # record reads what ran at a commit; the checkout under test may have edits, so the file says it was clean
    result["provenance"]["git"] |= {"commit": "ab" * 20, "dirty": False}
    written.write_text(json.dumps(result))
    before = {v.version: len(v.evaluations) for e in Registry.load(registry_copy).adapters if e.repo_id == REPO
              for v in e.versions}
    for _ in range(2):
        evaluate_registry.main(["record", "--registry", str(registry_copy), "--out", str(out)])
    after = {v.version: len(v.evaluations) for e in Registry.load(registry_copy).adapters if e.repo_id == REPO
             for v in e.versions}
    assert after == before | {"v1.1.0": before["v1.1.0"] + 1}


def test_score_refuses_a_version_that_is_not_registered_and_names_those_that_are(registry_copy, tmp_path):
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks import evaluate_registry

    with pytest.raises(SystemExit, match=rf"--version '{REPO}@v9.0.0' is not a registered adapter version; "
                                         rf"registered: {REPO}@v1.0.0, {REPO}@v1.1.0\."):
        evaluate_registry.main(["score", "--registry", str(registry_copy), "--out", str(tmp_path / "scores"),
                                "--version", f"{REPO}@v9.0.0"])
    assert not (tmp_path / "scores").exists()
