"""Publishing an adapter package: model card, one immutable hub version, and its ``registry.json`` entry."""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

from .cards import card_summary, render_card
from .errors import HeteroFoldError
from .hub import AdapterHub, LocalHub, PublishedVersion, RemoteHub, validate_repo_id, validate_version
from .io import locked
from .registry import PairEnd, Registry, open_registry
from .resolve import EMBEDDED_HUB_DIR, sha256_file
from .saving import CONFIG_NAME, METRICS_NAME, WEIGHTS_NAME, load_adapter
PUBLISHED_FILES = (CONFIG_NAME, WEIGHTS_NAME, METRICS_NAME)  # plus README.md (the card) and any *.png plots


def normalize_version(version: str) -> str:
    """``1.0.0`` and ``v1.0.0`` both mean ``v1.0.0`` (the tag name)."""
    return validate_version(version if str(version).startswith("v") else f"v{version}")


def hub_name(hub: AdapterHub, registry: Registry) -> str:
    """How the registry refers to ``hub``: "embedded" for the hub/ folder beside the registry file."""
    if isinstance(hub, LocalHub):
        beside = registry.path is not None and hub.root.resolve() == (registry.path.parent / EMBEDDED_HUB_DIR).resolve()
        return "embedded" if beside else "local"
    endpoint = hub.endpoint.rstrip("/") if isinstance(hub, RemoteHub) else ""
    return "hf" if endpoint == "https://huggingface.co" else endpoint


def _stage(package: Path, staging: Path, *, repo_id: str, version: str, license: str) -> str:
    """Copy the publishable files and render the card into ``staging``; returns the card text."""
    missing = [name for name in PUBLISHED_FILES if not (package / name).is_file()]
    if missing:
        raise HeteroFoldError(f"{package} is not a complete adapter package: {', '.join(missing)} missing. "
                              "Publish the --out folder of a finished `hf-fold train` run.")
    for path in [package / name for name in PUBLISHED_FILES] + sorted(package.glob("*.png")):
        shutil.copy2(path, staging / path.name)
    plots = sorted(p.name for p in staging.glob("*.png"))
    card = render_card(staging, repo_id=repo_id, version=version, license=license, plot=plots[0] if plots else None)
    (staging / "README.md").write_text(card, encoding="utf-8")
    return card


def _registry_metrics(metrics: dict, method: str) -> dict:
    row = metrics["methods"].get(method)
    if row is None:
        raise HeteroFoldError(f"{METRICS_NAME} has no row for the adapter's method {method!r}; re-run `hf-fold train`.")
    return {"recovered": row["recovered"], "kl": row["kl"], "top1": row["top1"], "nll": row["nll"],
            "benefit": metrics["benefit"], "context_tokens": metrics["context_tokens"]}


def push_package(
    package: str | Path,
    *,
    repo_id: str,
    version: str,
    hub: AdapterHub,
    registry: Registry | str | Path | None = None,
    license: str = "apache-2.0",
    message: str | None = None,
) -> PublishedVersion:
    """Render the card, publish ``package`` as ``repo_id`` ``version`` (one commit, immutable tag) and add the
    version to ``registry`` (default: the project's registry.json), saved atomically after the publish."""
    package, version = Path(package), normalize_version(version)
    validate_repo_id(repo_id)
    adapter = load_adapter(package)  # refuses a package whose weights do not match its config
    registry = _fresh(open_registry(registry))
    for entry in registry.entries():  # fail before publishing anything
        if entry.repo_id == repo_id and version in [v.version for v in entry.versions]:
            raise HeteroFoldError(f"{repo_id} {version} is already published and versions are immutable; "
                                  "bump --version.")
    metrics = json.loads((package / METRICS_NAME).read_text()) if (package / METRICS_NAME).is_file() else None
    with tempfile.TemporaryDirectory(prefix="hf-fold-push-") as tmp:
        staging = Path(tmp)
        card = _stage(package, staging, repo_id=repo_id, version=version, license=license)
        files = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        published = hub.publish(repo_id, staging, version=version, message=message or f"{repo_id} {version}")
    config = adapter.config
    with locked(registry.path) if registry.path is not None else nullcontext():
        registry = _fresh(registry)  # another push may have registered something meanwhile
        registry.add_version(
            repo_id=repo_id, hub=hub_name(hub, registry), method=config.method,
            sender=PairEnd(config.sender, config.sender_revision, config.sender_tokenizer, config.sender_spec),
            receiver=PairEnd(config.receiver, config.receiver_revision, config.receiver_tokenizer, config.receiver_spec),
            version=version, commit=published.commit, files=files, metrics=_registry_metrics(metrics, config.method),
            summary=card_summary(card),
        )
        registry.save()
    return published


def _fresh(registry: Registry) -> Registry:
    """The registry as it is on disk now (it may have changed since it was loaded)."""
    return Registry.load(registry.path) if registry.path is not None and registry.path.exists() else registry
