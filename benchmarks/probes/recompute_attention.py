"""What reading grouped KV heads in place saves a recompute: the hand-off call with the recompute's forward attending
through :mod:`heterofold_hub.transfer.grouped_attention` (the library's path) beside the same call attending
through transformers' stock ``sdpa``, which copies each layer's keys and values once per query head of a group
under a mask, with native prefill and the pure transfer, in the same interleaved rounds.

    .venv/bin/python benchmarks/probes/recompute_attention.py [--direction g2s|s2g] [--tokens 2048]
        [--setting "statement~0.7:0.05"] [--repeats 7] [--map-dtype bfloat16]

Each figure is a median over ``repeats`` rounds of what a user's call pays (plan + map + selection + recompute),
on the hand-off benchmark's document of that length (``bundled:unseen``, code), batch 1. Both calls must give the
same cache; the probe checks it before timing.
"""

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.handoff import parse_grid  # noqa: E402
from heterofold_hub import HeteroFoldModel  # noqa: E402
from heterofold_hub.commands.placement import map_dtype_row, with_map_dtype  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.bench import median_seconds  # noqa: E402
from heterofold_hub.evaluation.handoff import make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts  # noqa: E402
from heterofold_hub.transfer import recompute  # noqa: E402
from heterofold_hub.transfer.kvcache import cache_layers  # noqa: E402
from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill  # noqa: E402

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


@contextlib.contextmanager
def stock_attention():
    """The recompute's forward with the receiver's own ``sdpa`` (the path before grouped attention)."""
    grouped = recompute.grouped_attention
    recompute.grouped_attention = lambda model: contextlib.nullcontext()
    try:
        yield
    finally:
        recompute.grouped_attention = grouped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=("g2s", "s2g"), default="g2s")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--setting", default="statement~0.7:0.05", help="one hand-off grid entry")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--map-dtype", choices=("bfloat16",), default=None)
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained(*((GEMMA, SMOL) if args.direction == "g2s" else (SMOL, GEMMA)),
                                            load_sender=True)
    pipe = model.pipeline
    if args.map_dtype:
        narrow = with_map_dtype({"a": pipe.adapter}, ["a"], args.map_dtype)[map_dtype_row("a", args.map_dtype)]
        pipe = TransferPipeline(narrow, pipe.sender, pipe.receiver, source=pipe.source)
    setting = parse_grid(args.setting, [0])[1]
    p = make_handoff_prompts(filler_texts(read_texts("bundled:unseen")), model.receiver, args.tokens, 1, fmt="code")[0]
    prefill = model.prefill_sender([p.context], surprisal=True)
    call = lambda: setting.transfer(pipe, prefill, [p.context], [p.question], [[p.span]])  # noqa: E731

    def stock_call():
        with stock_attention():
            return call()

    grouped, stock = call(), stock_call()
    for (k, v), (k0, v0) in zip(cache_layers(grouped.cache), cache_layers(stock.cache), strict=True):
        assert torch.equal(k, k0) and torch.equal(v, v0), "grouped and stock attention gave different caches"
    seconds = median_seconds({"native prefill": lambda: native_prefill(model.receiver, [p.context]),
                              "transfer": lambda: pipe.transfer(prefill, [p.context]),
                              f"{setting.name}, grouped attention": call,
                              f"{setting.name}, stock sdpa": stock_call}, args.repeats)
    native = seconds["native prefill"]
    products = f", products in {args.map_dtype}" if args.map_dtype else ""
    print(f"{args.direction} at {p.tokens} receiver tokens, {setting.name} recomputes "
          f"{grouped.recompute['share']:.4f} of the mapped positions{products}, {torch.get_num_threads()} threads; "
          "both attentions gave the same cache, bit for bit:")
    for name, s in seconds.items():
        print(f"  {name:38s} {s * 1e3:7.1f} ms  {native / s:5.1f}x")


if __name__ == "__main__":
    main()
