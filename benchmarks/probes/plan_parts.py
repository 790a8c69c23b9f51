"""What a hand-off's plan costs, part by part, and what reading the sender prefill's own tokens saves it: the plan
that tokenizes both sides (``pipeline.plan(texts)``) beside the plan a transfer given a ``SenderPrefill`` now makes
(``pipeline.plan(texts, prefill=prefill)``: the receiver side only), the pure transfer call each way, native
prefill, and the plan's parts (each side's tokenizer, the RoPE tables gathered at the plan's positions with
``index_select`` as the library does and with advanced indexing as it did before), in the same interleaved rounds.

    .venv/bin/python benchmarks/probes/plan_parts.py [--direction g2s|s2g] [--tokens 2048] [--repeats 15]

Each figure is a median over ``repeats`` rounds on the hand-off benchmark's document of that length
(``bundled:unseen``, code), batch 1. Both plans must give the same cache; the probe checks it before timing.
"""

import argparse
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from heterofold_hub import HeteroFoldModel  # noqa: E402
from heterofold_hub.base_models.loading import encode  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.bench import median_seconds  # noqa: E402
from heterofold_hub.evaluation.handoff import make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.provenance import cpu_record  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts  # noqa: E402
from heterofold_hub.transfer.kvcache import cache_layers  # noqa: E402
from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


def table_gathers(pipe, plan) -> dict:
    """The plan's RoPE gathers: every distinct table of the pair's plan cache at the positions this plan turns,
    with ``index_select`` (the library's :meth:`Turn.gather`) and with ``table[0][positions]`` (before)."""
    cache, alignment = pipe.plan_cache, plan.alignment
    distinct = lambda turns: [t for t in {id(t): t for t in turns}.values() if t is not None]  # noqa: E731
    pairs = [(turn, alignment.sender_index) for turn in distinct(cache.unrotate.turns)]
    pairs += [(turn, alignment.receiver_positions) for turn in distinct(cache.rotate.turns)]
    return {"RoPE gathers, index_select": lambda: [turn.gather(at) for turn, at in pairs],
            "RoPE gathers, advanced indexing": lambda: [(turn.cos[0][at], turn.sin[0][at]) for turn, at in pairs]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=("g2s", "s2g"), default="g2s")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained(*((GEMMA, SMOL) if args.direction == "g2s" else (SMOL, GEMMA)),
                                            load_sender=True)
    pipe = model.pipeline
    p = make_handoff_prompts(filler_texts(read_texts("bundled:unseen")), model.receiver, args.tokens, 1, fmt="code")[0]
    texts = [p.context]
    prefill = model.prefill_sender(texts)
    from_text = pipe.transfer(prefill, plan=pipe.plan(texts))
    from_prefill = pipe.transfer(prefill, texts)
    for (k, v), (k0, v0) in zip(cache_layers(from_prefill.cache), cache_layers(from_text.cache), strict=True):
        assert torch.equal(k, k0) and torch.equal(v, v0), "planning from the prefill's tokens changed the cache"
    plan = pipe.plan(texts, prefill=prefill)
    for (turn_new, turn_old) in zip(*(f() for f in table_gathers(pipe, plan).values())):
        assert torch.equal(turn_new.cos, turn_old[0]) and torch.equal(turn_new.sin, turn_old[1])
    seconds = median_seconds({
        "native prefill": lambda: native_prefill(model.receiver, texts),
        "transfer, plan tokenizing both sides": lambda: pipe.transfer(prefill, plan=pipe.plan(texts)),
        "transfer, plan from the prefill (library)": lambda: pipe.transfer(prefill, texts),
        "plan tokenizing both sides": lambda: pipe.plan(texts),
        "plan from the prefill (library)": lambda: pipe.plan(texts, prefill=prefill),
        "  sender tokenizer": lambda: encode(model.sender.tokenizer, p.context),
        "  receiver tokenizer": lambda: encode(model.receiver.tokenizer, p.context),
        **{f"  {name}": call for name, call in table_gathers(pipe, plan).items()},
    }, args.repeats)
    native, cpu = seconds["native prefill"], cpu_record()
    print(f"{args.direction} at {p.tokens} receiver tokens, {len(prefill.row_ids(0))} sender tokens, pure transfer, "
          f"float32, {torch.get_num_threads()} threads on {cpu['model']} ({platform.machine()}, bf16 flags: "
          f"{', '.join(cpu['bf16_flags']) or 'none'}); both plans gave the same cache, bit for bit:")
    for name, s in seconds.items():
        ratio = f"{native / s:6.1f}x" if name.startswith(("native", "transfer")) else ""
        print(f"  {name:44s} {s * 1e3:8.2f} ms  {ratio}")


if __name__ == "__main__":
    main()
