"""Build the ``unseen`` evaluation split: third-party, permissively licensed text that no fit or training sees.

Every fit in this project (calibration statistics, ``hf-fold train``, the demo models) reads the Python standard
library and synthetic retrieval documents (``bundled:train`` / ``bundled:calib``). Scoring on a held-out part of
that same source flatters a transfer (0.92 in-domain was 0.69 on third-party code), so headline figures use this
split instead: two kinds of text from packages this project installs, under MIT / BSD / Apache-2.0 licences:

- ``code``: whole ``.py`` files of networkx, jinja2, rich and fsspec (sha1-of-path order, 2-60 KB each);
- ``prose``: the README (long description) each package publishes in its metadata, Markdown with little code.

The licence of every package used is copied to ``corpus/licenses/``. Deterministic for the same installed
versions (recorded in each record's ``source``); the committed file is what the README's figures used.

    python scripts/build_unseen_corpus.py
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from importlib import metadata
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "heterofold_hub" / "zoo" / "corpus"
CODE_PACKAGES = {"networkx": 420_000, "jinja2": 120_000, "rich": 160_000, "fsspec": 100_000}  # characters each
PROSE_PACKAGES = ("transformers", "huggingface_hub", "lightning", "peft", "accelerate", "torch", "numpy", "rich",
                  "networkx", "jinja2", "pydantic", "typer", "fsspec", "safetensors", "tokenizers", "markdown-it-py",
                  "pygments", "requests", "urllib3", "aiohttp", "attrs", "sortedcontainers", "anyio", "packaging")
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
    files = [f for f in dist.files or [] if f.suffix == ".py" and "/tests/" not in f"/{f}" and not f.name.startswith("test")]
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


def main() -> None:
    records = [r for name, budget in CODE_PACKAGES.items() for r in code_records(name, budget)]
    records += [r for r in (prose_record(name) for name in PROSE_PACKAGES) if r is not None]
    path = CORPUS / "unseen.jsonl.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: same input, same bytes
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
    kinds = {k: sum(r["kind"] == k for r in records) for k in ("code", "prose")}
    print(f"wrote {path}: {len(records)} documents ({kinds}), {sum(len(r['text']) for r in records):,} characters")


if __name__ == "__main__":
    main()
