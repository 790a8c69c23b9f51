"""From a (sender, receiver) pair to a loaded, verified adapter: registry lookup, hub download, integrity
check of every file against the hashes the registry recorded, and the pair check against the loaded models."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.adapter.config import WEIGHTS_NAME
from heterofold_hub.adapter.save_and_load import check_pair
from heterofold_hub.base_models.fingerprint import tokenizer_fingerprint
from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import HeteroFoldError, IntegrityError
from heterofold_hub.hub.base import unknown_repo_hint
from heterofold_hub.hub.fetching import EMBEDDED_HUB_DIR, fetch, hub_for, sha256_file, verify_files  # noqa: F401 (re-exported)
from heterofold_hub.hub.registry import AdapterEntry, NoAdapterError, PairEnd, PivotPath, Registry, VersionEntry, open_registry
from heterofold_hub.methods import load_adapter
from heterofold_hub.methods.affine import affine_methods
from heterofold_hub.methods.composed import compose

logger = logging.getLogger(__name__)


@dataclass
class ResolvedAdapter:
    """A loaded adapter and where it came from: ``repo_id``/``version`` are None for a plain folder; a composition
    of two registered adapters has ``path`` (and no folder: it was composed in memory)."""

    adapter: PairAdapter
    folder: Path | None
    repo_id: str | None = None
    version: str | None = None
    metrics: dict | None = None
    path: PivotPath | None = None
    recommended: dict | None = None  # transfer settings measured for this version (recompute, select, repair_layers)

    def describe(self) -> str:
        if self.path is not None:
            return f"composed {self.path.describe()}"
        return f"{self.repo_id} {self.version}" if self.repo_id else str(self.folder)


def pair_end(side: Side) -> PairEnd:
    """What the registry matches a side on: id, revision, tokenizer fingerprint and KV layout."""
    return PairEnd(side.name, side.revision, tokenizer_fingerprint(side.tokenizer), side.spec.to_dict())


def resolve_adapter(
    sender: Side,
    receiver: Side,
    *,
    adapter: str | Path | None = None,
    version: str | None = None,
    registry: Registry | str | Path | None = None,
    min_recovered: float | None = None,
    pivot: str | None = None,
    local_files_only: bool = False,
    hub_dir=None,
    token: str | None = None,
) -> ResolvedAdapter:
    """The adapter for exactly this pair: ``adapter`` (a package folder) if given, else the registry's best fit.

    ``pivot`` ("auto" or a model id): when no direct adapter fits (or none meets ``min_recovered``), compose two
    registered affine adapters sender -> P -> receiver (:func:`resolve_path`). A direct adapter always wins.
    Raises ``NoAdapterError`` (what exists, how to train one) when nothing fits, ``PairMismatchError`` when a
    given package was fitted for other models, ``HeteroFoldError`` when a file fails its integrity check.
    """
    try:
        return _resolve_direct(sender, receiver, adapter=adapter, version=version, registry=registry,
                               min_recovered=min_recovered, local_files_only=local_files_only, hub_dir=hub_dir,
                               token=token)
    except NoAdapterError:
        if pivot is None or adapter is not None or version is not None:
            raise
    return resolve_path(sender, receiver, pivot=pivot, registry=registry, min_recovered=min_recovered,
                        local_files_only=local_files_only, hub_dir=hub_dir, token=token)


def _resolve_direct(sender: Side, receiver: Side, *, adapter, version, registry, min_recovered, local_files_only,
                    hub_dir, token) -> ResolvedAdapter:
    registry = open_registry(registry)
    if adapter is not None and Path(adapter).is_dir():
        loaded = load_adapter(adapter)
        check_pair(loaded, sender, receiver, source=adapter)
        check_parents(loaded, registry, source=adapter)
        return ResolvedAdapter(loaded, Path(adapter))
    if adapter is not None:  # a repo id: it must be registered and fit this pair like any other candidate
        entry, chosen = _pinned_repo(registry, str(adapter), version, sender, receiver, min_recovered)
    else:
        entry, chosen = registry.find(pair_end(sender), pair_end(receiver), version=version, min_recovered=min_recovered)
    folder = fetch(registry, entry, chosen, hub_dir=hub_dir, token=token, local_files_only=local_files_only)
    loaded = load_adapter(folder)
    check_pair(loaded, sender, receiver, source=f"{entry.repo_id} {chosen.version}")
    check_parents(loaded, registry, source=f"{entry.repo_id} {chosen.version}")
    return ResolvedAdapter(loaded, folder, entry.repo_id, chosen.version, dict(chosen.metrics),
                           recommended=chosen.recommended)


def check_parents(adapter: PairAdapter, registry: Registry, *, source) -> None:
    """A composed adapter's parents, where the registry lists them, are the very versions it records: the hash of
    each parent's weights equals the registry's hash of that version's ``adapter.safetensors``."""
    if adapter.config.method != "composed":
        return
    versions = {(e.repo_id, v.version): v for e in registry.entries() for v in e.versions}
    for parent in adapter.parents:
        registered = versions.get((parent.repo_id, parent.version))
        if registered is None:
            continue  # a local package, or a registry that does not list it: nothing to compare with
        if registered.files.get(WEIGHTS_NAME) != parent.weights_sha256:
            raise IntegrityError(
                f"Composed adapter {source} records parent {parent.repo_id} {parent.version} with weights "
                f"{parent.weights_sha256[:19]}..., but the registry {registry.path} records "
                f"{str(registered.files.get(WEIGHTS_NAME))[:19]}... for that version: the composed package or the "
                f"parent was altered. Compose it again: hf-fold compose --sender {adapter.config.sender} "
                f"--receiver {adapter.config.receiver} --pivot {adapter.pivot} --out DIR.")


def _pinned_repo(registry: Registry, repo_id: str, version, sender: Side, receiver: Side,
                 min_recovered) -> tuple[AdapterEntry, VersionEntry]:
    entry = next((e for e in registry.entries() if e.repo_id == repo_id), None)
    if entry is None:
        hint = unknown_repo_hint(repo_id, [e.repo_id for e in registry.entries()])
        raise HeteroFoldError(f"Adapter {repo_id!r} is neither a package folder nor in the registry "
                              f"{registry.path}; {hint}.")
    solo = Registry([entry], registry.path)
    return solo.find(pair_end(sender), pair_end(receiver), version=version, min_recovered=min_recovered)


def resolve_path(sender: Side, receiver: Side, *, pivot: str = "auto", registry: Registry | str | Path | None = None,
                 min_recovered: float | None = None, local_files_only: bool = False, hub_dir=None,
                 token: str | None = None) -> ResolvedAdapter:
    """Compose the best registered path sender -> P -> receiver (``pivot`` "auto" or P's id): both legs are fetched
    and checked like any adapter, then folded into one affine map per receiver layer. ``min_recovered`` applies to
    the path's estimate (the product of the legs' recovered, both measured on the registry's reference split)."""
    registry = open_registry(registry)
    affine = affine_methods()
    paths = registry.paths(pair_end(sender), pair_end(receiver), pivot=None if pivot == "auto" else pivot,
                           methods=affine)
    usable = [p for p in paths if min_recovered is None or (p.estimate is not None and p.estimate >= min_recovered)]
    if not usable:
        miss = registry.miss_message(pair_end(sender), pair_end(receiver), [])
        why = (f"paths {', '.join(p.describe() for p in paths)} estimate below min_recovered {min_recovered:g} "
               "(or have no estimate)"
               if paths else f"no registered path through {'any pivot' if pivot == 'auto' else pivot}")
        raise NoAdapterError(f"{miss}\nNo direct adapter and {why}.")
    path = usable[0]
    legs = []
    for entry, version in ((path.first, path.first_version), (path.second, path.second_version)):
        folder = fetch(registry, entry, version, hub_dir=hub_dir, token=token, local_files_only=local_files_only)
        legs.append(load_adapter(folder))
    composed = compose(*legs, first_ref={"repo_id": path.first.repo_id, "version": path.first_version.version},
                       second_ref={"repo_id": path.second.repo_id, "version": path.second_version.version})
    check_pair(composed, sender, receiver, source=f"the composition {path.describe()}")
    logger.warning("%s -> %s: composed %s", sender.name, receiver.name, path.describe())
    metrics = {"estimate": path.estimate, "legs": path.legs, "data": path.split}
    return ResolvedAdapter(composed, None, metrics=metrics, path=path)
