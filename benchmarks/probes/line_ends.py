"""Does a recomputed fact need its line's ends? The asked statement recomputed exactly, with the newline that ends
it, and with the newline before it too, on the same documents.

With SmolLM2 receiving, the oracle (the fact's characters) answered 0.11 of 96 code questions where ``statement``,
the same tokens plus the line's trailing newline token, answered 0.43 (``real-g2s-handoff-screen``). This recomputes
the asked line with and without each of its two newlines, beside native prefill, one document at a time.

    python benchmarks/probes/line_ends.py --direction g2s --docs 96 --length 512 --out probe-line-ends-g2s-512.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.handoff import FORMATS, make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402

from answers import Answers, print_rows  # noqa: E402 (this folder's)

MODELS = {"s2g": ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"),
          "g2s": ("gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1")}


def line_spans(context: str, span: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """The asked statement's character span, then with its trailing newline, then with the newline before it too
    (each only where that character is a newline)."""
    start, end = span
    after = end + (context[end:end + 1] == "\n")
    before = start - (start > 0 and context[start - 1] == "\n")
    return {"the fact's characters (oracle)": (start, end), "+ the newline after": (start, after),
            "+ the newlines before and after": (before, after)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=sorted(MODELS), default="g2s")
    parser.add_argument("--docs", type=int, default=96)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--formats", nargs="+", default=["code"], choices=FORMATS)
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained(*MODELS[args.direction], load_sender=True)
    receiver = model.receiver
    fillers = filler_texts(read_texts("bundled:unseen"))
    exclude = known_facts(read_texts("bundled:wide"))  # as the hand-off harness draws its documents
    result = {"direction": args.direction, "adapter": model.pipeline.source, "docs": args.docs, "length": args.length,
              "formats": {}}
    for fmt in args.formats:
        prompts = make_handoff_prompts(fillers, receiver, args.length, args.docs, fmt=fmt, exclude=exclude)
        answers = Answers()
        for p in prompts:
            prefill = model.prefill_sender([p.context])
            make = {"native": lambda: native_prefill(receiver, [p.context]),  # fresh caches: generate grows them
                    "statement@0.05": lambda: model.transfer(prefill, [p.context], recompute=0.05, select="statement",
                                                             query=p.question)}
            for name, span in line_spans(p.context, p.span).items():
                make[name] = lambda span=span: model.transfer(prefill, [p.context], select="oracle", spans=[[span]])
            answers.score(model, p, make)
        rows = answers.rows("statement@0.05", "mcnemar_p_vs_statement")
        result["formats"][fmt] = rows
        print_rows(f"{args.direction}, {fmt}, {args.length} tokens, {args.docs} documents", rows,
                   "mcnemar_p_vs_statement")
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
