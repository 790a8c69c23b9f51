"""Does a selection strategy find the asked fact? The share of the asked statement's receiver tokens it chooses.

A recompute only brings a fact back when it takes the whole statement (name and value, keys and values: the
fact-attention probe), so this counts, per strategy and share, how many documents have their asked statement fully
chosen. It runs no recompute and no generation (the sender's prefill, with surprisal, and the selection only), so
it screens query-agnostic strategies in minutes before a retrieval run measures the few that look right.

    python benchmarks/probes/selection_coverage.py --docs 32 --lengths 512 2048 --select content content-tail
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.base_models.loading import encode  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.handoff import FORMATS, make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.recompute import receiver_offsets  # noqa: E402
from heterofold_hub.transfer.selection import SelectionInputs, choose, get_selector  # noqa: E402


def coverage(model: HeteroFoldModel, prompts, selects: list[str], shares: list[float], batch: int) -> dict:
    """Per ``select@share``: the mean share of the asked statement's tokens chosen, and the share of documents
    whose statement is chosen whole (``full``)."""
    out = {f"{s}@{r:g}": {"covered": [], "full": []} for s in selects for r in shares}
    for start in range(0, len(prompts), batch):
        group = prompts[start : start + batch]
        texts = [p.context for p in group]
        prefill = model.prefill_sender(texts, surprisal=True)
        alignment = model.plan(texts).alignment
        aligned = prefill.surprisal.gather(1, alignment.sender_index.clamp(max=prefill.surprisal.shape[1] - 1))
        inputs = SelectionInputs(receiver_ids=alignment.receiver_ids, mapped_mask=alignment.mapped_mask,
                                 tokenizer=model.receiver.tokenizer, surprisal=aligned,
                                 query_ids=[encode(model.receiver.tokenizer, p.question, add_special_tokens=False)[0]
                                            for p in group])  # for the query-aware strategies, as a ceiling
        offsets = receiver_offsets(model.receiver, texts, alignment.receiver_ids.shape[1])
        asked = torch.stack([(o[:, 0] < p.span[1]) & (o[:, 1] > p.span[0]) & (o[:, 1] > o[:, 0])
                             for o, p in zip(offsets, group)])  # [B, Tr]
        for select in selects:
            scores = get_selector(select).scores(inputs)
            for share in shares:
                choice = choose(scores, alignment.mapped_mask, share)
                chosen = torch.zeros(asked.shape).scatter_add_(1, choice.index, choice.valid.float()) > 0
                hit = (chosen & asked).sum(1).float() / asked.sum(1).clamp(min=1)
                out[f"{select}@{share:g}"]["covered"] += hit.tolist()
                out[f"{select}@{share:g}"]["full"] += (hit == 1).float().tolist()
    return {k: {"covered": sum(v["covered"]) / len(v["covered"]), "full": sum(v["full"]) / len(v["full"]),
                "n": len(v["full"])} for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512])
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--select", nargs="+", default=["content", "content-tail"])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.05, 0.1, 0.15, 0.2, 0.3])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m",
                                            load_sender=True)
    fillers = filler_texts(read_texts("bundled:unseen"))
    exclude = known_facts(read_texts("bundled:wide"))  # as the hand-off harness draws its documents
    result = {"docs": args.docs, "shares": args.shares, "select": args.select, "cells": {}}
    for fmt in args.formats:
        for n in args.lengths:
            prompts = make_handoff_prompts(fillers, model.receiver, n, args.docs, fmt=fmt, exclude=exclude)
            cell = coverage(model, prompts, args.select, args.shares, args.batch)
            result["cells"][f"{fmt}-{n}"] = cell
            print(f"\n{fmt}, {n} tokens, {args.docs} documents: asked statement chosen whole (mean share of it)")
            for name, row in cell.items():
                print(f"  {name:24} {row['full']:.2f} ({row['covered']:.2f})")
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
