"""Access to the bundled demo corpus (see corpus/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
SPLITS = ("train", "calib", "heldout")


def load_records(split: str) -> list[dict]:
    """All records of a split: dicts with "text" and "source"."""
    if split not in SPLITS:
        raise ValueError(f"unknown corpus split {split!r}; valid splits are {', '.join(SPLITS)}")
    path = CORPUS_DIR / f"{split}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_corpus(split: str) -> list[str]:
    """The document texts of a split, in their stored (deterministic) order."""
    return [r["text"] for r in load_records(split)]
