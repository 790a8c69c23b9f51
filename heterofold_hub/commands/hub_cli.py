"""The hub commands of ``hf-fold`` (push, pull, list, show, search): typed options only; the work is in
:mod:`heterofold_hub.commands.hub`. ``cli.py`` registers them on its app."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from heterofold_hub.commands.conventions import data, messages, renamed
from heterofold_hub.errors import UsageError

# Options shared by the hub commands (JSON_OUT and PIVOT also by cli.py's).
JSON_OUT = typer.Option(False, "--json", help="Print the registry records as JSON.")
PIVOT = typer.Option(None, "--pivot", help="auto | a model id: where no direct adapter is registered, compose "
                     "registered adapters sender -> pivot -> receiver (auto: the best recorded path).")
REGISTRY = typer.Option(None, "--registry", help="registry.json to read and update (default: the project's, or $HF_FOLD_REGISTRY).")
HUB_DIR = typer.Option(None, "--hub-dir", help="Local hub root (default $HF_FOLD_HOME or ~/.cache/heterofold); download cache for remote hubs.")
TOKEN = typer.Option(None, "--token", help="Token for a remote hub (default: huggingface_hub's stored token).")


def push_command(
    package: Path = typer.Argument(..., help="An adapter package: the --out folder of `hf-fold train`."),
    repo: str = typer.Option(..., "--repo", help="Repo id, ORG/NAME."),
    version: str = typer.Option(..., "--version", help="Version to publish, X.Y.Z, or X.Y.Z-rc.N for a pre-release "
                                "that resolves only when pinned (published versions are immutable)."),
    hub: Optional[str] = typer.Option(None, "--hub", help="local | hf | the http(s) URL of a Hub-compatible server "
                                      "(default: local)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", hidden=True, help="Old name of --hub URL."),
    hub_dir: Optional[Path] = HUB_DIR,
    token: Optional[str] = TOKEN,
    registry: Optional[Path] = REGISTRY,
    license: Optional[str] = typer.Option(None, "--license", help="License in the model card (default apache-2.0, or "
                                          "what a base model's terms require: gemma for Gemma 3)."),
):
    """Publish an adapter package: model card, one commit, an immutable version tag, a registry.json entry.

    Examples:

      hf-fold push runs/adapter --repo my-org/llama-to-qwen --version 1.0.0

      hf-fold push runs/adapter --repo my-org/llama-to-qwen --version 1.1.0 --hub hf

      hf-fold push runs/candidate --repo my-org/llama-to-qwen --version 1.2.0-rc.1

      hf-fold push runs/adapter --repo my-org/llama-to-qwen --version 1.0.0 --hub http://127.0.0.1:8080
    """
    from heterofold_hub.commands.hub import run_push

    hub = renamed("--hub", hub, "--endpoint", endpoint) or "local"
    run_push(package, repo_id=repo, version=version, hub=hub, hub_dir=hub_dir, token=token,
             registry_path=registry, license=license, console=messages)  # push prints no data, only what it did


def pull_command(
    ref: str = typer.Argument(..., help="ORG/NAME or ORG/NAME@VERSION (default: the latest version)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Copy the files into this new folder."),
    hub_dir: Optional[Path] = HUB_DIR,
    token: Optional[str] = TOKEN,
    registry: Optional[Path] = REGISTRY,
    local_files_only: bool = typer.Option(False, "--offline", help="Use only files downloaded before."),
):
    """Download a registered adapter version, checked against the hashes in registry.json.

    Examples:

      hf-fold pull heterofold/tiny-llama-code-to-tiny-qwen-code

      hf-fold pull heterofold/tiny-llama-code-to-tiny-qwen-code@1.0.0 --out adapters/l2q
    """
    from heterofold_hub.commands.hub import run_pull

    run_pull(ref, out=out, registry_path=registry, hub_dir=hub_dir, token=token, local_files_only=local_files_only,
             console=data)


def list_command(
    sender: Optional[str] = typer.Option(None, "--sender", help="Only adapters from this sender id."),
    receiver: Optional[str] = typer.Option(None, "--receiver", help="Only adapters into this receiver id."),
    family: Optional[str] = typer.Option(None, "--family", help="Only pairs with this model_type on either side (llama, qwen2, ...)."),
    method: Optional[str] = typer.Option(None, "--method", help="Only this method (heterofold, kv-ridge, ...)."),
    registry: Optional[Path] = REGISTRY,
    as_json: bool = JSON_OUT,
):
    """List the published pair adapters in registry.json (a table; piped, a header row and one tab-separated line each).

    Examples:

      hf-fold list

      hf-fold list --receiver heterofold/tiny-qwen-code --method heterofold
    """
    from heterofold_hub.commands.hub import run_list

    run_list(sender=sender, receiver=receiver, family=family, method=method, registry_path=registry, console=data,
             as_json=as_json)


def show_command(
    ref: Optional[str] = typer.Argument(None, help="ORG/NAME or ORG/NAME@VERSION (or give --sender and --receiver)."),
    sender: Optional[str] = typer.Option(None, "--sender", help="Show what resolves for this sender's pair instead."),
    receiver: Optional[str] = typer.Option(None, "--receiver", help="... into this receiver."),
    pivot: Optional[str] = PIVOT,
    card: bool = typer.Option(True, help="Also print the model card (downloaded from the adapter's hub)."),
    hub_dir: Optional[Path] = HUB_DIR,
    token: Optional[str] = TOKEN,
    registry: Optional[Path] = REGISTRY,
    as_json: bool = JSON_OUT,
):
    """Show one registered adapter (its pair, versions, metrics, files and model card), or what resolves for a pair.

    Examples:

      hf-fold show heterofold/tiny-llama-code-to-tiny-qwen-code

      hf-fold show heterofold/tiny-llama-code-to-tiny-qwen-code@1.0.0

      hf-fold show --sender heterofold/tiny-llama-code --receiver gguf/gemma3-270m-q4_k_m --pivot auto
    """
    from heterofold_hub.commands.hub import run_show, run_show_pair

    if (sender is None) != (receiver is None) or (ref is None) == (sender is None):
        raise UsageError("hf-fold show: give a REF (ORG/NAME[@VERSION]), or --sender and --receiver (with "
                         f"optional --pivot) for a pair; got REF={ref!r}, --sender={sender!r}, --receiver={receiver!r}")
    if ref is None:
        run_show_pair(sender, receiver, pivot=pivot, registry_path=registry, console=data, as_json=as_json)
        return
    if pivot is not None:
        raise UsageError("--pivot applies to a pair: use --sender and --receiver instead of a REF")
    run_show(ref, registry_path=registry, hub_dir=hub_dir, token=token, card=card, console=data, as_json=as_json)


def search_command(
    text: str = typer.Argument(..., help="Text to look for in repo ids, model ids, families, methods and summaries."),
    registry: Optional[Path] = REGISTRY,
    as_json: bool = JSON_OUT,
):
    """Search registry.json for adapters.

    Examples:

      hf-fold search qwen

      hf-fold search tiny-llama
    """
    from heterofold_hub.commands.hub import run_search

    run_search(text, registry_path=registry, console=data, as_json=as_json)


HUB_COMMANDS = {"push": push_command, "pull": pull_command, "list": list_command, "show": show_command,
                "search": search_command}
