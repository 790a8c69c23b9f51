"""What do the receiver's wrong answers say? Each miss of native prefill and of a recompute setting is sorted as
another fact's value from the same document (a distractor), a near miss of the asked value (same length, at most two
digits wrong), or anything else, on the same documents.

With SmolLM2 receiving, facts in prose at 512 tokens, ``statement@0.05`` answered 0.94 where SmolLM2's own prefill
answered 0.70 (``real-g2s-handoff``). If native's misses are mostly the document's other facts, the asked line alone
being native is what helps: the mapped rows of the other facts no longer compete for the answer.

    python benchmarks/probes/distractors.py --direction g2s --docs 96 --length 512 --formats prose code \
        --out probe-distractors-g2s-512.json
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.evaluation.retrieval import ANSWER_RE  # noqa: E402
from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402

from answers import open_probe, probe_parser, save  # noqa: E402 (this folder's)

KINDS = ("right", "another fact's value", "near miss", "other")


def kind(decoded: str, answer: str, context: str) -> str:
    """Which of :data:`KINDS` an answer is: its first digit run against the asked value and the document's other
    five-digit values."""
    found = ANSWER_RE.match(decoded)
    got = found.group(1) if found else ""
    if got == answer:
        return "right"
    if got in set(re.findall(r"\b\d{5}\b", context)) - {answer}:
        return "another fact's value"
    if len(got) == len(answer) and sum(a != b for a, b in zip(got, answer)) <= 2:
        return "near miss"
    return "other"


def main() -> None:
    args = probe_parser(__doc__, formats=("prose",)).parse_args()
    model, documents, result = open_probe(args)
    receiver, tok = model.receiver, model.receiver.tokenizer
    for fmt in args.formats:
        kinds: dict[str, list[str]] = {"native": [], "statement@0.05": []}
        for p in documents(fmt):
            prefill = model.prefill_sender([p.context])
            make = {"native": lambda: native_prefill(receiver, [p.context]),
                    "statement@0.05": lambda: model.transfer(prefill, [p.context], recompute=0.05, select="statement",
                                                             query=p.question)}
            for name, cache in make.items():
                answer = model.generate(cache(), prompt=p.question, max_new_tokens=7, do_sample=False)
                kinds[name].append(kind(tok.decode(answer[0], skip_special_tokens=True), p.answer, p.context))
        counts = {name: {k: got.count(k) for k in KINDS} for name, got in kinds.items()}
        result["formats"][fmt] = {"counts": counts, "kinds": kinds}
        print(f"\n{args.direction}, {fmt}, {args.length} tokens, {args.docs} documents")
        for name, row in counts.items():
            print(f"  {name:16} " + ", ".join(f"{k} {n}" for k, n in row.items()))
    save(args, result)


if __name__ == "__main__":
    main()
