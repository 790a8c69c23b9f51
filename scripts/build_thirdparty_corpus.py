"""Build the two third-party splits: ``unseen`` (evaluation: no fit or training sees it) and ``wide`` (training).

Every fit in this project (calibration statistics, ``hf-fold train``, the demo models) reads the Python standard
library and synthetic retrieval documents (``bundled:train`` / ``bundled:calib``). Scoring on a held-out part of
that same source flatters a transfer (0.92 in-domain was 0.69 on third-party code), so headline figures use this
split instead: two kinds of text from packages this project installs, under MIT / BSD / Apache-2.0 licences:

- ``code``: whole ``.py`` files of networkx, jinja2, rich and fsspec (sha1-of-path order, 2-60 KB each);
- ``prose``: the README (long description) each package publishes in its metadata, Markdown with little code.

``wide`` is the same two kinds from *other* packages (none that ``unseen`` draws on, none that vendors code), in
sha1-of-source order so that any prefix of it mixes code and prose: training text from many authors, for fits that
should carry over to third-party text. A record sharing a passage with ``unseen`` is dropped.

The licence of every package used is copied to ``corpus/licenses/``. Deterministic for the same installed
versions (recorded in each record's ``source``); the committed files are what the README's figures used.

    python scripts/build_thirdparty_corpus.py unseen
    python scripts/build_thirdparty_corpus.py wide
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from importlib import metadata
from pathlib import Path

from heterofold_hub.data.texts import shared_passages

CORPUS = Path(__file__).resolve().parents[1] / "heterofold_hub" / "zoo" / "corpus"
CODE_PACKAGES = {"networkx": 420_000, "jinja2": 120_000, "rich": 160_000, "fsspec": 100_000}  # characters each
PROSE_PACKAGES = ("transformers", "huggingface_hub", "lightning", "peft", "accelerate", "torch", "numpy", "rich",
                  "networkx", "jinja2", "pydantic", "typer", "fsspec", "safetensors", "tokenizers", "markdown-it-py",
                  "pygments", "requests", "urllib3", "aiohttp", "attrs", "sortedcontainers", "anyio", "packaging")
WIDE_CODE_PACKAGES = {"sympy": 500_000, "mpmath": 200_000, "fonttools": 300_000, "torchmetrics": 300_000,
                      "pytest": 200_000, "click": 150_000, "pyparsing": 100_000, "python-dateutil": 100_000,
                      "httpx2": 100_000, "httpcore2": 80_000}
WIDE_PROSE_PACKAGES = ("charset-normalizer", "fonttools", "frozenlist", "h11", "httpcore2", "httpx2", "idna", "mpmath",
                       "pillow", "propcache", "psutil", "pytest", "python-dateutil", "sympy", "torchmetrics", "yarl",
                       "annotated-types", "annotated-doc", "multidict", "pluggy", "pydantic_core", "lightning-utilities",
                       "gguf", "truststore")
SPLITS = {"unseen": (CODE_PACKAGES, PROSE_PACKAGES), "wide": (WIDE_CODE_PACKAGES, WIDE_PROSE_PACKAGES)}
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache)", re.I)
MIN_PROSE_CHARS = 3000


def licence_of(dist: metadata.Distribution) -> str:
    meta = dist.metadata
    expression = meta.get("License-Expression") or ""
    classifiers = " ".join(c for c in meta.get_all("Classifier") or [] if c.startswith("License"))
    licence = expression or (meta.get("License") or "")[:60] or classifiers
    if not PERMISSIVE.search(f"{expression} {classifiers} {meta.get('License') or ''}"):
        raise SystemExit(f"{dist.name}: licence {licence!r} is not MIT/BSD/Apache; leave it out")
    return licence.strip() or classifiers


def copy_licence(dist: metadata.Distribution) -> None:
    # the package's own licence files (dist-info/ or dist-info/licenses/), not notices of everything it vendors
    files = [f for f in dist.files or [] if re.match(r"LICEN[CS]E", f.name, re.I) and len(f.parts) <= 3
             and f.parts[0].endswith(".dist-info")]
    text = "\n\n".join(f.locate().read_text(encoding="utf-8", errors="replace") for f in files)
    out = CORPUS / "licenses" / f"{dist.metadata['Name']}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"{dist.metadata['Name']} {dist.version}: {licence_of(dist)}\n\n{text}")


def code_records(name: str, budget: int) -> list[dict]:
    dist = metadata.distribution(name)
    files = [f for f in dist.files or [] if f.suffix == ".py" and not f.name.startswith("test")
             and not re.search(r"/(tests?|_vendor|vendored)/", f"/{f}")]
    files.sort(key=lambda f: hashlib.sha1(str(f).encode()).hexdigest())
    records, total = [], 0
    for f in files:
        text = f.locate().read_text(encoding="utf-8", errors="replace")
        if not 2000 <= len(text) <= 60000:
            continue
        records.append({"text": text, "source": f"{dist.metadata['Name']}=={dist.version}/{f}", "kind": "code",
                        "license": licence_of(dist)})
        total += len(text)
        if total >= budget:
            break
    copy_licence(dist)
    return records


def prose_record(name: str) -> dict | None:
    dist = metadata.distribution(name)
    text = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
    text = text.strip()
    if len(text) < MIN_PROSE_CHARS:
        return None
    copy_licence(dist)
    return {"text": text, "source": f"{dist.metadata['Name']}=={dist.version}/README", "kind": "prose",
            "license": licence_of(dist)}


def main(split: str) -> None:
    if split not in SPLITS:
        raise SystemExit(f"usage: python scripts/build_thirdparty_corpus.py {'|'.join(SPLITS)} (got {split!r})")
    code_packages, prose_packages = SPLITS[split]
    records = [r for name, budget in code_packages.items() for r in code_records(name, budget)]
    records += [r for r in (prose_record(name) for name in prose_packages) if r is not None]
    if split == "wide":
        from heterofold_hub.zoo.corpus import load_corpus

        shared = set(shared_passages(load_corpus("unseen"), [r["text"] for r in records]))
        records = [r for i, r in enumerate(records) if i not in shared]
        records.sort(key=lambda r: hashlib.sha1(r["source"].encode()).hexdigest())
        print(f"dropped {len(shared)} record(s) sharing a passage with unseen")
    path = CORPUS / f"{split}.jsonl.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: same input, same bytes
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
    kinds = {k: sum(r["kind"] == k for r in records) for k in ("code", "prose")}
    print(f"wrote {path}: {len(records)} documents ({kinds}), {sum(len(r['text']) for r in records):,} characters")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
