"""Do mapped keys draw the receiver's attention from a recomputed fact? ``statement@0.05`` with the keys left mapped
scaled by each factor (``mapped_key_scale``), beside native prefill and the unscaled setting, on the same documents.

Scaling a row's keys scales every attention score on it, so below 1 the mapped rows take less of the softmax from the
receiver's own rows (the recomputed line, its prefix and its prompt). Screen the factor here on documents the
hand-off experiments do not use (``--seed 1``; they use seed 0), then measure the chosen factor there.

    python benchmarks/probes/key_scale.py --direction g2s --docs 32 --seed 1 --formats code prose \
        --scales 0.8 0.7 0.6 0.5 --out probe-key-scale-g2s-512.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.transfer.pipeline import native_prefill  # noqa: E402

from answers import Answers, open_probe, print_rows, probe_parser, save  # noqa: E402 (this folder's)


def main() -> None:
    parser = probe_parser(__doc__, formats=("code", "prose"))
    parser.add_argument("--scales", type=float, nargs="+", default=[0.8, 0.7, 0.6, 0.5])
    parser.add_argument("--select", default="statement", help="the recompute's select (statement reads the question)")
    parser.add_argument("--recompute", type=float, default=0.05)
    args = parser.parse_args()
    model, documents, result = open_probe(args)
    result.update(select=args.select, recompute=args.recompute, scales=args.scales)
    base = f"{args.select}@{args.recompute:g}"
    for fmt in args.formats:
        answers = Answers()
        for p in documents(fmt):
            prefill = model.prefill_sender([p.context], surprisal=True)

            def made(scale: float, p=p, prefill=prefill):
                return lambda: model.transfer(prefill, [p.context], recompute=args.recompute, select=args.select,
                                              query=p.question, mapped_key_scale=scale)

            make = {"native": lambda p=p: native_prefill(model.receiver, [p.context]), base: made(1.0)}
            make.update({f"{base} k{s:g}": made(s) for s in args.scales})
            answers.score(model, p, make)
        rows = answers.rows(base, "mcnemar_p_vs_unscaled")
        result["formats"][fmt] = rows
        print_rows(f"{args.direction}, {fmt}, {args.length} tokens, {args.docs} documents, seed {args.seed}", rows,
                   "mcnemar_p_vs_unscaled")
    save(args, result)


if __name__ == "__main__":
    main()
