"""The ceiling of query-agnostic selection: every fact statement of the document recomputed, not only the asked one.

A strategy that does not know the question can at best find every statement that carries a fact (it cannot know
which will be asked). This recomputes exactly those lines (the ``oracle`` strategy given every fact's span) and
compares retrieval with the asked line alone (``oracle``), the pure transfer and native prefill on the same
documents; ``+L2`` repairs the first two layers too, ``--tails`` adds the document's last characters.

    python benchmarks/probes/every_fact.py --docs 32 --length 512
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.handoff import FORMATS, PROSE_FACT, make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402
from heterofold_hub.zoo.retrieval import fact_line  # noqa: E402

from answers import Answers, print_rows  # noqa: E402 (this folder's)

# one statement per format, as the documents write them (name and value captured)
STATEMENT = {"code": re.compile(re.escape(fact_line("NAME", "0").rstrip("\n")).replace("NAME", r"\S+").replace("0", r"\d+")),
             "prose": re.compile(re.escape(PROSE_FACT.format(name="NAME", value="0").rstrip("\n"))
                                 .replace("NAME", r"\S+").replace("0", r"\d+"))}


def fact_spans(text: str, fmt: str) -> list[tuple[int, int]]:
    """Character spans of every fact statement in ``text`` (the asked one among them)."""
    return [(m.start(), m.end()) for m in STATEMENT[fmt].finditer(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=32)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--tails", type=float, nargs="*", default=[],
                        help="also every fact line plus this last share of the document's characters, each")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m",
                                            load_sender=True)
    receiver = model.receiver
    fillers = filler_texts(read_texts("bundled:unseen"))
    exclude = known_facts(read_texts("bundled:wide"))  # as the hand-off harness draws its documents
    result = {"docs": args.docs, "length": args.length, "tails": args.tails, "formats": {}}
    for fmt in args.formats:
        prompts = make_handoff_prompts(fillers, receiver, args.length, args.docs, fmt=fmt, exclude=exclude)
        answers = Answers()
        for p in prompts:
            spans = fact_spans(p.context, fmt)
            assert any(a <= p.span[0] and p.span[1] <= b for a, b in spans), "the asked statement is not found"
            prefill = model.prefill_sender([p.context])
            make = {  # fresh caches each time: generate grows the cache it continues from
                "native": lambda: native_prefill(receiver, [p.context]),
                "transfer": lambda: model.transfer(prefill, [p.context], recompute=0),
                "asked line (oracle)": lambda: model.transfer(prefill, [p.context], select="oracle",
                                                              spans=[[p.span]]),
                "every fact line": lambda: model.transfer(prefill, [p.context], select="oracle", spans=[spans]),
                "every fact line+L2": lambda: model.transfer(prefill, [p.context], select="oracle", spans=[spans],
                                                             repair_layers=2),
            }
            for tail in args.tails:  # the recent context native too: does it settle the siblings' competition?
                last = [(int(len(p.context) * (1 - tail)), len(p.context))]
                make[f"every fact line+last {tail:g}"] = (
                    lambda last=last: model.transfer(prefill, [p.context], select="oracle", spans=[spans + last]))
            answers.score(model, p, make)
        rows = answers.rows("asked line (oracle)", "mcnemar_p_vs_asked")
        result["formats"][fmt] = rows
        print_rows(f"{fmt}, {args.length} tokens, {args.docs} documents", rows, "mcnemar_p_vs_asked")
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
