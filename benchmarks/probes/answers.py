"""What the retrieval probes share: score caches made per document by the receiver's answer to its own question,
and sum them up paired against one of them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.handoff import FORMATS, HandoffPrompt, make_handoff_prompts, mcnemar
from heterofold_hub.evaluation.retrieval import exact_match, filler_texts, known_facts
from heterofold_hub.io import write_json_atomic
from heterofold_hub.modeling import HeteroFoldModel

MODELS = {"s2g": ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"),
          "g2s": ("gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1")}


def probe_parser(doc: str, *, formats: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options every retrieval probe takes: direction, documents, length, formats and where to write."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=sorted(MODELS), default="g2s")
    parser.add_argument("--docs", type=int, default=96)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0,
                        help="which documents (the hand-off experiments use seed 0; screen settings on another)")
    parser.add_argument("--formats", nargs="+", default=list(formats), choices=FORMATS)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    return parser


def open_probe(args) -> tuple[HeteroFoldModel, Callable[[str], list[HandoffPrompt]], dict]:
    """The direction's model (sender loaded), the documents of a format as the hand-off harness draws them, and the
    result's header."""
    model = HeteroFoldModel.from_pretrained(*MODELS[args.direction], load_sender=True)
    fillers = filler_texts(read_texts("bundled:unseen"))
    exclude = known_facts(read_texts("bundled:wide"))
    documents = lambda fmt: make_handoff_prompts(fillers, model.receiver, args.length, args.docs, fmt=fmt,  # noqa: E731
                                                  exclude=exclude, seed=args.seed)
    header = {"direction": args.direction, "adapter": model.pipeline.source, "docs": args.docs, "length": args.length,
              "seed": args.seed, "formats": {}}
    return model, documents, header


def save(args, result: dict) -> None:
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}")


class Answers:
    """Exact-match hits and recomputed shares per cache name, one entry per document."""

    def __init__(self):
        self.hits: dict[str, list[int]] = {}
        self.shares: dict[str, list[float]] = {}

    def score(self, model, prompt, make: dict[str, Callable]) -> None:
        """Make each cache of ``make`` (name -> a call giving a TransferResult; fresh each time, as generate grows
        the cache it continues from) and record whether the receiver, reading ``prompt.question``, answers."""
        tok = model.receiver.tokenizer
        for name, cache in make.items():
            made = cache()
            answer = model.generate(made, prompt=prompt.question, max_new_tokens=7, do_sample=False)
            self.hits.setdefault(name, []).append(
                int(exact_match(tok.decode(answer[0], skip_special_tokens=True), prompt.answer)))
            self.shares.setdefault(name, []).append((made.recompute or {}).get("share", float(name == "native")))

    def rows(self, versus: str, key: str) -> dict:
        """Per name: accuracy, mean recomputed share, McNemar p against ``versus`` on the same documents (under
        ``key``), hits."""
        return {name: {"accuracy": sum(h) / len(h), "recomputed_share": sum(self.shares[name]) / len(h),
                       key: mcnemar(self.hits[versus], h), "hits": h} for name, h in self.hits.items()}


def print_rows(title: str, rows: dict, key: str) -> None:
    print(f"\n{title}")
    for name, row in rows.items():
        kept = row["accuracy"] / rows["native"]["accuracy"] if rows["native"]["accuracy"] else float("nan")
        print(f"  {name:32} {row['accuracy']:.2f} ({kept:.2f} of native), recomputed {row['recomputed_share']:.3f},"
              f" {key.replace('_', ' ')} {row[key]:.3f}")
