"""End-to-end hand-off time with selective recompute, side by side with the receiver's native prefill, in one run.

Every figure is what a user's call pays: ``model.transfer(prefill, text, ...)`` (plan + map + selection +
recompute), against ``native_prefill`` of the same text; batch 1, the median of ``--repeats`` interleaved rounds
after a warm-up (:func:`~heterofold_hub.evaluation.bench.median_seconds`). Also the map alone into the receiver's own cache and into a working cache that keeps every position
of the sliding layers (what a recompute reads), so the cost of mapping those rows is visible.

    python benchmarks/handoff_speed.py --lengths 512,2048 --repeats 3 \
        --settings "transfer;query:0.05;query+2:0.02;content:0.2;oracle+2"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.handoff import parse_grid, provenance  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.bench import median_seconds  # noqa: E402
from heterofold_hub.evaluation.handoff import make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.fast import map_cache, map_every_position  # noqa: E402
from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sender", default="gguf/smollm2-135m-instruct-q4_1")
    parser.add_argument("--receiver", default="gguf/gemma3-270m-q4_k_m")
    parser.add_argument("--lengths", default="512,2048")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", default="query:0.05;query+2:0.02;content:0.2;oracle+2")
    parser.add_argument("--name", default="speed-s2g")
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained(args.sender, args.receiver, load_sender=True)
    settings = parse_grid(args.settings, [0])
    fillers = filler_texts(read_texts("bundled:unseen"))
    result = {"sender": args.sender, "receiver": args.receiver, "batch": 1, "repeats": args.repeats, "lengths": {},
              "provenance": provenance(model)}
    for n in [int(x) for x in args.lengths.split(",")]:
        p = make_handoff_prompts(fillers, model.receiver, n, 1, fmt="code")[0]
        prefill = model.prefill_sender([p.context], surprisal=True)
        plan = model.pipeline.plan([p.context])
        layers = prefill.layers
        dtype = model.receiver.model.dtype
        calls = {"native_prefill_s": lambda: native_prefill(model.receiver, [p.context]),
                 "plan_s": lambda: model.pipeline.plan([p.context]),
                 "map_s": lambda: map_cache(model.adapter, plan, layers, dtype=dtype),
                 "map_every_position_s": lambda: map_every_position(model.adapter, plan, layers, dtype=dtype)}
        for s in settings:  # what the user's call pays: plan + map + selection + recompute
            calls[s.name] = (lambda s=s: model.transfer(prefill, [p.context], recompute=s.fraction, select=s.select,
                                                        query=[p.question], repair_layers=s.repair_layers,
                                                        spans=[[p.span]]))
        seconds = median_seconds(calls, args.repeats)  # side by side, rounds interleaved
        row = {name: seconds[name] for name in ("native_prefill_s", "plan_s", "map_s", "map_every_position_s")}
        row["settings"] = {s.name: {"end_to_end_s": seconds[s.name], "speedup": row["native_prefill_s"] / seconds[s.name],
                                    "recomputed_share": (calls[s.name]().recompute or {}).get("share", 0.0)}
                           for s in settings}
        result["lengths"][str(p.tokens)] = row
        print(f"{p.tokens} tokens: native prefill {row['native_prefill_s'] * 1e3:.0f} ms, plan {row['plan_s'] * 1e3:.0f} ms, "
              f"map {row['map_s'] * 1e3:.0f} ms (every position {row['map_every_position_s'] * 1e3:.0f} ms); "
              + ", ".join(f"{k} {v['end_to_end_s'] * 1e3:.0f} ms = {v['speedup']:.1f}x" for k, v in row["settings"].items()),
              flush=True)
    out = ROOT / "benchmarks" / "results" / "handoff" / f"{args.name}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
