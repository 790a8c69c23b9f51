"""Facts across a hand-off: retrieval exact match over recompute settings, the receiver reading its own question.

    python benchmarks/handoff.py --name s2g-screen --lengths 512,1024,2048 --docs 32 --formats code,prose \
        --grid "content:0.02,0.05,0.1,0.2;query:0.02,0.05,0.1;tail:0.1;oracle" --repair 0,2

Writes benchmarks/results/handoff/NAME.json (every setting's hits per document, so settings compare paired) with
the command, commit, adapter and library versions, and prints one table per format.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.handoff import Setting, evaluate_handoff, make_handoff_prompts, wilson  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402


def parse_grid(grid: str, repairs: list[int]) -> list[Setting]:
    """``"content:0.02,0.05;query+2:0.1;oracle"`` -> settings, each with every ``repairs`` count; the pure transfer first."""
    settings = [Setting("content", 0.0, r) for r in repairs]
    for part in filter(None, (p.strip() for p in grid.split(";"))):
        select, _, fractions = part.partition(":")
        select, _, repair = select.partition("+")  # "content+2:0.05" repairs the first 2 layers too
        for fraction in ([None] if select == "oracle" else [float(f) for f in fractions.split(",")]):
            settings += [Setting(select, fraction or 0.0, r) for r in ([int(repair)] if repair else repairs)]
    return list(dict.fromkeys(settings))


def provenance(model: HeteroFoldModel) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    import transformers

    import heterofold_hub

    resolved = model.resolved
    return {"command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": commit, "dirty": dirty,
            "adapter": resolved.describe() if resolved else None,
            "library": {"heterofold_hub": heterofold_hub.__version__, "torch": torch.__version__,
                        "transformers": transformers.__version__, "python": platform.python_version()},
            "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def table(result: dict, fmt: str) -> Table:
    lengths = result["lengths"]
    t = Table(title=f"{result['sender']} -> {result['receiver']}, {fmt} format, {result['docs']} docs per length: "
                    "exact match (share of native), recomputed share")
    t.add_column("setting")
    for n in lengths:
        t.add_column(f"{n} tok", justify="right")
    for name in result["formats"][fmt][str(lengths[0])]:
        cells = []
        for n in lengths:
            row = result["formats"][fmt][str(n)][name]
            kept = "—" if row["kept"] is None else f"{row['kept']:.2f}"
            cells.append(f"{row['accuracy']:.2f} ({kept}) r={row['recomputed_share']:.3f}")
        t.add_row(name, *cells)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True)
    parser.add_argument("--sender", default="gguf/smollm2-135m-instruct-q4_1")
    parser.add_argument("--receiver", default="gguf/gemma3-270m-q4_k_m")
    parser.add_argument("--lengths", default="512,1024,2048")
    parser.add_argument("--docs", type=int, default=32)
    parser.add_argument("--formats", default="code,prose")
    parser.add_argument("--grid", default="content:0.05,0.1,0.2;query:0.05,0.1;tail:0.1;oracle")
    parser.add_argument("--repair", default="0")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--data", default="bundled:unseen")
    args = parser.parse_args()

    model = HeteroFoldModel.from_pretrained(args.sender, args.receiver, load_sender=True)
    settings = parse_grid(args.grid, [int(r) for r in args.repair.split(",")])
    fillers = filler_texts(read_texts(args.data))
    exclude = known_facts(read_texts("bundled:wide"))
    lengths = [int(n) for n in args.lengths.split(",")]
    result = {"sender": args.sender, "receiver": args.receiver, "lengths": lengths, "docs": args.docs,
              "data": args.data, "settings": [s.__dict__ for s in settings], "formats": {},
              "provenance": provenance(model)}
    out = ROOT / "benchmarks" / "results" / "handoff" / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    console = Console()
    for fmt in args.formats.split(","):
        result["formats"][fmt] = {}
        for n in lengths:
            prompts = make_handoff_prompts(fillers, model.receiver, n, args.docs, fmt=fmt, exclude=exclude)
            rows = evaluate_handoff(model.sender, model.receiver, model.pipeline, prompts, settings,
                                    batch_size=args.batch_size, progress=sys.stderr.isatty(),
                                    log=lambda line: print(f"{time.strftime('%H:%M:%S')} {fmt} {n}: {line}", flush=True))
            for row in rows.values():
                row["interval"] = wilson(row["correct"], row["n"])
            result["formats"][fmt][str(n)] = rows
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(result, indent=1))
            os.replace(tmp, out)  # written after every length: a long run keeps what it measured
            print(f"{fmt} {n}: " + ", ".join(f"{k}={v['accuracy']:.2f}" for k, v in rows.items()), flush=True)
        console.print(table(result, fmt))


if __name__ == "__main__":
    main()
