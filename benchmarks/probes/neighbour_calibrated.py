"""Do the neighbour views that lift the closed-form maps (neighbour_positions.py) survive calibration?

    .venv/bin/python benchmarks/probes/neighbour_calibrated.py --steps 150 \
        --json benchmarks/results/real/probe-s2g-neighbour-calibrated.json

The registered SmolLM2 -> Gemma 3 adapter is widened to also read each of its source layers through the views of
``--read`` (``split``: a second map for the rows that split a sender token; ``prev``: the sender token before the
aligned one), the new inputs' weights starting at zero, so each widened arm starts as the registered map. Each arm
then calibrates its full weights for ``--steps`` steps beside a control arm that spends the same steps on the map
alone, as ``layer_residual.py`` trains its arms (same windows of ``bundled:wide``, order, top-k teacher and
schedule). All are scored on the same held-out windows of ``bundled:unseen`` at 512 tokens, paired.

With ``--closed-form N`` nothing trains: the new inputs' weights are fitted by ridge on the first ``N`` training
windows to what the registered map leaves of the receiver's own K/V (``corrected``), and scored beside it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.probes.layer_residual import MODELS, print_scores, probe_windows, train, training_batches  # noqa: E402
from benchmarks.probes.neighbour_positions import LAM, VIEWS, read_also, with_views  # noqa: E402
from heterofold_hub.adapter.config import AdapterConfig  # noqa: E402
from heterofold_hub.evaluation.fidelity import evaluate  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.methods.heterofold import HeteroFoldAdapter  # noqa: E402
from heterofold_hub.methods.features import collect  # noqa: E402
from heterofold_hub.methods.stats import ridge  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.trainers.unfolded import UnfoldedAffine  # noqa: E402


def widened(adapter, read: tuple[str, ...]) -> HeteroFoldAdapter:
    """``adapter`` (affine) also reading its sources through the views ``read``, with zero weights on them: the same
    map until trained. Its config names the views' features as sender layers ``L..``, which only a batch made by
    ``with_views(VIEWS)`` holds."""
    spec = dict(adapter.config.sender_spec)
    layers, copies = spec["num_layers"], len(VIEWS) + 1
    spec["num_layers"] = layers * copies
    if spec.get("layer_types"):
        spec["layer_types"] = list(spec["layer_types"]) * copies
    config = AdapterConfig.from_dict({**adapter.config.to_dict(), "sender_spec": spec,
                                      "layer_sources": read_also(adapter.config.layer_sources, VIEWS, read, layers)})
    wide = HeteroFoldAdapter(config)
    width = adapter.config.in_features
    with torch.no_grad():
        for kind in "kv":
            getattr(wide, f"{kind}_weight")[:, :width] = getattr(adapter, f"{kind}_weight")
            getattr(wide, f"{kind}_bias").copy_(getattr(adapter, f"{kind}_bias"))
    return wide.requires_grad_(False).eval()


def corrected(adapter, calib, read: tuple[str, ...], lam: float = LAM) -> HeteroFoldAdapter:
    """``adapter`` widened by ``read`` with the new inputs' weights fitted in closed form: per receiver layer, KV
    Ridge from those inputs alone to what ``adapter`` leaves of the receiver's own K/V on ``calib`` (a
    ``CalibrationSet`` collected by ``with_views(VIEWS)``); the ridge intercept is added to the bias. With no
    ``read``, the correction is fitted from the map's own inputs and added to its weights (the control: what a
    correction toward the receiver's K/V does to a map calibrated on its logits, with nothing new to read)."""
    wide = widened(adapter, read)
    width = adapter.config.in_features if read else 0
    with torch.no_grad():
        for r in range(len(adapter.config.layer_sources)):
            inputs = wide.layer_inputs(calib.sender, r)
            for j, (kind, mapped) in enumerate(zip("kv", adapter.map_layer(r, *adapter.layer_inputs(calib.sender, r)))):
                weight, bias = ridge(inputs[j][:, width:], calib.receiver[r][j] - mapped, lam)
                getattr(wide, f"{kind}_weight")[r, width:] += weight
                getattr(wide, f"{kind}_bias")[r] += bias
    return wide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=tuple(MODELS), default="s2g")
    parser.add_argument("--read", default="split;prev,split", help="the arms' views: ';' between arms, ',' within ('': none)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--train-windows", type=int, default=96)
    parser.add_argument("--windows", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-4, help="the affine weights' rate (real-s2g-long's)")
    parser.add_argument("--closed-form", type=int, default=0, metavar="WINDOWS",
                        help="instead of training, fit the views' weights in closed form on this many training windows")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = HeteroFoldModel.from_pretrained(*MODELS[args.direction], load_sender=True)
    sender, receiver, registered = model.sender, model.receiver, model.adapter
    train_windows, held_out, _ = probe_windows(receiver, args.train_windows, args.windows)
    reads = [tuple(arm.split(",")) if arm else () for arm in args.read.split(";")]  # "": no view (a control)
    wides = {f"+{' +'.join(read)}" if read else "(own inputs)": widened(registered, read) for read in reads}
    prepare = with_views(VIEWS)
    if args.closed_form:
        calib = collect(sender, receiver, train_windows[:args.closed_form], batch_size=2, prepare=prepare)
        arms = {f"corrected {name}": corrected(registered, calib, read) for name, read in zip(wides, reads)}
        del calib
        result = evaluate(sender, receiver, {"registered": registered, **arms}, held_out, batch_size=2,
                          data="bundled:unseen", prepare=prepare)
        print_scores(result)
        if args.json:
            write_json_atomic(args.json, {"command": " ".join(["benchmarks/probes/neighbour_calibrated.py", *sys.argv[1:]]),
                                          "adapter": model.pipeline.source, "scores": {"512": result}})
        return
    widest, wide = max(wides.items(), key=lambda item: item[1].config.in_features)
    batches, order = training_batches(train_windows, sender, receiver, list(wides.values()), args.steps,
                                      prepare=prepare)
    arms = {"affine (control)": UnfoldedAffine.from_affine(registered, lora_rank=0)}
    arms |= {f"affine {name}": UnfoldedAffine.from_affine(wide, lora_rank=0) for name, wide in wides.items()}
    teachers: dict = {}
    training = {name: train(adapter, batches, teachers, receiver, order, lr=args.lr, residual_lr=0.0, name=name)
                for name, adapter in arms.items()}
    del batches, teachers
    check = {f"widened {widest}, untrained (check: = registered)": wide}
    result = evaluate(sender, receiver, {"registered": registered, **check, **arms}, held_out, batch_size=2,
                      data="bundled:unseen", prepare=prepare)
    print_scores(result)
    if args.json:
        command = " ".join(["benchmarks/probes/neighbour_calibrated.py", *sys.argv[1:]])
        write_json_atomic(args.json, {"command": command, "adapter": model.pipeline.source,
                                      "args": vars(args) | {"json": str(args.json)}, "training": training,
                                      "scores": {"512": result}})


if __name__ == "__main__":
    main()
