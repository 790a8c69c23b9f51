"""The experiment harness (``python -m benchmarks``): configs are checked with messages that say what to fix, and a
stage run end to end on the tiny pair writes the library's figures under one provenance block of real values."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
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
    ('[score]\nadapters = ["compress:low"]\n', ["score.adapters", "compress:low", "no [compress.low]"]),
    ('[compress.low]\nadapter = "a/b@v1.0.0"\nrnak = 4\n', ["compress.low.rnak", "not an hf-fold compress argument", "rank"]),
    ('[compress.low]\nadapter = "a/b@v1.0.0"\n', ["compress.low.rank", "required"]),
    ('[compress.low]\nadapter = "a/b@v1.0.0"\nrank = "4"\n', ["compress.low.rank", "not of type int"]),
    ('[compress.low]\nadapter = "train:kv"\nrank = 4\n', ["compress.low.adapter", "no [train.kv]"]),
    ('[train.kv]\nmethod = "kv-ridge"\nwindos = 3\n', ["train.kv.windos", "not an hf-fold train argument", "windows"]),
    ('[score]\nadapters = ["a/b@v1.0.0"]\nwindows = ["48"]\n', ["score.windows", "list of int"]),
    ('[bench]\nrepeats = "3"\n', ["bench.repeats", "not of type int"]),
    ('[handoff-speed]\nadapter = "a/b@v1.0.0"\ngrid = "tail:0.1"\nmap_dtype = "bf16"\n',
     ["handoff-speed.map_dtype", "'bf16'", "bfloat16"]),
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


def test_every_committed_config_loads_as_written():
    """Each TOML file under benchmarks/experiments is one experiment, named by its file, with the pair and the
    stages its file gives (read here from the raw TOML, independently of the parser)."""
    import tomllib

    files = sorted(config.EXPERIMENTS.glob("*.toml"))
    experiments = config.load_all()
    assert [e.name for e in experiments] == [f.stem for f in files] and files
    for experiment, file in zip(experiments, files):
        raw = tomllib.loads(file.read_text())
        assert (experiment.description, experiment.sender, experiment.receiver) == (
            raw["description"], raw["sender"], raw["receiver"]), file.name
        assert experiment.stages == [s for s in config.STAGES if s in raw], file.name


def harness(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
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


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny experiment run end to end through the CLI: a closed-form package fitted by the train stage (on a
    small text file, so the run takes seconds), then the score stage with the registered adapter beside it."""
    import inspect
    import difflib

    root = tmp_path_factory.mktemp("harness")
    experiments, results, runs = root / "experiments", root / "results", root / "runs"
    experiments.mkdir()
    data = root / "train.jsonl"  # standard-library source: shares no passage with bundled:unseen's packages
    data.write_text("".join(json.dumps({"text": inspect.getsource(m)}) + "\n" for m in (textwrap, difflib)))
    write_config(experiments, "tiny-check", HEAD + f"""
        [train.kv]
        method = "kv-ridge"
        data = "{data}"
        windows = 8
        eval_windows = 4
        context_tokens = 256
        batch_size = 4

        [compress.low]
        adapter = "{TINY_ADAPTER}"
        rank = 4
        calib_data = "{data}"
        calib_windows = 4
        context_tokens = 256
        eval_windows = 0

        [score]
        adapters = ["{TINY_ADAPTER}", "train:kv", "compress:low"]
        contexts = [256]
        windows = [6]
        batch_size = 6

        [publish]
        package = "kv"
        repo = "scratch/tiny-kv"
        version = "0.1.0"
        """)
    env = {"HF_FOLD_EXPERIMENT_RUNS": str(runs)}
    base = ["--experiments", str(experiments), "--results", str(results)]
    started = datetime.now(timezone.utc).replace(microsecond=0)  # the block's date has whole seconds
    for stage in ("train", "compress", "score"):
        run = harness(*base, "run", "tiny-check", "--stage", stage, env=env)
        assert run.returncode == 0, run.stderr
    return {"root": root, "base": base, "env": env, "runs": runs, "started": started,
            "finished": datetime.now(timezone.utc),
            "written": json.loads((results / "tiny-check.json").read_text())}


def test_the_score_stage_records_one_provenance_block_of_real_values(tiny_run):
    written = tiny_run["written"]
    assert written["experiment"] == "tiny-check" and list(written["stages"]) == ["train", "compress", "score"]
    block = written["stages"]["score"]["provenance"]
    assert block["recorded"] is True
    assert block["git"]["commit"] == git("rev-parse", "HEAD")
    source_changes = git("status", "--porcelain", "--", ".", ":(exclude)benchmarks/results", ":(exclude)runs")
    assert block["git"]["dirty"] is bool(source_changes)
    assert block["versions"]["torch"] == torch.__version__
    assert block["command"].startswith("python -m benchmarks") and block["command"].endswith("run tiny-check --stage score")
    threads = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env={
        **os.environ, "PYTHONPATH": str(ROOT), **tiny_run["env"]}, capture_output=True, text=True, check=True).stdout
    assert block["threads"] == int(threads)  # what torch gives a process started as the harness was
    assert tiny_run["started"] <= datetime.fromisoformat(block["date"]) <= tiny_run["finished"]  # UTC, this run's
    assert [m["id"] for m in block["models"].values()] == list(TINY)
    registry = json.loads((ROOT / "registry.json").read_text())
    repo, version = TINY_ADAPTER.split("@")
    published = next(v for e in registry["adapters"] if e["repo_id"] == repo for v in e["versions"]
                     if v["version"] == version)
    record = block["adapters"][TINY_ADAPTER]
    assert record["source"] == TINY_ADAPTER and record["weights_sha256"] in json.dumps(published)


def test_the_score_stage_figures_are_the_librarys(tiny_run):
    """Finite, and what the library's evaluate gives for the registered adapter on the same windows."""
    from heterofold_hub.hub.resolve import resolve_adapter

    result = tiny_run["written"]["stages"]["score"]["result"]["256"]
    assert result["adapters"]["heterofold"] == TINY_ADAPTER and result["windows"] == 6
    row = result["methods"]["heterofold"]
    assert all(math.isfinite(row[k]) for k in ("recovered", "recovered_se", "kl", "nll", "top1"))
    repo, version = TINY_ADAPTER.split("@")
    sender, receiver = tiny_sides()
    adapter = resolve_adapter(sender, receiver, adapter=repo, version=version).adapter
    direct = library_scores(adapter)
    for key in ("recovered", "kl", "nll", "top1"):
        assert row[key] == pytest.approx(direct["methods"]["heterofold"][key], rel=1e-5, abs=1e-6), key
    assert result["benefit"] == pytest.approx(direct["benefit"], rel=1e-5)


@functools.cache
def tiny_sides():
    from heterofold_hub.base_models.loading import Side

    return Side.load(TINY[0]), Side.load(TINY[1])


def library_scores(adapter) -> dict:
    """What the library's evaluate gives ``adapter`` (as row ``heterofold``) on the score stage's windows."""
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.fidelity import evaluate

    sender, receiver = tiny_sides()
    windows = make_windows(read_texts("bundled:unseen"), receiver, max_windows=6, context_tokens=256,
                           continuation_tokens=64)
    return evaluate(sender, receiver, {"heterofold": adapter}, windows, batch_size=6, data="bundled:unseen")


def test_a_trained_package_is_scored_by_name(tiny_run):
    written, runs = tiny_run["written"], tiny_run["runs"]
    trained = written["stages"]["train"]["result"]["kv"]
    package = json.loads((runs / "tiny-check" / "kv" / "adapter_config.json").read_text())
    assert trained["weights_sha256"] == package["weights_sha256"] and trained["heldout"]["windows"] == 4
    assert trained["seconds"] > 0 and trained["peak_rss_gib"] > 0.1  # what a package cost to make
    assert trained["calibration_steps"] is None  # a closed form takes no calibration steps
    record = written["stages"]["score"]["provenance"]["adapters"]["train:kv"]
    assert record["source"] == str(runs / "tiny-check" / "kv") and record["weights_sha256"] == trained["weights_sha256"]
    assert written["stages"]["score"]["result"]["256"]["adapters"]["kv-ridge"] == "train:kv"


def test_a_compressed_package_records_its_parent_and_is_scored_by_name(tiny_run):
    written, runs = tiny_run["written"], tiny_run["runs"]
    made = written["stages"]["compress"]["result"]["low"]
    package = json.loads((runs / "tiny-check" / "low" / "adapter_config.json").read_text())
    assert package["method"] == "low-rank" and made["rank"] == 4 and made["parent"] == TINY_ADAPTER
    assert made["weights_sha256"] == package["weights_sha256"]
    assert written["stages"]["compress"]["provenance"]["adapters"][TINY_ADAPTER]["weights_sha256"].startswith("sha256:")
    record = written["stages"]["score"]["provenance"]["adapters"]["compress:low"]
    assert record["weights_sha256"] == made["weights_sha256"]
    scored = written["stages"]["score"]["result"]["256"]
    assert "compress:low" in scored["adapters"].values()
    low_row = next(row for row, ref in scored["adapters"].items() if ref == "compress:low")
    from heterofold_hub.methods import load_adapter

    direct = library_scores(load_adapter(runs / "tiny-check" / "low"))["methods"]["heterofold"]
    for key in ("recovered", "kl", "nll", "top1"):  # the row named compress:low holds that package's figures
        assert scored["methods"][low_row][key] == pytest.approx(direct[key], rel=1e-5, abs=1e-6), key


def test_rerunning_compress_into_its_used_folder_is_refused_with_exit_2(tiny_run):
    """A written package is never overwritten: the stage's command refuses, and the runner says so in one line."""
    run = harness(*tiny_run["base"], "run", "tiny-check", "--stage", "compress", env=tiny_run["env"])
    assert run.returncode == 2 and "already exists and is not empty" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_publish_is_its_own_step(tiny_run, tmp_path):
    """`publish` pushes the [publish] package into the hub and registry given (a scratch one here)."""
    registry = tmp_path / "registry.json"
    run = harness(*tiny_run["base"], "publish", "tiny-check", "--hub-dir", str(tmp_path / "hub"), "--registry",
                  str(registry), env=tiny_run["env"])
    assert run.returncode == 0, run.stderr
    entry = json.loads(registry.read_text())["adapters"][0]
    assert entry["repo_id"] == "scratch/tiny-kv" and [v["version"] for v in entry["versions"]] == ["v0.1.0"]


def test_running_a_second_stage_keeps_the_first(tmp_path):
    from benchmarks.record import read, write_stage

    write_stage("x", "score", {"recorded": True}, {"512": {"a": 1}}, tmp_path)
    write_stage("x", "bench", {"recorded": True}, {"directions": []}, tmp_path)
    assert list(read("x", tmp_path)["stages"]) == ["score", "bench"]


PROVENANCE_KEYS = {"recorded", "date", "command", "git", "versions", "threads", "adapters", "models"}


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "results").glob("*.json")), ids=lambda p: p.name)
def test_each_results_file_belongs_to_an_experiment_with_one_block_per_stage(path):
    """Named by a config that has each stage the file holds; every stage's block has the same fields, and a block
    that says it was not recorded holds no value it could not know (migrated files: the sources it came from)."""
    written = json.loads(path.read_text())
    experiment = config.load(path.stem)
    assert written["experiment"] == experiment.name and set(written["stages"]) <= set(experiment.stages)
    for stage, entry in written["stages"].items():
        block = entry["provenance"]
        assert PROVENANCE_KEYS <= set(block), (stage, PROVENANCE_KEYS - set(block))
        if not block["recorded"]:
            assert all(block[k] is None for k in PROVENANCE_KEYS - {"recorded", "git"}), stage
            assert block["git"] == {"commit": None, "dirty": None} and block["migrated_from"], stage
        for source in block.get("migrated_from", {}).values():
            assert len(source["committed_in"]) == 40, source


def test_bench_refuses_to_time_another_adapter_than_its_config_names(tmp_path):
    """hf-fold bench times what the registry resolves; a config naming another version stops before timing."""
    write_config(tmp_path, "old-bench", HEAD + """
        [bench]
        adapter = "heterofold/tiny-llama-code-to-tiny-qwen-code@v1.0.0"
        contexts = [64]
        repeats = 1
        """)
    run = harness("--experiments", str(tmp_path), "--results", str(tmp_path / "results"), "run", "old-bench",
                  "--stage", "bench")
    assert run.returncode == 2 and "bench.adapter: the registry resolves" in run.stderr, run.stderr
    assert "timing" not in run.stderr and not (tmp_path / "results" / "old-bench.json").exists()


def test_bench_times_the_packages_its_config_names_beside_the_resolved_adapter(tmp_path):
    """[bench] adapters: each package a row of its own (named by its folder), recorded as the config's ref."""
    write_config(tmp_path, "beside", HEAD + f"""
        [bench]
        adapter = "{TINY_ADAPTER}"
        adapters = ["heterofold/tiny-llama-code-to-tiny-qwen-code@v1.0.0"]
        contexts = [64]
        repeats = 1
        """)
    run = harness("--experiments", str(tmp_path), "--results", str(tmp_path / "results"), "run", "beside",
                  "--stage", "bench")
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "results" / "beside.json").read_text())["stages"]["bench"]["result"]
    (row,) = result["directions"][0]["rows"]
    assert {"heterofold", "v1.0.0"} <= row["transfer_s"].keys()
    for name in ("heterofold", "v1.0.0"):  # the package's row is a hand-off of its own: plan + its map
        assert row["end_to_end_s"][name] == pytest.approx(row["plan_s"] + row["transfer_s"][name], rel=1e-9)
        assert row["speedup"]["map_only"][name] == pytest.approx(row["prefill_s"] / row["transfer_s"][name], rel=1e-9)
    assert result["packages"]["v1.0.0"]["ref"] == "heterofold/tiny-llama-code-to-tiny-qwen-code@v1.0.0"
    registry = json.loads((ROOT / "registry.json").read_text())
    published = next(v for e in registry["adapters"] if e["repo_id"] == "heterofold/tiny-llama-code-to-tiny-qwen-code"
                     for v in e["versions"] if v["version"] == "v1.0.0")
    assert result["packages"]["v1.0.0"]["weights_sha256"] == published["files"]["adapter.safetensors"]


def test_bench_packages_need_one_direction(tmp_path):
    write_config(tmp_path, "both", HEAD + f"""
        [bench]
        adapters = ["{TINY_ADAPTER}"]
        both_ways = true
        """)
    with pytest.raises(ConfigError, match="bench.adapters.*one direction"):
        config.load(tmp_path / "both.toml")


def test_a_handoff_grid_names_its_settings_and_refuses_an_unknown_option():
    from benchmarks.handoff import parse_grid
    from heterofold_hub.errors import HeteroFoldError

    settings = parse_grid("statement:0.05;statement/deferred:0.05;tail+2:0.1;oracle;statement+1~0.7/deferred:0.05",
                          [0])
    assert [s.name for s in settings] == ["transfer", "statement@0.05", "statement@0.05 deferred", "tail@0.1+L2",
                                          "oracle", "statement@0.05+L1 k0.7 deferred"]
    assert [s.config.mapped_key_scale for s in settings] == [1.0] * 5 + [0.7]
    with pytest.raises(HeteroFoldError, match=r"'/later' is not an option.*'/deferred'"):
        parse_grid("statement/later:0.05", [0])


def test_handoff_speed_times_each_setting_beside_its_bf16_maps_in_one_run(tmp_path):
    """[handoff-speed] map_dtype: every setting timed again with the adapter's products in bf16, in the same rounds,
    the same positions recomputed, and the narrowed adapter recorded as its own row."""
    write_config(tmp_path, "narrow", HEAD + f"""
        [handoff-speed]
        adapter = "{TINY_ADAPTER}"
        grid = "tail:0.1"
        lengths = [256]
        repeats = 1
        map_dtype = "bfloat16"
        """)
    run = harness("--experiments", str(tmp_path), "--results", str(tmp_path / "results"), "run", "narrow",
                  "--stage", "handoff-speed")
    assert run.returncode == 0, run.stderr
    stage = json.loads((tmp_path / "results" / "narrow.json").read_text())["stages"]["handoff-speed"]
    (row,) = stage["result"]["lengths"].values()
    names = list(row["settings"])
    assert names == ["transfer", "transfer (bfloat16 maps)", "tail@0.1", "tail@0.1 (bfloat16 maps)"], names
    for setting in row["settings"].values():  # each setting's speed-up is native prefill over its own hand-off
        assert setting["speedup"] == pytest.approx(row["native_prefill_s"] / setting["end_to_end_s"], rel=1e-9)
    # tail@0.1 recomputes round(0.1 * m) of the context's m mapped positions, with either map dtype
    from heterofold_hub.evaluation.handoff import make_handoff_prompts
    from heterofold_hub.evaluation.retrieval import filler_texts
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.modeling import HeteroFoldModel

    repo, version = TINY_ADAPTER.split("@")
    model = HeteroFoldModel.from_pretrained(*TINY, adapter=repo, revision=version)
    prompt = make_handoff_prompts(filler_texts(read_texts("bundled:unseen")), model.receiver, 256, 1, fmt="code")[0]
    mapped = int(model.pipeline.plan([prompt.context]).alignment.mapped_mask.sum())
    share = round(0.1 * mapped) / mapped
    assert row["settings"]["tail@0.1"]["recomputed_share"] == pytest.approx(share, rel=1e-12)
    assert row["settings"]["tail@0.1 (bfloat16 maps)"]["recomputed_share"] == pytest.approx(share, rel=1e-12)
    adapters = stage["provenance"]["adapters"]
    assert adapters["heterofold (bfloat16 maps)"]["map_dtype"] == "bfloat16"
    assert adapters["heterofold (bfloat16 maps)"]["weights_sha256"] == adapters["heterofold"]["weights_sha256"]


def test_handoff_stages_load_the_adapter_with_its_products_in_map_dtype(tmp_path):
    """[handoff] map_dtype: the model the stage scores has only its adapter narrowed (receiver float32), and the
    provenance block says so."""
    from benchmarks.stages import _model, _model_block

    path = write_config(tmp_path, "narrow-facts", HEAD + f"""
        [handoff]
        adapter = "{TINY_ADAPTER}"
        grid = "tail:0.1"
        map_dtype = "bfloat16"
        """)
    experiment = config.load(path)
    model = _model(experiment, experiment.handoff.adapter, experiment.handoff.map_dtype)
    assert {p.dtype for p in model.resolved.adapter.parameters()} == {torch.bfloat16}
    assert model.receiver.model.dtype == torch.float32
    block = _model_block(model, {}, experiment.handoff.map_dtype)
    assert block["adapters"]["heterofold"]["map_dtype"] == "bfloat16"
    assert block["adapters"]["heterofold"]["weights_sha256"].startswith("sha256:")


def test_handoff_curve_names_each_strategy_once_and_keeps_bf16_maps_apart():
    """The trade-off plot's series: a repair suffix is kept once ("oracle+L2", not "oracle+L2+L2"), a share is
    dropped, and a run with bf16 maps is its own series (not a point on the float32 maps' curve)."""
    from benchmarks.handoff_plot import points

    def run(rows: dict, map_dtype=None) -> dict:
        cells = {name: {"recomputed_share": share, "kept": kept} for name, (share, kept) in rows.items()}
        return {"docs": 96, "map_dtype": map_dtype, "formats": {"code": {"512": cells}}}

    float32 = run({"native": (1.0, 1.0), "transfer": (0.0, 0.0), "oracle+L2": (0.03, 0.86),
                   "query@0.05+L2": (0.05, 0.85), "statement-tail@0.15": (0.15, 1.17)})
    bf16 = run({"native": (1.0, 1.0), "transfer": (0.0, 0.0), "statement-tail@0.12": (0.12, 1.17)}, "bfloat16")
    screen = {**run({"tail@0.1": (0.1, 0.5)}), "docs": 16}  # too few documents to draw
    panel = points([float32, bf16, screen])[("code", 512)]
    assert panel == {"transfer (no recompute)": [(0.0, 0.0)], "oracle+L2": [(0.03, 0.86)], "query+L2": [(0.05, 0.85)],
                     "statement-tail": [(0.15, 1.17)], "statement-tail (bf16 maps)": [(0.12, 1.17)]}
