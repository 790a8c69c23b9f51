"""How many sender layers each receiver layer should read: closed-form maps with 2, 3 and 4 sources, side by side.

    .venv/bin/python benchmarks/probes/sources_per_layer.py [--direction s2g|g2s] [--sources 2,3,4] [--json OUT]

KV Ridge and ridge + recolouring (HeteroFold's usual starting maps) are fitted on the first 64 windows of
``bundled:wide`` (the text the shipped adapters were trained on) and scored on the first 16 windows of
``bundled:unseen`` at 512 receiver tokens. A source count that lifts these closed-form maps is worth a calibration
run; one that does not is not. The calibration features are collected once (every sender layer) and each source
count is fitted from them, so a count costs its fit, not another pass of both models over the windows.
"""

import argparse
import json
from pathlib import Path

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.data.windows import make_windows
from heterofold_hub.evaluation.fidelity import evaluate
from heterofold_hub.io import write_json_atomic
from heterofold_hub.methods import get_method
from heterofold_hub.methods.features import collect

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=("s2g", "g2s"), default="s2g")
    parser.add_argument("--sources", default="2,3,4")
    parser.add_argument("--calib-windows", type=int, default=64)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ids = (SMOL, GEMMA) if args.direction == "s2g" else (GEMMA, SMOL)
    sender, receiver = (Side.load(i) for i in ids)
    cut = dict(context_tokens=512, continuation_tokens=64)
    train = make_windows(read_texts("bundled:wide"), receiver, max_windows=args.calib_windows, **cut)
    held_out = make_windows(read_texts("bundled:unseen"), receiver, max_windows=args.windows, **cut)
    calib = collect(sender, receiver, train, batch_size=2)
    adapters = {}
    for k in (int(s) for s in args.sources.split(",")):
        adapters[f"kv-ridge x{k}"] = get_method("kv-ridge").fit(calib, sources_per_layer=k)
        adapters[f"ridge-recolor x{k}"] = get_method("recolor").fit(calib, sources_per_layer=k, base="ridge",
                                                                    layers="correlated")
        print(f"fitted {k} sources per layer", flush=True)
    result = evaluate(sender, receiver, adapters, held_out, batch_size=2)
    for name, m in result["methods"].items():
        print(f"{name:20s} recovered {m['recovered']:.3f} ± {m['recovered_se']:.3f}  kl {m['kl']:.3f}")
    if args.json:
        write_json_atomic(args.json, {"command": f"benchmarks/probes/sources_per_layer.py --direction {args.direction} "
                                                 f"--sources {args.sources}", **result})


if __name__ == "__main__":
    main()
