"""Publishing an adapter package: model card, one immutable hub version, and its ``registry.json`` entry.

A push is all or nothing and safe to retry. It holds the registry's lock from start to end, so pushes into one
registry run one at a time, and checks everything it can before publishing. A push stopped between publishing
and registering (killed, power cut) leaves the version in the hub but not in the registry; retried with
byte-identical files, it registers that version without uploading again ("rolls forward"); with different
files it is refused, since a published version never changes.

A release pushed with the very files of a registered pre-release of the same version (``v1.4.0`` after
``v1.4.0-rc.2``: the same weights, config and metrics; only the card, which names the version, differs) takes that
pre-release's evaluations, since they measured these weights: promoting a candidate does not cost its evaluations.

Fault injection for tests: ``HF_FOLD_FAULT=after-publish`` makes the process die (``os._exit(137)``, as if
killed) right after the hub publish and before the registry is touched.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from heterofold_hub.hub.cards import CARD_NAME, card_summary, published_split, render_card
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub import AdapterHub, LocalHub, PublishedVersion, RemoteHub, validate_repo_id
from heterofold_hub.hub.base import is_prerelease, normalize_version, version_key
from heterofold_hub.io import locked
from heterofold_hub.hub.registry import PairEnd, Registry, RegistryError, VersionEntry, open_registry
from heterofold_hub.hub.fetching import EMBEDDED_HUB_DIR, sha256_file
from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.config import CONFIG_NAME, METRICS_NAME, WEIGHTS_NAME

FAULT_ENV = "HF_FOLD_FAULT"  # see the module docstring
PUBLISHED_FILES = (CONFIG_NAME, WEIGHTS_NAME, METRICS_NAME)  # plus README.md (the card) and any *.png plots


def hub_name(hub: AdapterHub, registry: Registry) -> str:
    """How the registry refers to ``hub``: "embedded" for the hub/ folder beside the registry file."""
    if isinstance(hub, LocalHub):
        beside = registry.path is not None and hub.root.resolve() == (registry.path.parent / EMBEDDED_HUB_DIR).resolve()
        return "embedded" if beside else "local"
    endpoint = hub.endpoint.rstrip("/") if isinstance(hub, RemoteHub) else ""
    return "hf" if endpoint == "https://huggingface.co" else endpoint


def _stage(package: Path, staging: Path, *, repo_id: str, version: str, license: str | None) -> str:
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


def _registry_metrics(metrics: dict, method: str, config: dict) -> dict:
    row = metrics.get("methods", {}).get(method)
    if row is None:
        raise HeteroFoldError(f"{METRICS_NAME} has no row for the adapter's method {method!r}; re-run `hf-fold train`.")
    try:
        measured = {"recovered": row["recovered"], "kl": row["kl"], "top1": row["top1"], "nll": row["nll"],
                    "benefit": metrics["benefit"], "context_tokens": metrics["context_tokens"]}
    except KeyError as err:
        raise HeteroFoldError(f"{METRICS_NAME} lacks {err} (for method {method!r}); use the metrics.json that "
                              "`hf-fold train` wrote for this package.") from None
    # what the figures were measured on: the split the card states (published_split), and how much of it
    where = {"data": published_split(config, metrics), "windows": metrics.get("windows")}
    return {**measured, **{k: v for k, v in where.items() if v is not None}}


def push_package(
    package: str | Path,
    *,
    repo_id: str,
    version: str,
    hub: AdapterHub,
    registry: Registry | str | Path | None = None,
    license: str | None = None,
    message: str | None = None,
) -> PublishedVersion:
    """Render the card, publish ``package`` as ``repo_id`` ``version`` (one commit, immutable tag) and add the
    version to ``registry`` (default: the project's registry.json), saved atomically after the publish.

    Retrying a push that stopped after publishing registers the hub's version if its files are byte-identical
    (the result has ``reused=True``); see the module docstring."""
    package, version = Path(package), normalize_version(version)
    validate_repo_id(repo_id)
    adapter = load_adapter(package)  # refuses a package whose weights do not match its config
    registry = open_registry(registry, must_exist=False)  # the first push creates the registry file
    with locked(registry.path) if registry.path is not None else nullcontext():
        registry = _fresh(registry)  # another push may have registered something meanwhile
        for entry in registry.entries():  # fail before publishing anything
            if entry.repo_id == repo_id and version in [v.version for v in entry.versions]:
                raise HeteroFoldError(f"{repo_id} {version} is already published and versions are immutable; "
                                      "bump --version.")
        with tempfile.TemporaryDirectory(prefix="hf-fold-push-") as tmp:
            staging = Path(tmp)
            card = _stage(package, staging, repo_id=repo_id, version=version, license=license)
            files = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
            metrics = json.loads((staging / METRICS_NAME).read_text())  # render_card has checked it parses
            config_record = json.loads((staging / CONFIG_NAME).read_text())
            config = adapter.config
            record = dict(
                repo_id=repo_id, hub=hub_name(hub, registry), method=config.method,
                sender=PairEnd(config.sender, config.sender_revision, config.sender_tokenizer, config.sender_spec),
                receiver=PairEnd(config.receiver, config.receiver_revision, config.receiver_tokenizer,
                                 config.receiver_spec),
                version=version, files=files, metrics=_registry_metrics(metrics, config.method, config_record),
                summary=card_summary(card))
            try:  # the registry must take the entry: find out before publishing anything
                copy.deepcopy(registry).add_version(commit="0" * 40, **record)
            except RegistryError as err:
                raise RegistryError(f"{package} cannot be registered, so nothing was published: {err}") from None
            published = _already_in_hub(hub, repo_id, version, files) or hub.publish(
                repo_id, staging, version=version, message=message or f"{repo_id} {version}")
        _fault_point("after-publish")
        carried = _promoted_from(registry, repo_id, version, files)
        entry = registry.add_version(commit=published.commit, **record)
        if carried is not None:
            next(v for v in entry.versions if v.version == version).evaluations.extend(
                copy.deepcopy(carried.evaluations))
            published = replace(published, evaluations_from=carried.version)
        registry.save()
    return published


def _promoted_from(registry: Registry, repo_id: str, version: str, files: dict[str, str]) -> VersionEntry | None:
    """The newest registered pre-release of ``version`` (``v1.4.0-rc.N`` for ``v1.4.0``) with evaluations and the
    same files as ``files`` but the card; None for a pre-release or where there is none."""
    if is_prerelease(version):
        return None
    entry = next((e for e in registry.entries() if e.repo_id == repo_id), None)
    adapter_files = lambda found: {k: h for k, h in found.items() if k != CARD_NAME}  # noqa: E731
    candidates = [v for v in (entry.versions if entry else []) if is_prerelease(v.version) and v.evaluations
                  and version_key(v.version)[:3] == version_key(version)[:3]
                  and adapter_files(v.files) == adapter_files(files)]
    return max(candidates, key=lambda v: version_key(v.version), default=None)


def _already_in_hub(hub: AdapterHub, repo_id: str, version: str, files: dict[str, str]) -> PublishedVersion | None:
    """``version`` as the hub has it, if an earlier push published exactly ``files`` but stopped before
    registering it; None if the hub does not have it. Different files are refused: versions are immutable."""
    if not hub.exists(repo_id) or version not in hub.versions(repo_id):
        return None
    folder = Path(hub.download(repo_id, version=version))
    there = {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}
    differ = sorted(name for name in files.keys() | there.keys() if files.get(name) != there.get(name))
    if differ:
        raise HeteroFoldError(
            f"{repo_id} {version} is already published in {hub!r}, with other files than this package "
            f"({', '.join(differ)} differ), though the registry does not list it. Published versions are immutable: "
            "bump --version (or push the exact package that was published, to register it).")
    return replace(hub.version_info(repo_id, version), reused=True)


def _fault_point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        os._exit(137)  # like SIGKILL: no cleanup handlers, no finally blocks


def _fresh(registry: Registry) -> Registry:
    """The registry as it is on disk now (it may have changed since it was loaded)."""
    return Registry.load(registry.path) if registry.path is not None and registry.path.exists() else registry
