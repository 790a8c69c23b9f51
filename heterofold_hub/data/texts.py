"""Reading text for calibration and evaluation: a bundled split, a text file, a folder or a JSONL file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError, UsageError
from heterofold_hub.zoo.corpus import SPLITS, load_corpus

TEXT_SUFFIXES = {".txt", ".py", ".md", ".rst", ".json", ".c", ".h", ".js", ".ts", ".rs", ".go", ".java"}


def source_parts(source: str) -> list[str]:
    """The sources a ``--data``-style value names: one, or several joined by commas
    (``bundled:wide,bundled:train-natural``). A path that exists is one source, commas in its name and all."""
    if "," not in source or Path(source).exists():
        return [source]
    parts = [part.strip() for part in source.split(",")]
    if not all(parts):
        raise UsageError(f"Data {source!r} has an empty source between commas; give sources joined by single commas, "
                         "e.g. bundled:wide,bundled:train-natural.")
    repeated = sorted({part for part in parts if parts.count(part) > 1})
    if repeated:
        raise UsageError(f"Data {source!r} names {repeated[0]!r} twice; give each source once (its text would weigh "
                         "double).")
    return parts


def read_texts(source: str) -> list[str]:
    """Documents from ``source``: ``bundled:<split>``, a ``.jsonl`` file (``text`` field), a text file,
    or a folder (its text files, sorted by path); several joined by commas, one source's documents after another's
    (windows are then taken round-robin across all of them: :func:`~heterofold_hub.data.windows.make_windows`)."""
    parts = source_parts(source)
    if len(parts) > 1:
        return [text for part in parts for text in read_texts(part)]
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
        texts = [_jsonl_text(source, number, line) for number, line in enumerate(path.read_bytes().splitlines(), 1)
                 if line.strip()]
    else:
        texts = [path.read_text(encoding="utf-8", errors="replace")]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise HeteroFoldError(f"Data path {source!r} holds no text. Point it at files with content.")
    return texts


def _jsonl_text(source: str, number: int, line: bytes) -> str:
    """The ``text`` string of line ``number`` of a JSONL file; a line that is not UTF-8 JSON with one is a usage error
    naming the file, the line and the fix (a data set is not guessed at: JSON text is UTF-8 by definition)."""
    where = f"{source}, line {number}"
    shape = 'each line must be a JSON object with a "text" string, e.g. {"text": "def f(x): ..."}'
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UsageError(f"{where}: byte 0x{line[err.start]:02x} at column {err.start + 1} is not UTF-8; re-save the "
                         "file as UTF-8 (JSON text is UTF-8), or drop the line.") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{where}: not JSON ({err.msg} at column {err.colno}); {shape}.") from None
    if not isinstance(record, dict) or "text" not in record:
        found = f"an object with keys {', '.join(map(repr, record))}" if isinstance(record, dict) else type(record).__name__
        raise UsageError(f"{where}: found {found}; {shape}.")
    if not isinstance(record["text"], str):
        raise UsageError(f"{where}: \"text\" is {type(record['text']).__name__} {str(record['text'])[:40]}; {shape}.")
    return record["text"]


SHINGLE_LINES = 6  # consecutive non-blank lines that make a passage


def _shingles(text: str) -> set[bytes]:
    """Hashes of every run of ``SHINGLE_LINES`` consecutive non-blank lines (stripped), skipping runs of only short
    lines (closing brackets, ``else:``) that any two texts may share."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    runs = (lines[i:i + SHINGLE_LINES] for i in range(len(lines) - SHINGLE_LINES + 1))
    return {hashlib.blake2b("\n".join(run).encode(), digest_size=12).digest() for run in runs
            if sum(len(line) for line in run) >= 12 * SHINGLE_LINES}


def shared_passages(seen: list[str], held_out: list[str]) -> list[int]:
    """Indices of ``held_out`` texts that share a passage (``SHINGLE_LINES`` consecutive lines) with ``seen``: a
    near-duplicate (an edited copy, a file vendored twice) as well as an exact one."""
    known = set().union(*(_shingles(t) for t in seen)) if seen else set()
    return [i for i, text in enumerate(held_out) if _shingles(text) & known]


def same_source(a: str, b: str) -> bool:
    """Whether two ``--data``-style values name a source in common (``./x.jsonl`` and ``x.jsonl`` are one)."""
    return any(_same_one(x, y) for x in source_parts(a) for y in source_parts(b))


def _same_one(a: str, b: str) -> bool:
    if a.startswith("bundled:") or b.startswith("bundled:"):
        return a == b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def trained_on_eval_text(trained_on: str, data: str) -> bool:
    """Whether an adapter trained on ``trained_on`` saw any of ``data``: the same source under any spelling, or,
    where the training text can still be read, a shared passage."""
    if same_source(trained_on, data):
        return True
    try:
        seen = read_texts(trained_on)
    except HeteroFoldError:  # the training text is not on this machine: only its name can be compared
        return False
    return bool(shared_passages(seen, read_texts(data)))
