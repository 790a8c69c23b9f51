"""Does a recomputed fact need its line's ends? The asked statement recomputed exactly, with the newline that ends
it, and with the newline before it too, on the same documents.

With SmolLM2 receiving, the oracle (the fact's characters) answered 0.11 of 96 code questions where ``statement``,
the same tokens plus the line's trailing newline token, answered 0.43 (``real-g2s-handoff-screen``). This recomputes
the asked line with and without each of its two newlines, beside native prefill, one document at a time.

    python benchmarks/probes/line_ends.py --direction g2s --docs 96 --length 512 --out probe-line-ends-g2s-512.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402

from answers import Answers, open_probe, print_rows, probe_parser, save  # noqa: E402 (this folder's)


def line_spans(context: str, span: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """The asked statement's character span, then with its trailing newline, then with the newline before it too
    (each only where that character is a newline)."""
    start, end = span
    after = end + (context[end:end + 1] == "\n")
    before = start - (start > 0 and context[start - 1] == "\n")
    return {"the fact's characters (oracle)": (start, end), "+ the newline after": (start, after),
            "+ the newlines before and after": (before, after)}


def main() -> None:
    args = probe_parser(__doc__, formats=("code",)).parse_args()
    model, documents, result = open_probe(args)
    receiver = model.receiver
    for fmt in args.formats:
        answers = Answers()
        for p in documents(fmt):
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
    save(args, result)


if __name__ == "__main__":
    main()
