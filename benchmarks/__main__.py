"""``python -m benchmarks``: list, run, publish and report experiments (see ``benchmarks/__init__.py``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks import config
from benchmarks.config import STAGES, ConfigError
from heterofold_hub.errors import HeteroFoldError


def _list(args) -> int:
    for experiment in config.load_all(args.experiments):
        print(f"{experiment.name:32} {','.join(experiment.stages):28} {experiment.description}")
    return 0


def _run(args, argv: list[str]) -> int:
    from rich.console import Console

    from benchmarks.record import write_stage
    from benchmarks.stages import RUNNERS

    experiment = config.load(args.name, args.experiments)
    if args.stage not in experiment.stages:
        raise ConfigError(f"{experiment.path} has no [{args.stage}] stage; it has {', '.join(experiment.stages)}")
    plot = args.results / f"{experiment.name}-{args.stage}.png"
    block, result = RUNNERS[args.stage](experiment, ["python", "-m", "benchmarks", *argv], Console(stderr=True), plot)
    path = write_stage(experiment.name, args.stage, block, result, args.results)
    print(f"wrote {args.stage} of {experiment.name} to {path}", file=sys.stderr)
    return 0


def _publish(args) -> int:
    """Push a trained package: its own step, never part of a stage (hf-fold push's function)."""
    from heterofold_hub.commands.hub import run_push
    from benchmarks.stages import ROOT

    experiment = config.load(args.name, args.experiments)
    if experiment.publish is None:
        raise ConfigError(f"{experiment.path} has no [publish] table (package, repo, version)")
    package = ROOT / experiment.package(experiment.publish.package)
    hub_dir = args.hub_dir if args.hub_dir is not None or args.hub != "local" else ROOT / "hub"  # the embedded hub
    run_push(package, repo_id=experiment.publish.repo, version=experiment.publish.version, hub=args.hub,
             hub_dir=hub_dir, token=None, registry_path=args.registry, license=None)
    return 0


def _report(args) -> int:
    from benchmarks.report import check, write

    if args.check:
        differences = check(args.pages)
        for line in differences:
            print(line)
        return 1 if differences else 0
    for path in write(args.pages):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--experiments", type=Path, default=Path(os.environ.get("HF_FOLD_EXPERIMENTS", config.EXPERIMENTS)),
                        help="folder of experiment configs (default benchmarks/experiments, or $HF_FOLD_EXPERIMENTS)")
    parser.add_argument("--results", type=Path, default=None, help="folder of results files (default benchmarks/results)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the experiments and their stages")
    run = sub.add_parser("run", help="run one stage of an experiment into benchmarks/results/NAME.json")
    run.add_argument("name")
    run.add_argument("--stage", required=True, choices=STAGES)
    publish = sub.add_parser("publish", help="push the package an experiment's [publish] names (hf-fold push)")
    publish.add_argument("name")
    publish.add_argument("--hub", default="local", help="local, hf or a URL (as hf-fold push --hub)")
    publish.add_argument("--hub-dir", type=Path, default=None, help="the local hub's folder (default the project's hub/)")
    publish.add_argument("--registry", type=Path, default=None, help="registry.json to register in (default the project's)")
    report = sub.add_parser("report", help="regenerate the tables of README.md and docs/results/ from the results")
    report.add_argument("--check", action="store_true", help="change nothing; exit 1 listing every figure that differs")
    report.add_argument("--pages", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose README.md and docs/results/ to write or check (default this one)")
    args = parser.parse_args(argv)
    if args.results is None:
        from benchmarks.record import RESULTS

        args.results = RESULTS
    try:
        if args.command == "list":
            return _list(args)
        if args.command == "run":
            return _run(args, argv)
        if args.command == "publish":
            return _publish(args)
        return _report(args)
    except ConfigError as bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    except HeteroFoldError as bad:  # what a stage's command refuses (a used --out folder, a bad pair): its message
        print(f"error: {bad}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
