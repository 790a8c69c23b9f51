"""What the retrieval probes share: score caches made per document by the receiver's answer to its own question,
and sum them up paired against one of them."""

from __future__ import annotations

from typing import Callable

from heterofold_hub.evaluation.handoff import mcnemar
from heterofold_hub.evaluation.retrieval import exact_match


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
