"""The adapter registry: ``registry.json`` lists every published pair adapter, so a (sender, receiver) pair
can be resolved to a repo and version without asking a hub.

An entry is one hub repo: the exact pair it was fitted for (model id, revision, tokenizer fingerprint and
KV spec of each side), the method, where it lives and its immutable versions with file hashes and metrics
(the dataclasses and their parser: :mod:`heterofold_hub.hub.registry_schema`). Loading is strict: a bad file
raises ``RegistryError`` naming the file, the JSON path, what was found and what was expected. Saving is
deterministic, so ``load`` then ``save`` rewrites a file byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub.base import is_prerelease, next_patch, validate_version, version_key
from heterofold_hub.hub.registry_schema import (  # PairEnd and RegistryError: also imported from here by callers
    PREFERRED_METHOD, REFERENCE_SPLIT, SCHEMA_VERSION, AdapterEntry, EntryParser, PairEnd, RegistryError, VersionEntry,
    load_json,
)
from heterofold_hub.io import write_json_atomic
from heterofold_hub.paths import default_root, is_installed_copy, shipped_file

# A path's second leg was fitted on the pivot's own K/V, so the first leg must reproduce them. A least-squares leg
# does; one calibrated on the pivot's logits need not, and does not (docs/results/pivot.md, "A first leg that reproduces
# the pivot"). Least-squares first legs rank first.
PIVOT_FAITHFUL_METHODS = frozenset({"kv-ridge"})
MAX_PATH_LINES = 8  # a miss message lists at most this many pivot paths


class NoAdapterError(HeteroFoldError):
    """No registered adapter fits the requested pair; the message says what exists and how to train one."""


@dataclass(frozen=True)
class PivotPath:
    """sender -> pivot -> receiver through two registered adapters (their newest versions). ``estimate`` is the
    product of the two legs' ``recovered`` on ``split`` (None when a leg was not measured there): a prior that
    ranks paths, not a measurement of the composition. Paths whose first leg is least-squares
    (:data:`PIVOT_FAITHFUL_METHODS`) rank before all others."""

    first: AdapterEntry
    first_version: VersionEntry
    second: AdapterEntry
    second_version: VersionEntry
    split: str = REFERENCE_SPLIT

    @property
    def pivot(self) -> str:
        return self.first.receiver.id

    @property
    def legs(self) -> list[float | None]:
        return [recovered_on(self.first_version, self.split), recovered_on(self.second_version, self.split)]

    @property
    def estimate(self) -> float | None:
        first, second = self.legs
        return None if first is None or second is None else first * second

    @property
    def faithful_first(self) -> bool:
        """Is the first leg fitted to the pivot's own K/V (least squares), which the second leg reads?"""
        return self.first.method in PIVOT_FAITHFUL_METHODS

    def rank(self) -> tuple:
        """Sort key: least-squares first legs first, then the higher estimate."""
        return (not self.faithful_first, -(self.estimate if self.estimate is not None else -1.0), self.first.repo_id,
                self.second.repo_id)

    def describe(self) -> str:
        legs = [(e, v) for e, v in ((self.first, self.first_version), (self.second, self.second_version))]
        first_fit = "" if self.faithful_first else (
            f" (its first leg is {self.first.method}, not a least-squares fit of the pivot's K/V: expect less)")
        estimate = "no estimate" if self.estimate is None else f"estimate {self.estimate:.3f}"
        return (f"via {self.pivot}: " + " then ".join(f"{e.repo_id} {v.version} ({_recovered_words(v, self.split)})"
                                                     for e, v in legs) + f", {estimate} on {self.split}" + first_fit)


def recovered_on(version: VersionEntry, split: str) -> float | None:
    """``version``'s recovered measured on ``split``, or None: figures measured on other text do not compare."""
    measured = version.fidelity(split)
    return None if measured is None else measured.recovered


def _recovered_words(version: VersionEntry, split: str) -> str:
    value = recovered_on(version, split)
    return f"recovered {value:.3f}" if value is not None else f"recovered not measured on {split}"



def _fp(fingerprint: str | None) -> str:
    return "unknown" if fingerprint is None else fingerprint[:len("sha256:") + 12] + "..."


def _side_fit(role: str, repo_id: str, registered: PairEnd, caller: PairEnd, known_ids: set) -> tuple[bool, str | None]:
    """Does ``registered`` fit the caller's side? Returns (fits, why-not note worth reporting or None)."""
    if caller.id == registered.id:
        if None not in (caller.revision, registered.revision) and caller.revision != registered.revision:
            return False, (f"registry adapter {repo_id} was fitted for {role} revision {registered.revision}, "
                           f"the loaded {role} is revision {caller.revision}")
        if caller.tokenizer is not None and caller.tokenizer != registered.tokenizer:
            return False, (f"registry adapter {repo_id} was fitted for {role} tokenizer {_fp(registered.tokenizer)}, "
                           f"the loaded {role} has {_fp(caller.tokenizer)} (a different revision or model)")
        if caller.spec is not None and caller.spec != registered.spec:
            return False, (f"registry adapter {repo_id} was fitted for {role} KV spec {registered.spec}, "
                           f"the loaded {role} has {caller.spec}")
        return True, None
    # Content match only for ids the registry does not know (a local folder, a mirror): a known id with other
    # content is a different model, and must not be rescued by another entry that happens to look alike.
    if caller.id in known_ids or caller.tokenizer is None or caller.spec is None:
        return False, None
    return (caller.tokenizer == registered.tokenizer and caller.spec == registered.spec), None


class Registry:
    """The adapters of one ``registry.json``; ``path`` is where ``save()`` writes by default."""

    def __init__(self, adapters: list[AdapterEntry] | None = None, path: str | os.PathLike | None = None):
        self.adapters = list(adapters or [])
        self.path = None if path is None else Path(path)

    @classmethod
    def empty(cls, path: str | os.PathLike | None = None) -> "Registry":
        return cls([], path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Registry":
        """Read and strictly validate ``path``; RegistryError names the file, the field and the fix."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise RegistryError(f"{path}: no such registry file; expected the path of an existing registry.json: "
                                "check it for a typo.", "missing-file") from None
        except OSError as e:
            raise RegistryError(f"{path}: cannot read the registry: {e.strerror or e}.", "unreadable") from None
        return cls(EntryParser(str(path)).registry(load_json(raw, str(path))), path)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "adapters": [e.to_dict() for e in self.entries()]}

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write atomically and deterministically (entries by repo_id, versions oldest first)."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise RegistryError("Registry.save(): this registry has no path; pass save(path).")
        write_json_atomic(target, self.to_dict())
        return target

    def entries(self) -> list[AdapterEntry]:
        return sorted(self.adapters, key=lambda e: e.repo_id)

    def pairs_for(self, receiver_id: str | None = None, sender_id: str | None = None) -> list[AdapterEntry]:
        """Entries for this receiver and/or sender id (None matches any), sorted by repo_id."""
        return [e for e in self.entries() if receiver_id in (None, e.receiver.id) and sender_id in (None, e.sender.id)]

    def add_version(self, *, repo_id: str, hub: str, method: str, sender: PairEnd, receiver: PairEnd, version: str,
                    commit: str, files: dict, metrics: dict, summary: str = "") -> AdapterEntry:
        """Register a newly published version, creating the entry if needed; existing versions are immutable."""
        raw = {"repo_id": repo_id, "hub": hub, "method": method, "sender": sender.to_dict(),
               "receiver": receiver.to_dict(), "summary": summary,
               "versions": [{"version": version, "commit": commit, "files": files, "metrics": metrics}]}
        new = EntryParser(f"add_version({repo_id!r}, {version!r})").entry(raw, "")  # same rules as a loaded file
        old = next((e for e in self.adapters if e.repo_id.lower() == new.repo_id.lower()), None)
        if old is not None and old.repo_id != new.repo_id:  # load would refuse the saved file: refuse it now
            raise RegistryError(f"{repo_id} differs only in case from the registered {old.repo_id}, and hubs treat "
                                f"both as one repo: publish as {old.repo_id}, or choose another name.",
                                "duplicate-repo")
        if old is None:
            self.adapters.append(new)
            return new
        for name in ("hub", "method", "sender", "receiver"):
            if getattr(old, name) != getattr(new, name):
                raise RegistryError(f"{repo_id} is registered with {name} {getattr(old, name)}, not "
                                    f"{getattr(new, name)}: one repo holds one pair and method; use another repo id.")
        existing = [v.version for v in old.versions]
        if version in existing:
            latest = max(existing, key=version_key)
            raise RegistryError(f"Version {version} of {repo_id} is already registered, and published versions are "
                                f"immutable: bump the version (e.g. {next_patch(latest)}) and publish again.")
        old.versions = sorted(old.versions + new.versions, key=lambda v: version_key(v.version))
        old.summary = summary or old.summary  # the newest model card describes the repo
        return old

    def add_evaluation(self, *, repo_id: str, version: str, evaluation: dict) -> VersionEntry:
        """Record a measurement of a published version after the fact; its files, metrics and earlier evaluations
        stay as they were (an evaluation is appended, never rewritten)."""
        entry = next((e for e in self.adapters if e.repo_id == repo_id), None)
        published = None if entry is None else next((v for v in entry.versions if v.version == version), None)
        if published is None:
            known = ", ".join(f"{e.repo_id}@{v.version}" for e in self.adapters for v in e.versions) or "none"
            raise RegistryError(f"{repo_id}@{version} is not registered (registered: {known}); publish it first.",
                                "unknown-version")
        parsed = EntryParser(f"add_evaluation({repo_id!r}, {version!r})").evaluation(
            evaluation, "evaluation", receiver_layers=entry.receiver.spec["num_layers"])
        published.evaluations.append(parsed)
        return published

    def find(self, sender: PairEnd, receiver: PairEnd, *, version: str | None = None, method: str | None = None,
             min_recovered: float | None = None, split: str = REFERENCE_SPLIT) -> tuple[AdapterEntry, VersionEntry]:
        """The adapter version for exactly this pair.

        Rule: among entries fitting both sides (same id, or for an id the registry does not know, same tokenizer
        fingerprint and KV spec), and ``method`` if given, keep versions whose ``recovered`` measured on ``split``
        is at least ``min_recovered`` (a version never measured on ``split`` does not pass: figures on other text
        do not compare); ``version`` pins one. Prefer method "heterofold" when ``method`` is None and it has a
        candidate, then the highest version (version_key), then the higher ``recovered`` on ``split``. A pre-release
        (``v1.4.0-rc.1``) is a candidate only when ``version`` pins it.
        """
        if version is not None:
            validate_version(version)
        fits, notes = self._fitting(sender, receiver, method)
        candidates = [(e, v) for e in fits for v in e.versions
                      if v.version == version or (version is None and not is_prerelease(v.version))]
        if version is None:
            notes += [_prerelease_only(e) for e in fits if e.versions and newest_release_of(e, split) is None]
        if version is not None and fits and not candidates:
            known = "; ".join(f"{e.repo_id}: {', '.join(v.version for v in e.versions) or 'none'}" for e in fits)
            raise NoAdapterError(f"Version {version} is not registered for {sender.id} -> "
                                 f"{receiver.id}; registered versions: {known}.")
        if min_recovered is not None:
            notes += [_below(e, v, split, min_recovered) for e, v in candidates if not _meets(v, split, min_recovered)]
            candidates = [(e, v) for e, v in candidates if _meets(v, split, min_recovered)]
        if not candidates:
            raise NoAdapterError(self.miss_message(sender, receiver, notes))
        preferred = [(e, v) for e, v in candidates if e.method == PREFERRED_METHOD]
        pool = preferred if method is None and preferred else candidates
        return max(pool, key=lambda ev: _version_rank(ev[1], split))

    def paths(self, sender: PairEnd, receiver: PairEnd, *, pivot: str | None = None,
              methods: set[str] | None = None, split: str = REFERENCE_SPLIT) -> list[PivotPath]:
        """Every sender -> P -> receiver path through two registered adapters (of ``methods``, when given) that
        meet at exactly the same P (id, revision, tokenizer, KV spec); ``pivot`` pins P. Least-squares first legs
        first, then best estimate."""
        firsts, seconds = self._legs(sender, receiver, methods)
        newest = {id(e): newest_release_of(e, split) for e in firsts + seconds}
        found = [PivotPath(e1, newest[id(e1)], e2, newest[id(e2)], split) for e1 in firsts for e2 in seconds
                 if e1.receiver == e2.sender and (pivot is None or e1.receiver.id == pivot)
                 and newest[id(e1)] is not None and newest[id(e2)] is not None]
        return sorted(found, key=PivotPath.rank)

    def _legs(self, sender: PairEnd, receiver: PairEnd, methods: set[str] | None) -> tuple[list, list]:
        """Entries from this sender into another model, and entries from another model into this receiver."""
        senders = {e.sender.id for e in self.adapters}
        receivers = {e.receiver.id for e in self.adapters}
        usable = [e for e in self.entries() if methods is None or e.method in methods]
        firsts = [e for e in usable if e.receiver.id not in (receiver.id, sender.id)
                  and _side_fit("sender", e.repo_id, e.sender, sender, senders)[0]]
        seconds = [e for e in usable if e.sender.id not in (receiver.id, sender.id)
                   and _side_fit("receiver", e.repo_id, e.receiver, receiver, receivers)[0]]
        return firsts, seconds

    def _fitting(self, sender: PairEnd, receiver: PairEnd, method: str | None) -> tuple[list, list[str]]:
        senders = {e.sender.id for e in self.adapters}
        receivers = {e.receiver.id for e in self.adapters}
        fits, notes = [], []
        for entry in self.entries():
            if method is not None and entry.method != method:
                continue
            s_ok, s_note = _side_fit("sender", entry.repo_id, entry.sender, sender, senders)
            r_ok, r_note = _side_fit("receiver", entry.repo_id, entry.receiver, receiver, receivers)
            if s_ok and r_ok:
                fits.append(entry)
            notes += [n for n in (s_note, r_note) if n]
        return fits, notes

    def miss_message(self, sender: PairEnd, receiver: PairEnd, notes: list[str]) -> str:
        """Why nothing fits, what exists for either model, and how to train the missing pair."""
        for_receiver = sorted({e.sender.id for e in self.adapters if e.receiver.id == receiver.id})
        for_sender = sorted({e.receiver.id for e in self.adapters if e.sender.id == sender.id})
        where = f" ({self.path})" if self.path else ""
        lines = [f"No registered adapter{where} fits sender {sender.id} -> receiver {receiver.id}."]
        lines += [f"- {n}." for n in notes]
        lines.append(f"Adapters into receiver {receiver.id} exist from sender(s): {', '.join(for_receiver) or 'none'}.")
        lines.append(f"Adapters from sender {sender.id} exist into receiver(s): {', '.join(for_sender) or 'none'}.")
        lines += self._near_paths(sender, receiver)
        lines.append(f"Train one: hf-fold train --sender {sender.id} --receiver {receiver.id} --out <dir>, "
                     "then publish it with hf-fold push.")
        return "\n".join(lines)

    def _near_paths(self, sender: PairEnd, receiver: PairEnd) -> list[str]:
        """Paths through a pivot that exist (compose them) or lack one leg (train it)."""
        firsts, seconds = self._legs(sender, receiver, None)
        complete = self.paths(sender, receiver)
        lines = [f"- a path exists {p.describe()}: compose it with pivot='auto' (CLI: --pivot auto)" for p in complete]
        has_second = {e.sender.id for e in seconds}
        has_first = {e.receiver.id for e in firsts}
        lines += [f"- almost a path via {e.receiver.id}: {e.repo_id} exists, {e.receiver.id} -> {receiver.id} is missing "
                  f"(hf-fold train --sender {e.receiver.id} --receiver {receiver.id})"
                  for e in firsts if e.receiver.id not in has_second]
        lines += [f"- almost a path via {e.sender.id}: {e.repo_id} exists, {sender.id} -> {e.sender.id} is missing "
                  f"(hf-fold train --sender {sender.id} --receiver {e.sender.id})"
                  for e in seconds if e.sender.id not in has_first]
        return (["Paths through a pivot model:"] + lines[:MAX_PATH_LINES]) if lines else []


def newest_release_of(entry: AdapterEntry, split: str = REFERENCE_SPLIT) -> VersionEntry | None:
    """The version ``find`` would pick from this entry alone: the highest release, then the higher recovered on
    ``split``."""
    releases = [v for v in entry.versions if not is_prerelease(v.version)]
    return max(releases, key=lambda v: _version_rank(v, split), default=None)


def _prerelease_only(entry: AdapterEntry) -> str:
    """Why ``entry`` fits the pair and still resolves nothing by default."""
    pinned = entry.versions[-1].version
    return (f"{entry.repo_id} has only pre-release versions ({', '.join(v.version for v in entry.versions)}), used "
            f"only when pinned: version={pinned!r} (CLI: hf-fold pull {entry.repo_id}@{pinned})")


def _version_rank(version: VersionEntry, split: str) -> tuple:
    recovered = recovered_on(version, split)
    return version_key(version.version), -1.0 if recovered is None else recovered


def _meets(version: VersionEntry, split: str, min_recovered: float) -> bool:
    recovered = recovered_on(version, split)
    return recovered is not None and recovered >= min_recovered


def _below(entry: AdapterEntry, version: VersionEntry, split: str, min_recovered: float) -> str:
    recovered = recovered_on(version, split)
    if recovered is not None:
        return (f"{entry.repo_id} {version.version} skipped: recovered {recovered:.3g} on {split} < min_recovered "
                f"{min_recovered:g}")
    return (f"{entry.repo_id} {version.version} skipped: no recovered measured on {split} (its published "
            f"{version.metrics['recovered']:.3g} was measured on {version.measured_on()}, and figures on other text "
            f"do not compare); evaluate it there: python benchmarks/evaluate_registry.py")


REGISTRY_ENV = "HF_FOLD_REGISTRY"
# The project's own registry (the checkout's registry.json, or the wheel's copy: paths.shipped_file); this one alone
# may be absent (an empty registry).
PROJECT_REGISTRY = shipped_file("registry.json")


def default_registry_path() -> Path:
    """``$HF_FOLD_REGISTRY``, else the project's registry.json (the repository root's, or the installed copy)."""
    return Path(os.environ.get(REGISTRY_ENV) or PROJECT_REGISTRY)


def installed_registry_problem(path: Path) -> str | None:
    """Why ``path`` must not be written, if it is the registry installed with the wheel (site-packages: a reinstall
    replaces it, and it may not be writable); None for any other file."""
    if not is_installed_copy(path):
        return None
    user_registry = default_root() / "registry.json"
    return (f"{path} is the registry installed with heterofold-hub, which is read-only: publish into your own "
            f"registry with --registry PATH or {REGISTRY_ENV}=PATH (for example {user_registry}; a new file is "
            "created), and read it back with the same option.")


def open_registry(registry: Registry | str | os.PathLike | None = None, *, must_exist: bool = True) -> Registry:
    """``registry`` as a Registry: itself, the file at a path, or with None the default one (``$HF_FOLD_REGISTRY``,
    else the project's registry.json: :data:`PROJECT_REGISTRY`).

    ``must_exist`` (reading, the default): a path given here or in ``$HF_FOLD_REGISTRY`` must exist, so a typo
    never looks like an empty registry; only the project's own registry.json may be absent (an empty registry).
    ``must_exist=False`` (publishing): a path that does not exist yet is a new, empty registry saved there; the
    registry installed with the wheel is refused (RegistryError, reason "read-only"), naming the option to use."""
    if isinstance(registry, Registry):
        path = registry.path
    else:
        path = Path(registry) if registry is not None else default_registry_path()
    if not must_exist and path is not None and (problem := installed_registry_problem(path)):
        raise RegistryError(problem, "read-only")  # before anything is published, not at save()
    if isinstance(registry, Registry):
        return registry
    if path.exists():
        return Registry.load(path)
    if must_exist and registry is not None:
        raise RegistryError(f"{path}: no such registry file; expected the path of an existing registry.json: check it "
                            f"for a typo, or give none to use the default ({default_registry_path()}).",
                            "missing-file")
    if must_exist and path != PROJECT_REGISTRY:
        raise RegistryError(f"{REGISTRY_ENV}={path}: no such registry file; expected the path of an existing "
                            f"registry.json: point {REGISTRY_ENV} to one, or unset it for the project's own "
                            f"({PROJECT_REGISTRY}).", "missing-file")
    return Registry.empty(path)


def load_default_registry() -> Registry:
    """The registry at $HF_FOLD_REGISTRY (which must exist), else the project's registry.json (empty if absent)."""
    return open_registry(None)
