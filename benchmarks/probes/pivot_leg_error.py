"""Why a composition keeps less than its legs: how well the first leg predicts the pivot's own K/V, and how much
of that error the second leg passes on, per pivot layer the second leg reads.

    .venv/bin/python benchmarks/probes/pivot_leg_error.py --first DIR [--first DIR ...] --second DIR [--json OUT]

Both models of the first leg run over the first ``--windows`` windows of ``bundled:unseen`` (text neither leg was
fitted on), aligned token by token as a transfer aligns them. For each pivot layer p the second leg reads:

- ``first 1-R2``: the first leg's error on the pivot's own features, as a share of their variance
  (``|pred - true|^2 / |true - mean|^2``; 0 is exact, 1 is no better than the mean);
- ``second 1-R2``: the second leg's output from the predicted pivot features against its output from the true
  ones, same measure: what reaches the receiver.

Several ``--first`` packages (e.g. a receiver-logit-trained leg and a least-squares KV Ridge leg) are compared on
the same windows.
"""

import argparse
import json
from pathlib import Path

import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.data.windows import make_windows
from heterofold_hub.methods import load_adapter
from heterofold_hub.io import write_json_atomic
from heterofold_hub.methods.features import collect


def unexplained(pred: torch.Tensor, true: torch.Tensor) -> float:
    """``|pred - true|^2 / |true - mean(true)|^2`` over all positions and features ([N, D] each)."""
    return float((pred - true).pow(2).sum() / (true - true.mean(0)).pow(2).sum())


def apply(adapter, features, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        return adapter.map_layer(layer, *adapter.layer_inputs(features, layer))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first", type=Path, action="append", required=True, help="A -> P package(s)")
    parser.add_argument("--second", type=Path, required=True, help="P -> B package")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    firsts = [load_adapter(f) for f in args.first]
    second = load_adapter(args.second)
    sender, pivot = Side.load(firsts[0].config.sender), Side.load(firsts[0].config.receiver)
    windows = make_windows(read_texts("bundled:unseen"), pivot, context_tokens=512, continuation_tokens=64,
                           max_windows=args.windows)
    calib = collect(sender, pivot, windows, batch_size=2)
    true_pivot = calib.receiver
    read = sorted({p for sources in second.config.layer_sources for p in sources})
    rows = []
    for name, first in zip(map(str, args.first), firsts):
        predicted = {p: apply(first, calib.sender, p) for p in read}
        full = [predicted.get(p, true_pivot[p]) for p in range(len(true_pivot))]
        for p in read:
            rows.append({"first": name, "pivot_layer": p, "part": "first", **{
                kind: unexplained(predicted[p][j], true_pivot[p][j]) for j, kind in enumerate("kv")}})
        for r in range(len(second.config.layer_sources)):
            out_true, out_pred = apply(second, true_pivot, r), apply(second, full, r)
            rows.append({"first": name, "receiver_layer": r, "part": "second", **{
                kind: unexplained(out_pred[j], out_true[j]) for j, kind in enumerate("kv")}})
    for row in rows:
        where = f"pivot layer {row['pivot_layer']}" if row["part"] == "first" else f"receiver layer {row['receiver_layer']}"
        print(f"{row['first']:45s} {row['part']:6s} 1-R2 {where:17s} keys {row['k']:8.3f}  values {row['v']:8.3f}")
    if args.json:
        write_json_atomic(args.json, {"command": "benchmarks/probes/pivot_leg_error.py " + " ".join(
            [f"--first {f}" for f in args.first] + [f"--second {args.second}", f"--windows {args.windows}"]),
            "tokens": calib.tokens, "rows": rows})


if __name__ == "__main__":
    main()
