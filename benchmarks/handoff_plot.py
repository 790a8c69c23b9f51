"""The recompute trade-off curve: exact match (share of native) against the share of the context recomputed, one
line per strategy, one panel per (format, length), from the committed hand-off results.

    python benchmarks/handoff_plot.py   # writes benchmarks/results/handoff/curve.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "handoff"
HARNESS = "real-s2g-handoff*.json"  # the harness's hand-off experiments (real-s2g-handoff.json was handoff/s2g-512.json)


def points(results: list[dict], docs: int = 96) -> dict:
    """{(format, length): {strategy: [(recomputed share, kept)]}} over the runs of ``docs`` documents (the 16- and
    32-document screens are too noisy to draw beside them), strategies named without their share."""
    out: dict = {}
    for result in results:
        if result["docs"] != docs:
            continue
        for fmt, by_length in result["formats"].items():
            for length, rows in by_length.items():
                for name, row in rows.items():
                    if name in ("native", "no-context") or row["kept"] is None:
                        continue
                    base, _, repair = name.partition("+")  # e.g. "oracle+L2", "query@0.05+L2"
                    strategy = base.split("@")[0] + (f"+{repair}" if repair else "")
                    strategy = "transfer (no recompute)" if strategy.startswith("transfer") else strategy
                    if result.get("map_dtype") == "bfloat16" and "transfer" not in strategy:  # not the float32 curve
                        strategy += " (bf16 maps)"
                    point = (row["recomputed_share"], row["kept"])
                    shown = out.setdefault((fmt, int(length)), {}).setdefault(strategy, [])
                    if point not in shown:  # a setting re-run on the same documents gives the same point
                        shown.append(point)
    return out


def main() -> None:
    paths = sorted(p for p in RESULTS.glob("s2g-*.json") if "screen-v1" not in p.name)
    results = [json.loads(p.read_text()) for p in paths]  # history runs, and the harness's experiments:
    for path in sorted(RESULTS.parent.glob(HARNESS)):
        stages = json.loads(path.read_text())["stages"]
        if "handoff" in stages:
            results.append(stages["handoff"]["result"])
    panels = points(results)
    keys = sorted(panels)
    strategies = sorted({s for panel in panels.values() for s in panel})
    style = {s: (f"C{i % 10}", "osD^vP*X"[i % 8]) for i, s in enumerate(strategies)}  # one look per strategy
    top = max(y for panel in panels.values() for xy in panel.values() for _, y in xy)
    columns = min(len(keys), 3)
    rows = -(-len(keys) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.2 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        for strategy, xy in sorted(panels[key].items()):
            xy.sort()
            color, marker = style[strategy]
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker=marker, color=color, label=strategy)
        ax.axhline(0.9, color="k", linestyle=":", linewidth=1)
        ax.set(title=f"{key[0]} facts, {key[1]} tokens", xlabel="share of the context recomputed",
               ylabel="exact match / native", ylim=(-0.05, top + 0.1), xlim=(-0.001, 0.35))
        ax.set_xscale("symlog", linthresh=0.01)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker=m, label=s) for s, (c, m) in style.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    fig.suptitle("SmolLM2 -> Gemma 3 v1.3.0, 96 documents per cell: retrieval kept against recompute "
                 "(dotted: 90% of native)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    out = RESULTS / "curve.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
