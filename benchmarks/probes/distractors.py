"""What do the receiver's wrong answers say? Each miss of native prefill and of a recompute setting is sorted as
another fact's value from the same document (a distractor), a near miss of the asked value (same length, at most two
digits wrong), or anything else, on the same documents.

With SmolLM2 receiving, facts in prose at 512 tokens, ``statement@0.05`` answered 0.94 where SmolLM2's own prefill
answered 0.70 (``real-g2s-handoff``). If native's misses are mostly the document's other facts, the asked line alone
being native is what helps: the mapped rows of the other facts no longer compete for the answer.

    python benchmarks/probes/distractors.py --direction g2s --docs 96 --length 512 --formats prose code \
        --out probe-distractors-g2s-512.json

With Gemma 3 receiving, facts in prose at 512 tokens, ``statement-tail`` keeps less than ``statement`` alone: do the
native rows of the recent tail bring other facts' values to the answer? ``--settings`` names what to sort beside native:

    python benchmarks/probes/distractors.py --direction s2g --formats prose \
        --settings statement@0.05 statement-tail@0.12 --out probe-distractors-s2g-512.json
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
VALUE = re.compile(r"\b\d{5}\b")  # a fact's value, as the hand-off documents state them


def kind(decoded: str, answer: str, context: str) -> str:
    """Which of :data:`KINDS` an answer is: its first digit run against the asked value and the document's other
    five-digit values."""
    found = ANSWER_RE.match(decoded)
    got = found.group(1) if found else ""
    if got == answer:
        return "right"
    if got in set(VALUE.findall(context)) - {answer}:
        return "another fact's value"
    if len(got) == len(answer) and sum(a != b for a, b in zip(got, answer)) <= 2:
        return "near miss"
    return "other"


def sibling_in_tail(tok, context: str, answer: str, share: float) -> bool:
    """Whether another fact's value lies in the last ``share`` of the context's receiver tokens: the span a tail
    strategy recomputes, to within the asked line it takes first (so slightly wider than that span)."""
    offsets = tok(context, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
    start = offsets[min(len(offsets) - 1, int(len(offsets) * (1 - share)))][0]
    return any(m.start() >= start for m in VALUE.finditer(context) if m.group() != answer)


def main() -> None:
    parser = probe_parser(__doc__, formats=("prose",))
    parser.add_argument("--settings", nargs="+", default=["statement@0.05"], metavar="SELECT@SHARE",
                        help="recompute settings to sort beside native (default statement@0.05)")
    args = parser.parse_args()
    settings = {}
    for name in args.settings:
        select, _, share = name.partition("@")
        try:
            settings[name] = (select, float(share))
        except ValueError:
            parser.error(f"--settings {name!r}: expected SELECT@SHARE, e.g. statement-tail@0.12")
    model, documents, result = open_probe(args)
    receiver, tok = model.receiver, model.receiver.tokenizer
    for fmt in args.formats:
        kinds: dict[str, list[str]] = {name: [] for name in ("native", *settings)}
        tails = {name: [] for name, (select, _) in settings.items() if select.endswith("tail")}
        for p in documents(fmt):
            for name in tails:
                tails[name].append(sibling_in_tail(tok, p.context, p.answer, settings[name][1]))
            prefill = model.prefill_sender([p.context])
            make = {"native": lambda: native_prefill(receiver, [p.context])}
            for name, (select, share) in settings.items():
                make[name] = lambda select=select, share=share: model.transfer(
                    prefill, [p.context], recompute=share, select=select, query=p.question)
            for name, cache in make.items():
                answer = model.generate(cache(), prompt=p.question, max_new_tokens=7, do_sample=False)
                kinds[name].append(kind(tok.decode(answer[0], skip_special_tokens=True), p.answer, p.context))
        counts = {name: {k: got.count(k) for k in KINDS} for name, got in kinds.items()}
        result["formats"][fmt] = {"counts": counts, "kinds": kinds}
        first = args.settings[0]
        for name in settings:  # paired with the first setting: which documents it gains and loses, and as what
            if name != first:
                lost = [k for a, k in zip(kinds[first], kinds[name]) if a == "right" and k != "right"]
                gained = [a for a, k in zip(kinds[first], kinds[name]) if k == "right" and a != "right"]
                result["formats"][fmt].setdefault("against_first", {})[name] = {
                    "lost": {k: lost.count(k) for k in KINDS[1:]}, "gained_from": {k: gained.count(k) for k in KINDS[1:]}}
        for name, inside in tails.items():  # its answers by whether another fact was in the span it recomputes
            result["formats"][fmt].setdefault("sibling_in_tail", {})[name] = {
                str(flag): {k: sum(1 for i, g in zip(inside, kinds[name]) if i == flag and g == k) for k in KINDS}
                for flag in (True, False)}
        print(f"\n{args.direction}, {fmt}, {args.length} tokens, {args.docs} documents")
        for name, row in counts.items():
            print(f"  {name:22} " + ", ".join(f"{k} {n}" for k, n in row.items()))
        for name, row in result["formats"][fmt].get("against_first", {}).items():
            print(f"  {name} against {first}: lost as {row['lost']}, gained from {row['gained_from']}")
        for name, row in result["formats"][fmt].get("sibling_in_tail", {}).items():
            print(f"  {name}, another fact in its tail: {row['True']}; none there: {row['False']}")
    save(args, result)


if __name__ == "__main__":
    main()
