"""Measure every published adapter version on one held-out split, then record the figures in registry.json.

Published metrics were measured on whatever text each training run held out, so they do not compare across
versions; the resolver's ``min_recovered`` and ranking read figures on the registry's reference split
(``bundled:unseen``: third-party code and prose no shipped adapter was fitted on). Two steps, so that measuring
never edits the registry by itself:

    python benchmarks/evaluate_registry.py score             # -> benchmarks/results/registry/<sender>__<receiver>.json
    python benchmarks/evaluate_registry.py score --version REPO@VERSION   # only that version: a file of its own
    python benchmarks/evaluate_registry.py record            # adds one fidelity evaluation per version to registry.json
    python benchmarks/evaluate_registry.py recommend         # adds the hand-off's recommended recompute setting

``recommend`` reads one pair's committed hand-off experiments (``benchmarks/results/PREFIX*.json``, ``--experiments
PREFIX``, ``real-s2g-handoff`` by default): among the settings a user can run (not the oracle, which needs the
answer's place) measured in every cell the results hold (format x length), on at least ``--min-docs`` documents per
cell, it takes the one recomputing the least that keeps at least 90% of native exact match in every cell (of
settings recomputing the same positions, the one whose lowest cell keeps the most), and records it, with every
cell's share kept and the end-to-end speed-ups of the newest ``PREFIX-speed*`` result that times it, as the adapter
version's recommended setting. Where none qualifies it records nothing and says which came closest.

``score`` loads each (sender, receiver) pair once and scores all its versions on the same windows, beside native
prefill and no context. ``--version REPO@VERSION`` (repeatable) scores only the versions named, so that a new
version is measured without re-measuring (and re-recording) the others; its file is named after them, and
``hf-fold compare`` pairs it with the pair's full file, since both score the same windows. ``record`` refuses
results from code with uncommitted changes (their commit would not say what ran) and skips evaluations already
recorded; published files and metrics are never rewritten.
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


def result_path(folder: Path, sender: str, receiver: str, only: list[str] | None = None) -> Path:
    """``<sender>__<receiver>.json``; with ``only`` (``repo@version`` names), ``<sender>__<receiver>__<repo
    name>@<version>[+...].json``, so a partial score never overwrites the pair's full one."""
    stem = f"{sender.replace('/', '--')}__{receiver.replace('/', '--')}"
    if only:
        stem += "__" + "+".join(sorted(name.split("/")[-1] for name in only))
    return folder / f"{stem}.json"


def chosen_versions(registry, only: list[str] | None) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``pairs(registry)``, cut to the ``repo@version`` names in ``only``; an unregistered name is refused with the
    versions its repo has."""
    every = pairs(registry)
    if not only:
        return every
    registered = {f"{repo}@{version}" for versions in every.values() for repo, version in versions}
    for name in only:
        if name not in registered:
            repo = name.split("@")[0]
            known = sorted(n for n in registered if n.split("@")[0] == repo) or sorted(registered)
            raise SystemExit(f"--version {name!r} is not a registered adapter version; registered: "
                             f"{', '.join(known)}. Pass REPO@VERSION as `hf-fold list` shows it.")
    cut = {pair: [(r, v) for r, v in versions if f"{r}@{v}" in only] for pair, versions in every.items()}
    return {pair: versions for pair, versions in cut.items() if versions}


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
    for (sender_id, receiver_id), versions in chosen_versions(registry, args.version).items():
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
        only = list(adapters) if args.version else None  # this pair's share of the versions named
        write_json_atomic(result_path(args.out, sender_id, receiver_id, only), result)
        for name in adapters:
            row = result["methods"][name]
            print(f"  {name}: recovered {row['recovered']:.3f} ± {row['recovered_se']:.3f}, KL {row['kl']:.3f}", flush=True)


def record(args) -> None:
    registry = open_registry(args.registry)
    added = 0
    for path in sorted(args.out.glob("*.json")):
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


KEEP = 0.9  # share of native exact match a recommended setting keeps in every measured cell


def handoff_cells(paths: list[Path], min_docs: int) -> tuple[dict, dict]:
    """``({setting: {(format, length): row}}, {file name: provenance})`` over the hand-off results in ``paths``,
    cells of fewer than ``min_docs`` documents left out. A run with the map's products in another dtype
    (``map_dtype``) is left out too: the registry recommends for the adapter as it loads, and such a run measures
    a twin of it, whose cells would otherwise replace the adapter's own by file order."""
    cells: dict = {}
    made = {}
    for path in paths:
        entry = json.loads(path.read_text())["stages"].get("handoff")
        if entry is None or entry["result"].get("map_dtype"):
            continue
        made[path.name] = entry["provenance"]
        result = entry["result"]
        if result["docs"] < min_docs:
            continue
        for fmt, by_length in result["formats"].items():
            for length, rows in by_length.items():
                for name, row in rows.items():
                    if name not in ("native", "no-context", "transfer"):
                        cells.setdefault(name, {})[(fmt, int(length))] = row
    return cells, made


def recommended_fields(name: str) -> dict:
    """The registry's ``recommended`` block for a setting named as results name it (``TransferConfig.label``:
    ``statement@0.05``, ``query@0.02+L2``, ``statement@0.05 k0.7``)."""
    from heterofold_hub.transfer.config import TransferConfig

    base, _, scale = name.partition(" k")
    base, _, repair = base.partition("+L")
    select, _, share = base.partition("@")
    fields = {"recompute": float(share or 0), "select": select, "repair_layers": int(repair or 0)}
    if scale:
        fields["mapped_key_scale"] = float(scale)
    if TransferConfig.from_dict(fields).label != name:
        raise SystemExit(f"{name!r} does not name one transfer setting; the results name settings as "
                         "TransferConfig.label does (statement@0.05, query@0.02+L2, statement@0.05 k0.7).")
    return fields


def recommend(args) -> None:
    speed_paths = sorted(args.results.glob(f"{args.experiments}-speed*.json"))
    paths = [p for p in sorted(args.results.glob(f"{args.experiments}*.json")) if p not in speed_paths]
    if not paths:
        raise SystemExit(f"no hand-off results {args.experiments}*.json in {args.results}: run the pair's hand-off "
                         "experiments (python -m benchmarks list), or pass --experiments PREFIX.")
    if not speed_paths:
        raise SystemExit(f"no {args.experiments}-speed*.json in {args.results}: time the pair's settings (python -m "
                         f"benchmarks run {args.experiments}-speed --stage handoff-speed), then recommend.")
    cells, made = handoff_cells(paths, args.min_docs)
    # the oracle needs the answer's place; a deferred setting is another's config timed another way
    cells = {name: rows for name, rows in cells.items()
             if not name.startswith("oracle") and not name.endswith("deferred")}
    timings = {p.name: json.loads(p.read_text())["stages"]["handoff-speed"] for p in speed_paths}
    made |= {n: t["provenance"] for n, t in timings.items()}
    for name, block in made.items():
        if not block.get("recorded") or block["git"]["commit"] is None or block["git"]["dirty"]:
            raise SystemExit(f"{name}: measured by code with uncommitted changes (or unrecorded); run it again from "
                             "a commit, then recommend.")
    sources = {block["adapters"]["heterofold"]["source"] for block in made.values()}
    if len(sources) != 1:
        raise SystemExit(f"the hand-off results measure different adapters ({', '.join(sorted(sources))}); "
                         "measure one version throughout.")
    # a setting is judged on every (format, length) cell the results hold, or not at all: one measured at 2048 tokens
    # on code only would otherwise be recommended without its prose facts at that length
    grid = {cell for rows in cells.values() for cell in rows}
    measured = {name: rows for name, rows in cells.items() if set(rows) == grid}
    for name in sorted(set(cells) - set(measured)):
        lacking = sorted(grid - set(cells[name]))
        print(f"{name}: left out, not measured on " + ", ".join(f"{fmt} {n}" for fmt, n in lacking))
    lowest = {name: min(r["kept"] for r in rows.values()) for name, rows in measured.items()}
    for name, rows in sorted(measured.items()):
        print(f"{name}: kept " + ", ".join(f"{fmt} {n}: {r['kept']:.2f}" for (fmt, n), r in sorted(rows.items())))
    passing = [name for name in measured if lowest[name] >= KEEP]
    if not passing:
        best = max(lowest, key=lowest.get)
        raise SystemExit(f"no setting keeps {KEEP:.0%} of native in every cell; closest: {best} (lowest "
                         f"{lowest[best]:.2f}). Nothing recorded.")
    # the least recompute; among equals (one selection, the keys left mapped scaled or not) the most kept
    name = min(passing, key=lambda n: (max(r["recomputed_share"] for r in measured[n].values()), -lowest[n]))
    rows = measured[name]
    # several speed runs may time a pair (a setting added later gets its own); the newest that times this one counts
    timed = [t for t in timings.values() if name in next(iter(t["result"]["lengths"].values()))["settings"]]
    if not timed:
        raise SystemExit(f"{name} is not timed in {', '.join(sorted(timings))}: time it (python -m benchmarks run "
                         f"{args.experiments}-speed --stage handoff-speed, with it in the grid), then recommend.")
    speed = max(timed, key=lambda t: t["provenance"]["date"])
    lengths_timed = speed["result"]["lengths"]
    results = {f"kept_{fmt}_{n}": r["kept"] for (fmt, n), r in sorted(rows.items())}
    results |= {f"recomputed_{fmt}_{n}": r["recomputed_share"] for (fmt, n), r in sorted(rows.items())}
    results |= {f"speedup_{n}": row["settings"][name]["speedup"] for n, row in lengths_timed.items()}
    results |= {f"speedup_transfer_{n}": row["settings"]["transfer"]["speedup"] for n, row in lengths_timed.items()}
    newest = max(made.values(), key=lambda block: block["date"])
    repo_id, version = sources.pop().split("@")
    registry = open_registry(args.registry)
    data = next(json.loads(p.read_text())["stages"]["handoff"]["result"]["data"] for p in paths
                if p.name in made)
    registry.add_evaluation(repo_id=repo_id, version=version, evaluation={
        "task": "retrieval-handoff", "data": data, "date": newest["date"], "commit": newest["git"]["commit"],
        "command": "python benchmarks/evaluate_registry.py recommend (from " + ", ".join(sorted(made)) + ")",
        "results": results,
        "recommended": recommended_fields(name)})
    registry.save()
    print(f"recorded {name} for {repo_id}@{version} in {registry.path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("score", "record", "recommend"))
    parser.add_argument("--registry", type=Path, default=None, help="registry.json (default: the project's)")
    parser.add_argument("--data", default=REFERENCE_SPLIT, help="held-out text the versions are scored on")
    parser.add_argument("--windows", type=int, default=48)
    parser.add_argument("--context-tokens", type=int, default=512)
    parser.add_argument("--continuation-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--pair", action="append", help="only SENDER->RECEIVER (repeatable)")
    parser.add_argument("--version", action="append", metavar="REPO@VERSION",
                        help="score: only this adapter version (repeatable); written to a file of its own")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="score / record: the folder of the score files (default: benchmarks/results/registry)")
    parser.add_argument("--min-docs", type=int, default=96, help="recommend: documents a cell needs to count")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                        help="recommend: the folder of the hand-off experiments' results")
    parser.add_argument("--experiments", default="real-s2g-handoff",
                        help="recommend: the pair's hand-off experiments, by name prefix (real-g2s-handoff: the "
                             "other direction)")
    args = parser.parse_args(argv)
    {"score": score, "record": record, "recommend": recommend}[args.step](args)


if __name__ == "__main__":
    main()
