"""Do the neighbour views survive calibration from a closed-form start, as more sender layers did?

    .venv/bin/python benchmarks/probes/neighbour_from_ridge.py --read ";prev" --train-windows 200 --steps 100 \
        --json benchmarks/results/real/probe-s2g-neighbour-from-ridge.json

Four SmolLM2 layers per Gemma 3 map were tested this way before v1.3.0: closed form +0.044 over two, calibrated
+0.057. Here each arm starts from KV Ridge with four sources (fitted on the first ``--calib-windows`` windows of
``bundled:wide``), read alone or also through the views of ``--read`` (``neighbour_positions.py``), and calibrates
its full weights for ``--steps`` steps at the trainer's rate over the first ``--train-windows`` windows, two to a
step, each window seen once or more in the same seeded order for every arm, with the same top-k teacher and
schedule (``layer_residual.train``). Starts and calibrated maps are scored on the same held-out windows of
``bundled:unseen`` at 512 tokens, paired.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.probes.layer_residual import MODELS, print_scores, probe_windows, train, training_batches  # noqa: E402
from benchmarks.probes.neighbour_positions import VIEWS, ridge_with_views, viewed_calibration, with_views  # noqa: E402
from heterofold_hub.base_models.loading import Side  # noqa: E402
from heterofold_hub.evaluation.fidelity import evaluate  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.trainers.unfolded import UnfoldedAffine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=tuple(MODELS), default="s2g")
    parser.add_argument("--read", default=";prev", help="the arms' views: ';' between arms, ',' within ('': none)")
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--calib-windows", type=int, default=64)
    parser.add_argument("--train-windows", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--windows", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-4, help="the trainer's default rate from a closed-form start")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    sender, receiver = (Side.load(i) for i in MODELS[args.direction])
    train_windows, held_out, _ = probe_windows(receiver, args.train_windows, args.windows)
    prepare = with_views(VIEWS)
    calib = viewed_calibration(sender, receiver, train_windows[:args.calib_windows], prepare)
    reads = [tuple(arm.split(",")) if arm else () for arm in args.read.split(";")]
    starts = {f"kv-ridge x{args.sources}" + "".join(f" +{v}" for v in read): ridge_with_views(calib, args.sources, read)
              for read in reads}
    del calib
    batches, order = training_batches(train_windows, sender, receiver, list(starts.values()), args.steps,
                                      prepare=prepare)
    arms = {f"{name}, calibrated": UnfoldedAffine.from_affine(start, lora_rank=0) for name, start in starts.items()}
    teachers: dict = {}
    training = {name: train(adapter, batches, teachers, receiver, order, lr=args.lr, residual_lr=0.0, name=name)
                for name, adapter in arms.items()}
    del batches, teachers
    result = evaluate(sender, receiver, {**starts, **arms}, held_out, batch_size=2, data="bundled:unseen",
                      prepare=prepare)
    print_scores(result)
    if args.json:
        command = " ".join(["benchmarks/probes/neighbour_from_ridge.py", *sys.argv[1:]])
        write_json_atomic(args.json, {"command": command, "args": vars(args) | {"json": str(args.json)},
                                      "training": training, "scores": {"512": result}})


if __name__ == "__main__":
    main()
