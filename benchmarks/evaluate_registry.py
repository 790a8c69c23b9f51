"""Measure every published adapter version on one held-out split, then record the figures in registry.json.

Published metrics were measured on whatever text each training run held out, so they do not compare across
versions; the resolver's ``min_recovered`` and ranking read figures on the registry's reference split
(``bundled:unseen``: third-party code and prose no shipped adapter was fitted on). Two steps, so that measuring
never edits the registry by itself:

    python benchmarks/evaluate_registry.py score             # -> benchmarks/results/registry/<sender>__<receiver>.json
    python benchmarks/evaluate_registry.py record            # adds one fidelity evaluation per version to registry.json

``score`` loads each (sender, receiver) pair once and scores all its versions on the same windows, beside native
prefill and no context. ``record`` refuses results from code with uncommitted changes (their commit would not
say what ran) and skips evaluations already recorded; published files and metrics are never rewritten.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from heterofold_hub.hub.registry import open_registry  # noqa: E402
from heterofold_hub.hub.registry_schema import FIDELITY_FIGURES, REFERENCE_SPLIT  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "registry"


def pairs(registry) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``{(sender id, receiver id): [(repo_id, version), ...]}`` over every registered version."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for entry in registry.entries():
        for version in entry.versions:
            out.setdefault((entry.sender.id, entry.receiver.id), []).append((entry.repo_id, version.version))
    return out


def result_path(sender: str, receiver: str) -> Path:
    return RESULTS / f"{sender.replace('/', '--')}__{receiver.replace('/', '--')}.json"


def score(args) -> None:
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.data.texts import trained_on_eval_text
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.fidelity import evaluate
    from heterofold_hub.evaluation.provenance import adapter_record, provenance
    from heterofold_hub.hub.resolve import resolve_adapter
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.methods.composed import training_data

    registry = open_registry(args.registry)
    texts = read_texts(args.data)
    for (sender_id, receiver_id), versions in pairs(registry).items():
        if args.pair and f"{sender_id}->{receiver_id}" not in args.pair:
            continue
        print(f"{sender_id} -> {receiver_id}: {', '.join(f'{r}@{v}' for r, v in versions)}", flush=True)
        sender, receiver = Side.load(sender_id), Side.load(receiver_id)
        adapters, records = {}, {}
        for repo_id, version in versions:
            found = resolve_adapter(sender, receiver, adapter=repo_id, version=version, registry=registry)
            seen = [d for d in training_data(found.adapter.config) if trained_on_eval_text(d, args.data)]
            if seen:
                raise SystemExit(f"{repo_id}@{version} was trained on {seen[0]!r}, which shares text with {args.data!r}: "
                                 "choose a split it never saw.")
            name = f"{repo_id}@{version}"
            adapters[name], records[name] = found.adapter, adapter_record(found.adapter, found)
        windows = make_windows(texts, receiver, max_windows=args.windows, context_tokens=args.context_tokens,
                               continuation_tokens=args.continuation_tokens)
        made = provenance(records)  # before the run: the commit it records is the code that runs, not a later one
        result = evaluate(sender, receiver, adapters, windows, batch_size=args.batch_size, data=args.data)
        result["provenance"] = made
        write_json_atomic(result_path(sender_id, receiver_id), result)
        for name in adapters:
            row = result["methods"][name]
            print(f"  {name}: recovered {row['recovered']:.3f} ± {row['recovered_se']:.3f}, KL {row['kl']:.3f}", flush=True)


def record(args) -> None:
    registry = open_registry(args.registry)
    added = 0
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text())
        made = result["provenance"]
        if made["git"]["commit"] is None or made["git"]["dirty"]:
            raise SystemExit(f"{path}: measured by code with uncommitted changes (or outside a checkout); commit, "
                             "score again, then record.")
        for name, source in made["adapters"].items():
            repo_id, version = source["source"].split("@")
            published = next(v for e in registry.entries() if e.repo_id == repo_id for v in e.versions
                             if v.version == version)
            if any(e.commit == made["git"]["commit"] and e.date == made["date"] for e in published.evaluations):
                continue  # recorded already
            row = result["methods"][name]
            figures = {k: row[k] for k in FIDELITY_FIGURES if k in row} | {"benefit": result["benefit"],
                                                                         "recovered_se": row["recovered_se"]}
            registry.add_evaluation(repo_id=repo_id, version=version, evaluation={
                "task": "fidelity", "data": result["data"], "windows": result["windows"],
                "context_tokens": result["context_tokens"], "date": made["date"], "commit": made["git"]["commit"],
                "command": made["command"], "results": figures})
            added += 1
    registry.save()
    print(f"recorded {added} evaluation(s) in {registry.path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "record"))
    parser.add_argument("--registry", type=Path, default=None, help="registry.json (default: the project's)")
    parser.add_argument("--data", default=REFERENCE_SPLIT, help="held-out text the versions are scored on")
    parser.add_argument("--windows", type=int, default=48)
    parser.add_argument("--context-tokens", type=int, default=512)
    parser.add_argument("--continuation-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pair", action="append", help="only SENDER->RECEIVER (repeatable)")
    args = parser.parse_args(argv)
    score(args) if args.step == "score" else record(args)


if __name__ == "__main__":
    main()
