"""Reading text for calibration and evaluation: a bundled split, a text file, a folder or a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import HeteroFoldError
from .zoo.corpus import SPLITS, load_corpus

TEXT_SUFFIXES = {".txt", ".py", ".md", ".rst", ".json", ".c", ".h", ".js", ".ts", ".rs", ".go", ".java"}


def read_texts(source: str) -> list[str]:
    """Documents from ``source``: ``bundled:<split>``, a ``.jsonl`` file (``text`` field), a text file,
    or a folder (its text files, sorted by path)."""
    if source.startswith("bundled:"):
        split = source.split(":", 1)[1]
        if split not in SPLITS:
            raise HeteroFoldError(f"Unknown bundled split {split!r}; valid: {', '.join('bundled:' + s for s in SPLITS)}.")
        return load_corpus(split)
    path = Path(source)
    if not path.exists():
        raise HeteroFoldError(
            f"Data path {source!r} does not exist. Pass a text file, a folder of text files, a JSONL file "
            f"with a 'text' field, or one of {', '.join('bundled:' + s for s in SPLITS)}."
        )
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    elif path.suffix == ".jsonl":
        texts = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                texts.append(json.loads(line)["text"])
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise HeteroFoldError(f"{source}:{number} is not a JSON object with a 'text' field ({err}).") from err
    else:
        texts = [path.read_text(encoding="utf-8", errors="replace")]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise HeteroFoldError(f"Data path {source!r} holds no text. Point it at files with content.")
    return texts
