"""The stages an experiment can run, each through the function its ``hf-fold`` command runs (``run_train``,
``run_compress``, ``run_eval``, ``run_retrieval``, ``run_bench_command``), so a harness figure is a CLI figure.
Each returns ``(provenance, result)``; the provenance block is started before any model is loaded. ``plot``: where a stage
that draws one (retrieval, bench) writes its plot, ``NAME-STAGE.png`` beside the results file."""

from __future__ import annotations

import resource
import time
from pathlib import Path

from rich.console import Console

from benchmarks.config import ConfigError, Experiment
from benchmarks.record import model_record, start_provenance

ROOT = Path(__file__).resolve().parents[1]


def _sides(experiment: Experiment):
    """Tokenizers and layouts only (what the adapter checks need), for recording and resolving before the run."""
    from heterofold_hub.base_models.loading import Side

    return Side.load(experiment.sender, with_model=False), Side.load(experiment.receiver, with_model=False)


def resolve_refs(experiment: Experiment, refs: list[str], sender, receiver) -> tuple[list[Path], dict]:
    """``(package folders, {ref: adapter record})``: each ``repo@version``, ``train:NAME`` or ``compress:NAME``
    resolved and checked against the pair, with its source and weights sha256 recorded."""
    from heterofold_hub.evaluation.provenance import adapter_record
    from heterofold_hub.hub.resolve import resolve_adapter

    folders, records = [], {}
    for ref in refs:
        made_here = ref.partition(":")[2] if ref.startswith(("train:", "compress:")) else None
        if made_here is not None:
            found = resolve_adapter(sender, receiver, adapter=ROOT / experiment.package(made_here))
        else:
            repo_id, version = ref.split("@")
            found = resolve_adapter(sender, receiver, adapter=repo_id, version=version)
        folders.append(Path(found.folder))
        records[ref] = adapter_record(found.adapter, found)
    return folders, records


def _named(result: dict, folders: list[Path], refs: list[str]) -> dict:
    """The result's ``adapters`` (row -> package folder) as the config's refs, not this machine's paths."""
    by_folder = {str(folder): ref for folder, ref in zip(folders, refs)}
    result["adapters"] = {row: by_folder.get(source, source) for row, source in result.get("adapters", {}).items()}
    return result


def _fitted(methods: list[str], data: str) -> dict:
    return {m: {"method": m, "source": f"fitted in this run on {data}"} for m in methods}


def _begin(experiment: Experiment, argv: list[str]):
    """A stage's provenance block, started before anything loads, and the pair it then loads and records."""
    block = start_provenance(argv)
    sender, receiver = _sides(experiment)
    block["models"] = {"sender": model_record(sender), "receiver": model_record(receiver)}
    return block, sender, receiver


def _scored_adapters(experiment: Experiment, cfg, block: dict, sender, receiver) -> list:
    """The package folders ``cfg.adapters`` name, recorded in ``block`` beside the methods fitted in the run."""
    folders, block["adapters"] = resolve_refs(experiment, cfg.adapters, sender, receiver)
    block["adapters"].update(_fitted(cfg.methods, cfg.calib_data))
    return folders


def score(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Fidelity at each context length: ``{"512": hf-fold eval's JSON, ...}``."""
    from heterofold_hub.commands.evaluate import EvalArgs, run_eval

    cfg = experiment.score
    block, sender, receiver = _begin(experiment, argv)
    folders = _scored_adapters(experiment, cfg, block, sender, receiver)
    result = {}
    for context, windows in zip(cfg.contexts, cfg.windows):
        args = EvalArgs(sender=experiment.sender, receiver=experiment.receiver, methods=list(cfg.methods), data=cfg.data,
                        calib_data=cfg.calib_data, context_tokens=context, continuation_tokens=cfg.continuation_tokens,
                        windows=windows, calib_windows=cfg.calib_windows, batch_size=cfg.batch_size, seed=cfg.seed,
                        adapters=folders, registered=False, dtype=cfg.dtype, map_dtype=cfg.map_dtype)
        scored = run_eval(args, console)
        scored.pop("provenance")  # the stage's block records the run and its adapters (by ref) once
        result[str(context)] = _named(scored, folders, cfg.adapters)
    return block, result


def retrieval(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Exact-fact retrieval: hf-fold eval --task retrieval's JSON."""
    from heterofold_hub.commands.retrieval import RetrievalArgs, run_retrieval

    cfg = experiment.retrieval
    block, sender, receiver = _begin(experiment, argv)
    folders = _scored_adapters(experiment, cfg, block, sender, receiver)
    args = RetrievalArgs(sender=experiment.sender, receiver=experiment.receiver, methods=list(cfg.methods),
                         data=cfg.data, calib_data=cfg.calib_data, lengths=list(cfg.lengths), docs=cfg.docs,
                         batch_size=cfg.batch_size, seed=cfg.seed, adapters=folders, registered=False,
                         recompute=cfg.recompute, select=cfg.select, repair_layers=cfg.repair_layers,
                         plot_path=plot)
    found = run_retrieval(args, console)
    found.pop("provenance")  # the stage's block records the run and its adapters (by ref) once
    return block, _named(found, folders, cfg.adapters)


def bench(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Timings: hf-fold bench's JSON (``{"directions": [...]}``). hf-fold bench times the adapter the registry
    resolves for the pair; the config's ``adapter`` says which that must be, checked before timing, so a newer
    registered version is never timed under this experiment's name. Each direction's adapters (recorded by bench
    before timing) move into the one block."""
    from heterofold_hub.commands.bench import BenchArgs, package_name, run_bench_command
    from heterofold_hub.hub.resolve import resolve_adapter

    cfg = experiment.bench
    block, sender, receiver = _begin(experiment, argv)
    if cfg.adapter is not None:
        found = resolve_adapter(sender, receiver)
        if f"{found.repo_id}@{found.version}" != cfg.adapter:
            raise ConfigError(f"{experiment.path}: bench.adapter: the registry resolves {found.repo_id}@{found.version} "
                              f"for this pair, not {cfg.adapter}; hf-fold bench times what it resolves. Set "
                              "bench.adapter to it (in a new experiment if these figures must stay)")
    folders, records = resolve_refs(experiment, cfg.adapters, sender, receiver)
    args = BenchArgs(sender=experiment.sender, receiver=experiment.receiver, contexts=list(cfg.contexts),
                     repeats=cfg.repeats, data=cfg.data, dtype=cfg.dtype, map_dtype=cfg.map_dtype, device=cfg.device,
                     recompute=cfg.recompute,
                     select=cfg.select, query=cfg.query, both_ways=cfg.both_ways, plot_path=plot, adapters=folders)
    directions = run_bench_command(args, console)
    for direction in directions:
        made = direction.pop("provenance")
        block["adapters"][f"{direction['sender']} -> {direction['receiver']}"] = made["adapters"]
    result = {"directions": directions}
    if records:  # each package row (named by its folder) as the ref the config gave, with its weights
        result["packages"] = {package_name(folder): {"ref": ref, **records[ref]}
                              for folder, ref in zip(folders, cfg.adapters)}
    return block, result


def train(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Each ``[train.NAME]`` package through hf-fold train's trainer into ``runs/experiments/<experiment>/NAME``:
    ``{NAME: {"package", "weights_sha256", "heldout": the trainer's held-out table, "seconds" (load, prepare, fit
    and held-out table), "calibration_steps", "peak_rss_gib"}}``."""
    import json

    from heterofold_hub.adapter.config import CONFIG_NAME
    from heterofold_hub.trainers.train import TrainArgs, run_train

    block, sender, receiver = _begin(experiment, argv)
    result = {}
    for name, table in experiment.train.items():
        out = ROOT / experiment.package(name)
        started = time.perf_counter()
        held_out = run_train(TrainArgs(sender=experiment.sender, receiver=experiment.receiver, out=out, **table), console)
        config = json.loads((out / CONFIG_NAME).read_text())
        result[name] = {"package": str(experiment.package(name)), "weights_sha256": config.get("weights_sha256"),
                        "heldout": held_out, "seconds": time.perf_counter() - started,
                        "calibration_steps": config.get("extra", {}).get("calibration_steps"),
                        # the process's peak so far: a later package of the same run includes the earlier ones'
                        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    return block, result


def compress(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Each ``[compress.NAME]`` package through hf-fold compress into ``runs/experiments/<experiment>/NAME``, its
    parent (the table's ``adapter`` ref) recorded: ``{NAME: {"package", "weights_sha256", "parent", "rank",
    "calibration_error"}}``."""
    import json

    from heterofold_hub.adapter.config import CONFIG_NAME
    from heterofold_hub.commands.compress import CompressArgs, run_compress

    block, sender, receiver = _begin(experiment, argv)
    result = {}
    for name, table in experiment.compress.items():
        (parent,), records = resolve_refs(experiment, [table["adapter"]], sender, receiver)
        block["adapters"].update(records)
        out = ROOT / experiment.package(name)
        run_compress(CompressArgs(**{**table, "adapter": str(parent)}, out=out, sender=experiment.sender,
                                  receiver=experiment.receiver), console)
        config = json.loads((out / CONFIG_NAME).read_text())
        result[name] = {"package": str(experiment.package(name)), "weights_sha256": config.get("weights_sha256"),
                        "parent": table["adapter"], "rank": table["rank"],
                        "calibration_error": config.get("extra", {}).get("calibration_error")}
    return block, result


def _model(experiment: Experiment, ref: str, map_dtype: str | None = None):
    """The hand-off model with the adapter ``ref`` names (``repo@version``), the sender loaded too; ``map_dtype``:
    the adapter's products in that dtype (``from_pretrained(map_dtype=)``)."""
    import torch

    from heterofold_hub.modeling import HeteroFoldModel

    repo_id, version = ref.split("@")
    return HeteroFoldModel.from_pretrained(experiment.sender, experiment.receiver, adapter=repo_id, revision=version,
                                           load_sender=True, map_dtype=map_dtype and getattr(torch, map_dtype))


def _model_block(model, started: dict, map_dtype: str | None = None) -> dict:
    """The models and the adapter into a provenance block; ``map_dtype`` is recorded on the adapter (its hash is
    the published float32 weights')."""
    from heterofold_hub.evaluation.provenance import adapter_record

    started["models"] = {"sender": model_record(model.sender), "receiver": model_record(model.receiver)}
    record = adapter_record(model.resolved.adapter, model.resolved)
    started["adapters"] = {"heterofold": {**record, "map_dtype": map_dtype} if map_dtype else record}
    return started


def handoff(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Exact-fact retrieval across the hand-off over the config's recompute grid (benchmarks/handoff.py)."""
    from benchmarks.handoff import measure_handoff, parse_grid

    cfg = experiment.handoff
    block = start_provenance(argv)
    model = _model(experiment, cfg.adapter, cfg.map_dtype)
    _model_block(model, block, cfg.map_dtype)
    result = measure_handoff(model, parse_grid(cfg.grid, list(cfg.repair)), lengths=list(cfg.lengths), docs=cfg.docs,
                             formats=list(cfg.formats), data=cfg.data, batch_size=cfg.batch_size)
    return block, {**result, "map_dtype": cfg.map_dtype}


def handoff_speed(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """The hand-off call's end-to-end time per recompute setting beside native prefill (benchmarks/handoff.py)."""
    from benchmarks.handoff import parse_grid, time_handoff

    cfg = experiment.handoff_speed
    block = start_provenance(argv)
    model = _model(experiment, cfg.adapter)
    _model_block(model, block)
    if cfg.map_dtype:  # the same adapter, its products narrowed: one record per row name, as hf-fold bench writes
        from heterofold_hub.commands.placement import map_dtype_row

        own = block["adapters"]["heterofold"]
        block["adapters"][map_dtype_row("heterofold", cfg.map_dtype)] = {**own, "map_dtype": cfg.map_dtype}
    return block, time_handoff(model, parse_grid(cfg.grid, [0]), lengths=list(cfg.lengths), repeats=cfg.repeats,
                               map_dtype=cfg.map_dtype)


def hidden_profile(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """The hidden-profile task against text communication (benchmarks/agents.py)."""
    from benchmarks.agents import measure_hidden_profile
    from heterofold_hub.transfer.config import TransferConfig

    cfg = experiment.hidden_profile
    block = start_provenance(argv)
    model = _model(experiment, cfg.adapter)
    _model_block(model, block)
    setting = None if cfg.select is None else TransferConfig(recompute=cfg.recompute or 0.0, select=cfg.select)
    return block, measure_hidden_profile(model, lengths=list(cfg.lengths), episodes=cfg.episodes,
                                         formats=list(cfg.formats), data=cfg.data, seed=cfg.seed, setting=setting,
                                         extra=cfg.extra)


def conversation(experiment: Experiment, argv: list[str], console: Console, plot: Path) -> tuple[dict, dict]:
    """Turn-by-turn hand-offs both ways over a conversation (benchmarks/agents.py); draws ``plot``."""
    from dataclasses import replace

    from benchmarks.agents import measure_conversation
    from heterofold_hub.evaluation.provenance import adapter_record

    cfg = experiment.conversation
    block = start_provenance(argv)
    a_to_b = _model(experiment, cfg.adapter)
    b_to_a = _model(replace(experiment, sender=experiment.receiver, receiver=experiment.sender), cfg.reverse_adapter)
    _model_block(a_to_b, block)
    block["adapters"]["reverse"] = adapter_record(b_to_a.resolved.adapter, b_to_a.resolved)
    return block, measure_conversation(a_to_b, b_to_a, conversations=cfg.conversations, turns=cfg.turns,
                                       document_tokens=cfg.document_tokens, turn_tokens=cfg.turn_tokens,
                                       score_tokens=cfg.score_tokens, recompute=cfg.recompute, select=cfg.select,
                                       data=cfg.data, seed=cfg.seed, plot=plot)


RUNNERS = {"train": train, "compress": compress, "score": score, "retrieval": retrieval, "handoff": handoff,
           "handoff-speed": handoff_speed, "bench": bench, "hidden-profile": hidden_profile,
           "conversation": conversation}
