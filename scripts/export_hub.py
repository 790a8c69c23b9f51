"""Export the embedded hub's repos as Hugging Face Hub repo folders, and optionally upload them.

    python scripts/export_hub.py --out exported                       # each repo's default version
    python scripts/export_hub.py --out exported --all-versions --repo heterofold/smollm2-135m-to-gemma3-270m
    python scripts/export_hub.py --out exported --upload https://huggingface.co --token hf_...   # or $HF_TOKEN

Each ``OUT/<namespace>/<name>/<vX.Y.Z>/`` holds the version's adapter_config.json, adapter.safetensors, README.md
model card and metrics.json, checked against registry.json's hashes: what ``huggingface_hub.upload_folder`` takes.
``--upload`` publishes them in version order, one commit tagged vX.Y.Z each (heterofold_hub.hub.export.upload).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from heterofold_hub.hub.export import export_hub, upload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write <namespace>/<name>/<version>/ into")
    parser.add_argument("--registry", help="registry.json whose embedded hub (hub/ beside it) is exported "
                        "(default: the project's)")
    parser.add_argument("--repo", action="append", help="export only this repo id (repeatable)")
    parser.add_argument("--all-versions", action="store_true", help="every registered version, not only the default")
    parser.add_argument("--upload", metavar="ENDPOINT", help="then publish them to this Hub-compatible endpoint")
    parser.add_argument("--token", default=os.environ.get("HF_TOKEN"), help="token for --upload (default: $HF_TOKEN)")
    args = parser.parse_args(argv)
    exported = export_hub(args.out, registry=args.registry, repos=args.repo, all_versions=args.all_versions)
    for e in exported:
        print(f"{e.repo_id}\t{e.version}\t{e.folder}")
    if args.upload:
        for published in upload(exported, endpoint=args.upload, token=args.token):
            print(f"uploaded {published.repo_id} {published.version}: {published.url_or_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
