"""Build the bundled demo corpus in heterofold_hub/zoo/corpus/.

Documents are CPython standard-library source files plus synthetic
long-context retrieval documents (heterofold_hub/zoo/retrieval.py).
Everything is deterministic: file selection and splits come from sha1 of the
relative path, synthetic documents from string-seeded RNGs.

    python scripts/build_corpus.py [--stdlib PATH] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from heterofold_hub.zoo.corpus import CORPUS_DIR  # noqa: E402
from heterofold_hub.zoo.retrieval import make_retrieval_doc  # noqa: E402

DEFAULT_STDLIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
# Directories that are tests, IDE code, vendored packages or generated tables:
# they would dominate a small corpus with repetitive, atypical text.
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "encodings", "pydoc_data",
             "__pycache__", "turtledemo", "__phello__"}
MAX_FILE_BYTES = 200_000
MAX_TOTAL_BYTES = 7_000_000
RETRIEVAL_SHARE = 0.45  # share of characters in synthetic retrieval docs: copying must be learned fast


def sha1(s: str) -> int:
    return int(hashlib.sha1(s.encode()).hexdigest(), 16)


def split_of(rel: str) -> str:
    """Split by file so that no source file is shared between splits."""
    bucket = sha1("split:" + rel) % 100
    if bucket < 90:
        return "train"
    if bucket < 94:
        return "calib"
    return "heldout"


def collect_sources(root: Path) -> list[tuple[str, str]]:
    items = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(part in SKIP_DIRS or part.startswith("config-") for part in rel.split("/")[:-1]):
            continue
        if path.stat().st_size > MAX_FILE_BYTES or path.stat().st_size < 200:
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        items.append((rel, text))
    # Keep the corpus a few MB: take files in a hash order (an unbiased,
    # reproducible sample) until the byte budget is used.
    items.sort(key=lambda it: sha1("pick:" + it[0]))
    chosen, total = [], 0
    for rel, text in items:
        size = len(text.encode())
        if total + size > MAX_TOTAL_BYTES:
            continue
        chosen.append((rel, text))
        total += size
    chosen.sort()
    return chosen


def filler_from(rng: random.Random, codes: list[str], lo: int = 500, hi: int = 1200) -> str:
    """A run of whole lines of code of roughly lo..hi characters."""
    want = rng.randint(lo, hi)
    code = rng.choice([c for c in codes if len(c) > want] or codes)
    start = rng.randint(0, max(0, len(code) - want))
    start = code.rfind("\n", 0, start) + 1  # snap to a line start
    end = code.find("\n", start + want)
    return code[start:] if end < 0 else code[start : end + 1]


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    buf = io.BytesIO()
    # mtime=0 and no filename make the archive bytes reproducible.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for r in records:
            gz.write((json.dumps(r, ensure_ascii=False) + "\n").encode())
    path.write_bytes(buf.getvalue())


def build(stdlib: Path, out_dir: Path, seed: int = 0) -> dict[str, int]:
    sources = collect_sources(stdlib)
    by_split: dict[str, list[dict]] = {"train": [], "calib": [], "heldout": []}
    for rel, text in sources:
        by_split[split_of(rel)].append({"text": text, "source": rel})

    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, code_docs in by_split.items():
        # A per-split seed keeps held-out facts out of training data.
        rng = random.Random(f"heterofold-corpus:{seed}:{split}")
        codes = [d["text"] for d in code_docs]
        # Generate retrieval docs until they hold RETRIEVAL_SHARE of the split's characters.
        code_chars = sum(len(c) for c in codes)
        target = code_chars * RETRIEVAL_SHARE / (1 - RETRIEVAL_SHARE)
        synth, synth_chars = [], 0
        while synth_chars < target:
            lead = filler_from(rng, codes, 0, 2000) if rng.random() < 0.7 else ""
            text, _ = make_retrieval_doc(rng, filler_from(rng, codes), rng.randint(4, 8), lead=lead)
            synth.append({"text": text, "source": f"synthetic/retrieval/{split}/{len(synth):05d}"})
            synth_chars += len(text)
        n_retr = len(synth)
        docs = code_docs + synth
        rng.shuffle(docs)
        write_jsonl_gz(out_dir / f"{split}.jsonl.gz", docs)
        counts[split] = len(docs)
        print(f"{split}: {len(code_docs)} code files + {n_retr} retrieval docs, "
              f"{sum(len(d['text']) for d in docs) / 1e6:.2f} M chars")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stdlib", type=Path, default=Path(DEFAULT_STDLIB))
    ap.add_argument("--out", type=Path, default=CORPUS_DIR)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    build(args.stdlib, args.out, args.seed)


if __name__ == "__main__":
    main()
