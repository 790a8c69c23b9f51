"""Richer maps only where the diagnosis blames: a low-rank non-linear residual on a few receiver layers, against
the same calibration of the affine map alone.

    .venv/bin/python benchmarks/probes/layer_residual.py --direction s2g --layers 5,11,12 --rank 64 --steps 120 \
        --json benchmarks/results/real/probe-s2g-layer-residual.json

Every arm starts from the pair's registered adapter and calibrates on the same training windows of ``bundled:wide``
(the text the shipped adapters were trained on), in the same order, with the same top-k teacher, the trainer's
schedule and the same number of steps:

- ``affine``: the affine maps go on calibrating (the control: what the same steps give without a residual);
- ``residual ..., affine frozen``: only ``U gelu(V x)`` trains (``V`` ``[in, rank]``, ``U`` ``[rank, out]``, ``U``
  starting at zero, so the arm starts as the registered map), added to the keys and values of ``--layers``;
- with ``--joint``, ``residual ... + affine``: both.

All arms and the registered adapter are then scored on the same held-out windows of ``bundled:unseen`` (never
trained on), with paired differences.

The residual cannot be folded into the affine map: at transfer time it costs ``2 rank (in + out)`` multiply-adds
per row in each of its layers, beside the affine map's ``2 in out`` in every layer.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.data.windows import make_windows  # noqa: E402
from heterofold_hub.evaluation.fidelity import evaluate  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402
from heterofold_hub.transfer.forward import native_logits, transferred_logits  # noqa: E402
from heterofold_hub.trainers.module import warmup_then_decay  # noqa: E402
from heterofold_hub.trainers.teacher import TopKTeacher, kl_top_k  # noqa: E402
from heterofold_hub.trainers.unfolded import UnfoldedAffine  # noqa: E402

MODELS = {"s2g": ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"),
          "g2s": ("gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1")}


class ResidualAffine(UnfoldedAffine):
    """The affine map of every layer, plus ``U gelu(V x)`` on the keys and values of ``residual_layers``."""

    def __init__(self, config, *, residual_layers: list[int], rank: int, lora_rank: int = 0):
        super().__init__(config, lora_rank=lora_rank)
        self.residual_layers = residual_layers

        def residual() -> nn.Sequential:
            block = nn.Sequential(nn.Linear(config.in_features, rank), nn.GELU(), nn.Linear(rank, config.out_features))
            nn.init.zeros_(block[2].weight)
            nn.init.zeros_(block[2].bias)
            return block

        self.k_residual = nn.ModuleDict({str(r): residual() for r in residual_layers})
        self.v_residual = nn.ModuleDict({str(r): residual() for r in residual_layers})

    def map_layer(self, layer, keys, values):
        k, v = super().map_layer(layer, keys, values)
        if str(layer) in self.k_residual:
            k = k + self.k_residual[str(layer)](keys)
            v = v + self.v_residual[str(layer)](values)
        return k, v


def train(adapter: nn.Module, batches: list, teachers: dict, receiver, order: list[int], *, lr: float,
          residual_lr: float, name: str) -> dict:
    """``len(order)`` AdamW steps over ``batches[i]`` for ``i`` in ``order``, on the trainer's schedule; the affine
    weights at peak ``lr`` (0: frozen), any residual at ``residual_lr``. Returns the loss curve and the time taken."""
    groups = [{"params": [p for n, p in adapter.named_parameters() if ("_residual." in n) == is_residual], "lr": rate}
              for is_residual, rate in ((False, lr), (True, residual_lr)) if rate > 0]
    for n, p in adapter.named_parameters():
        p.requires_grad_(any(p is q for g in groups for q in g["params"]))
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=0.0)
    schedule = warmup_then_decay(optimizer, len(order))
    adapter.train()
    losses, start = [], time.perf_counter()
    for step, index in enumerate(order):
        batch = batches[index]
        if index not in teachers:  # the same teacher for every arm: made on the batch's first visit
            with torch.no_grad():
                teachers[index] = TopKTeacher.from_logits(native_logits(receiver, batch), 128)
        loss = kl_top_k(transferred_logits(adapter, receiver, batch), teachers[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if step % 10 == 0 or step == len(order) - 1:
            print(f"{name}: step {step + 1}/{len(order)} kl {sum(losses[-10:]) / len(losses[-10:]):.4f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    adapter.eval().requires_grad_(False)
    return {"losses": losses, "seconds": time.perf_counter() - start}


def training_batches(windows: list, sender, receiver, adapters: list, steps: int,
                     prepare=prepare_batch) -> tuple[list, list[int]]:
    """``windows`` made ready by ``prepare`` two to a batch (the sender layers any of ``adapters`` reads), and the
    order of ``steps`` visits: every batch once in a seeded shuffle, again, and so on."""
    needed = {s for adapter in adapters for sources in adapter.config.layer_sources for s in sources}
    batches = [prepare(windows[i:i + 2], sender, receiver, layers=needed) for i in range(0, len(windows), 2)]
    shuffle = random.Random(0).sample(range(len(batches)), len(batches))
    return batches, (shuffle * (steps // len(batches) + 1))[:steps]


def probe_windows(receiver, train: int, held_out: int) -> tuple[list, list, list[str]]:
    """The first ``train`` windows of 512 tokens of ``bundled:wide`` (the text the published adapters were trained
    on), the first ``held_out`` of ``bundled:unseen`` (the texts asserted disjoint), and ``bundled:unseen``'s texts
    for longer windows."""
    train_texts, unseen = read_texts("bundled:wide"), read_texts("bundled:unseen")
    assert not set(train_texts) & set(unseen), "a held-out text is among the training texts"
    cut = dict(context_tokens=512, continuation_tokens=64)
    return (make_windows(train_texts, receiver, max_windows=train, **cut),
            make_windows(unseen, receiver, max_windows=held_out, **cut), unseen)


def print_scores(result: dict) -> None:
    """Each row's recovered and KL, then every paired difference, of a fidelity ``result``."""
    for name, m in result["methods"].items():
        print(f"{name:50s} recovered {m['recovered']:.3f} ± {m['recovered_se']:.3f}  kl {m['kl']:.3f}")
    for pair, d in result["paired"].items():
        print(f"{pair}: recovered {d['recovered']:+.3f} ± {d['recovered_se']:.3f}, kl {d['kl']:+.3f} ± "
              f"{d['kl_se']:.3f}, lower NLL on {d['windows_better']}/{d['windows']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=tuple(MODELS), default="s2g")
    parser.add_argument("--layers", default="5,11,12", help="receiver layers given a residual")
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--train-windows", type=int, default=96)
    parser.add_argument("--windows", type=int, default=48, help="held-out windows of bundled:unseen at 512 tokens")
    parser.add_argument("--long-windows", type=int, default=16, help="held-out windows at 2048 tokens (0: none)")
    parser.add_argument("--lr", type=float, default=1e-4, help="the affine weights' rate (real-s2g-long's)")
    parser.add_argument("--residual-lr", type=float, default=1e-3)
    parser.add_argument("--joint", action="store_true", help="also an arm training the residual and the affine map")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = HeteroFoldModel.from_pretrained(*MODELS[args.direction], load_sender=True)
    sender, receiver, registered = model.sender, model.receiver, model.adapter
    train_windows, held_out, unseen = probe_windows(receiver, args.train_windows, args.windows)
    batches, order = training_batches(train_windows, sender, receiver, [registered], args.steps)
    layers = [int(x) for x in args.layers.split(",")]
    residual = f"residual (layers {args.layers}, rank {args.rank})"
    arms = {"affine": (UnfoldedAffine.from_affine(registered, lora_rank=0), args.lr, 0.0),
            f"{residual}, affine frozen": (ResidualAffine.from_affine(registered, residual_layers=layers,
                                                                      rank=args.rank), 0.0, args.residual_lr)}
    if args.joint:
        arms[f"{residual} + affine"] = (ResidualAffine.from_affine(registered, residual_layers=layers, rank=args.rank),
                                        args.lr, args.residual_lr)
    teachers: dict = {}
    training = {name: train(adapter, batches, teachers, receiver, order, lr=lr, residual_lr=residual_lr, name=name)
                for name, (adapter, lr, residual_lr) in arms.items()}
    arms = {name: adapter for name, (adapter, _, _) in arms.items()}
    del batches, teachers
    results = {}
    for context, count in ((512, args.windows), (2048, args.long_windows)):
        if not count:
            continue
        windows = held_out if context == 512 else make_windows(
            unseen, receiver, max_windows=count, context_tokens=context, continuation_tokens=64)
        result = results[str(context)] = evaluate(sender, receiver, {"registered": registered, **arms}, windows,
                                                  batch_size=2, data="bundled:unseen")
        print(f"--- {count} windows of {context} tokens of bundled:unseen")
        print_scores(result)
    if args.json:
        command = " ".join(["benchmarks/probes/layer_residual.py", *sys.argv[1:]])
        write_json_atomic(args.json, {"command": command, "adapter": model.pipeline.source, "args": vars(args) | {
            "json": str(args.json)}, "training": training, "scores": results})


if __name__ == "__main__":
    main()
