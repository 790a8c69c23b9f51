"""Access to the bundled demo corpus (see corpus/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
# train / calib / heldout: CPython stdlib + synthetic retrieval documents, disjoint by file (what every fit reads);
# -natural / -retrieval: only the stdlib files, or only the synthetic documents (most of each split's documents,
# and the end of every one, where windows are cut, is questions and answers).
# unseen: third-party code and prose no fit reads (scripts/build_thirdparty_corpus.py); -code / -prose: one kind of it.
# wide: training text of the same two kinds from other packages (none unseen draws on), kinds interleaved.
KINDS = {"train": ("natural", "retrieval"), "calib": ("natural", "retrieval"), "heldout": ("natural", "retrieval"),
         "unseen": ("code", "prose"), "wide": ("code", "prose")}
SPLITS = tuple(s for name, kinds in KINDS.items() for s in (name, *(f"{name}-{k}" for k in kinds)))


def _kind(record: dict) -> str:
    if "kind" in record:
        return record["kind"]
    return "retrieval" if record["source"].startswith("synthetic/") else "natural"


def load_records(split: str) -> list[dict]:
    """All records of a split: dicts with "text" and "source" (``unseen``: also "kind" and "license")."""
    if split not in SPLITS:
        raise ValueError(f"unknown corpus split {split!r}; valid splits are {', '.join(SPLITS)}")
    name, _, kind = split.partition("-")
    path = CORPUS_DIR / f"{name}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if _kind(r) == kind] if kind else records


def load_corpus(split: str) -> list[str]:
    """The document texts of a split, in their stored (deterministic) order."""
    return [r["text"] for r in load_records(split)]
