"""The adapter registry: ``registry.json`` lists every published pair adapter, so a (sender, receiver) pair
can be resolved to a repo and version without asking a hub.

An entry is one hub repo: the exact pair it was fitted for (model id, revision, tokenizer fingerprint and
KV spec of each side), the method, where it lives and its immutable versions with file hashes and metrics.
Loading is strict: a bad file raises ``RegistryError`` naming the file, the JSON path, what was found and
what was expected. Saving is deterministic, so ``load`` then ``save`` rewrites a file byte for byte.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub.base import HubError, next_patch, validate_repo_id, validate_version, version_key
from heterofold_hub.io import write_json_atomic

SCHEMA_VERSION = 1
READABLE_SCHEMAS = (1,)
PREFERRED_METHOD = "heterofold"
HUB_NAMES = ("embedded", "local", "hf")  # or an http(s):// endpoint URL
SPEC_FIELDS = {"model_type": str, "num_layers": int, "kv_heads": int, "head_dim": int, "rope": str,
               "max_positions": int}  # KVSpec.to_dict(), in field order
OPTIONAL_SPEC_FIELDS = {"layer_types": list, "sliding_window": int}  # models that mix sliding and full layers
METRIC_FIELDS = {"recovered": float, "kl": float, "top1": float, "nll": float, "benefit": float,
                 "context_tokens": int}  # only "recovered" is required: min_recovered filters on it
MAX_PATH_LINES = 8  # a miss message lists at most this many pivot paths
_FINGERPRINT_RE = re.compile(r"sha256:[0-9a-f]{64}")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class RegistryError(HeteroFoldError):
    """A registry file (or a registry change) that breaks the schema or the immutability of versions."""


class NoAdapterError(HeteroFoldError):
    """No registered adapter fits the requested pair; the message says what exists and how to train one."""


@dataclass(frozen=True)
class PairEnd:
    """One side of a pair. ``tokenizer`` (``sha256:...``) and ``spec`` (a KVSpec dict) may be None on the
    caller's side when not known yet; registry entries always have both."""

    id: str | None
    revision: str | None = None
    tokenizer: str | None = None
    spec: dict | None = None

    def __post_init__(self):
        if self.spec is not None and hasattr(self.spec, "to_dict"):  # accept a KVSpec directly
            object.__setattr__(self, "spec", self.spec.to_dict())

    def to_dict(self) -> dict:
        spec = None if self.spec is None else _ordered(self.spec, [*SPEC_FIELDS, *OPTIONAL_SPEC_FIELDS])
        return {"id": self.id, "revision": self.revision, "tokenizer": self.tokenizer, "spec": spec}


@dataclass
class VersionEntry:
    version: str
    commit: str
    files: dict[str, str]  # file name -> sha256 fingerprint
    metrics: dict[str, float]

    def to_dict(self) -> dict:
        return {"version": self.version, "commit": self.commit, "files": dict(sorted(self.files.items())),
                "metrics": _ordered(self.metrics, METRIC_FIELDS)}


@dataclass
class AdapterEntry:
    repo_id: str
    hub: str
    method: str
    sender: PairEnd
    receiver: PairEnd
    summary: str = ""
    versions: list[VersionEntry] = field(default_factory=list)  # oldest first

    def to_dict(self) -> dict:
        versions = sorted(self.versions, key=lambda v: version_key(v.version))
        return {"repo_id": self.repo_id, "hub": self.hub, "method": self.method, "sender": self.sender.to_dict(),
                "receiver": self.receiver.to_dict(), "summary": self.summary,
                "versions": [v.to_dict() for v in versions]}


@dataclass(frozen=True)
class PivotPath:
    """sender -> pivot -> receiver through two registered adapters (their newest versions). ``estimate`` is the
    product of the two recorded ``recovered``: a prior that ranks paths, not a measurement of the composition."""

    first: AdapterEntry
    first_version: VersionEntry
    second: AdapterEntry
    second_version: VersionEntry

    @property
    def pivot(self) -> str:
        return self.first.receiver.id

    @property
    def estimate(self) -> float:
        return self.first_version.metrics["recovered"] * self.second_version.metrics["recovered"]

    def describe(self) -> str:
        legs = [(e, v) for e, v in ((self.first, self.first_version), (self.second, self.second_version))]
        return (f"via {self.pivot}: " + " then ".join(f"{e.repo_id} {v.version} (recovered {v.metrics['recovered']:.3f})"
                                                     for e, v in legs) + f", estimate {self.estimate:.3f}")


class _Checker:
    """Turns parsed JSON into dataclasses; every failure names the source, the JSON path, found and expected."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, found: str, expected: str):
        raise RegistryError(f"{self.source}: {where or '(top level)'}: found {found}; expected {expected}.")

    def keys(self, obj, where: str, required: tuple, optional: tuple = ()) -> None:
        if not isinstance(obj, dict):
            self.fail(where, f"{type(obj).__name__} {_short(obj)}", "a JSON object")
        missing = [k for k in required if k not in obj]
        extra = sorted(set(obj) - set(required) - set(optional))
        if missing:
            self.fail(where, f"no key(s) {', '.join(missing)}", f"keys {', '.join(required + optional)}")
        if extra:
            self.fail(_join(where, extra[0]), "an unknown key", f"only keys {', '.join(required + optional)}")

    def value(self, obj, where: str, kind, *, nullable: bool = False):
        if obj is None and nullable:
            return None
        ok = isinstance(obj, kind) and not isinstance(obj, bool)
        if kind is float:  # JSON has one number type: 1 is as good as 1.0
            ok = isinstance(obj, (int, float)) and not isinstance(obj, bool)
        if not ok:
            name = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}[kind]
            self.fail(where, f"{type(obj).__name__} {_short(obj)}", name + (" or null" if nullable else ""))
        return obj

    def pattern(self, obj, where: str, regex: re.Pattern, expected: str) -> str:
        if not isinstance(obj, str) or not regex.fullmatch(obj):
            self.fail(where, _short(obj), expected)
        return obj

    def hub_rule(self, obj, where: str, validator) -> str:
        try:
            return validator(obj)
        except HubError as e:  # the hub's message already says what was found and what is expected
            raise RegistryError(f"{self.source}: {where}: {e}") from None

    def registry(self, data) -> list[AdapterEntry]:
        self.keys(data, "", ("schema_version", "adapters"))
        if data["schema_version"] not in READABLE_SCHEMAS:
            self.fail("schema_version", _short(data["schema_version"]),
                      f"one of {list(READABLE_SCHEMAS)} (the registry schemas this heterofold-hub reads); "
                      "this file is newer: upgrade heterofold-hub (pip install -U heterofold-hub)")
        entries, seen = [], {}
        for i, raw in enumerate(self.value(data["adapters"], "adapters", list)):
            entry = self.entry(raw, f"adapters[{i}]")
            if entry.repo_id in seen:
                self.fail(f"adapters[{i}].repo_id", f"{entry.repo_id!r} again (first at adapters[{seen[entry.repo_id]}])",
                          "each repo_id once; merge the versions into one entry")
            seen[entry.repo_id] = i
            entries.append(entry)
        return entries

    def entry(self, raw, where: str) -> AdapterEntry:
        self.keys(raw, where, ("repo_id", "hub", "method", "sender", "receiver", "summary", "versions"))
        hub = self.value(raw["hub"], _join(where, "hub"), str)
        if hub not in HUB_NAMES and not hub.startswith(("http://", "https://")):
            self.fail(_join(where, "hub"), _short(hub), f"one of {', '.join(HUB_NAMES)} or an http(s):// URL")
        method = self.value(raw["method"], _join(where, "method"), str)
        if not method:
            self.fail(_join(where, "method"), "an empty string", "a method name such as 'heterofold'")
        entry = AdapterEntry(
            repo_id=self.hub_rule(raw["repo_id"], _join(where, "repo_id"), validate_repo_id), hub=hub, method=method,
            sender=self.end(raw["sender"], _join(where, "sender")),
            receiver=self.end(raw["receiver"], _join(where, "receiver")),
            summary=self.value(raw["summary"], _join(where, "summary"), str))
        for j, v in enumerate(self.value(raw["versions"], _join(where, "versions"), list)):
            version = self.version(v, _join(where, f"versions[{j}]"))
            if any(old.version == version.version for old in entry.versions):
                self.fail(_join(where, f"versions[{j}].version"), f"{version.version} twice",
                          "each version once (published versions are immutable)")
            entry.versions.append(version)
        entry.versions.sort(key=lambda v: version_key(v.version))
        return entry

    def end(self, raw, where: str) -> PairEnd:
        self.keys(raw, where, ("id", "revision", "tokenizer", "spec"))
        spec = raw["spec"]
        self.keys(spec, _join(where, "spec"), tuple(SPEC_FIELDS), tuple(OPTIONAL_SPEC_FIELDS))
        for name, kind in {**SPEC_FIELDS, **OPTIONAL_SPEC_FIELDS}.items():
            if name in spec:
                self.value(spec[name], f"{where}.spec.{name}", kind)
        return PairEnd(id=self.hub_rule(raw["id"], _join(where, "id"), validate_repo_id),
                       revision=self.value(raw["revision"], _join(where, "revision"), str, nullable=True),
                       tokenizer=self.pattern(raw["tokenizer"], _join(where, "tokenizer"), _FINGERPRINT_RE,
                                              "'sha256:' followed by 64 lowercase hex digits"),
                       spec=dict(spec))

    def version(self, raw, where: str) -> VersionEntry:
        self.keys(raw, where, ("version", "commit", "files", "metrics"))
        files = self.value(raw["files"], _join(where, "files"), dict)
        for name, digest in files.items():
            if not name or "/" in name or "\\" in name or name.startswith("."):
                self.fail(f"{where}.files", f"file name {name!r}", "plain file names (adapter folders are flat)")
            self.pattern(digest, f"{where}.files[{name!r}]", _FINGERPRINT_RE, "'sha256:' + 64 lowercase hex digits")
        metrics = raw["metrics"]
        self.keys(metrics, _join(where, "metrics"), ("recovered",), tuple(k for k in METRIC_FIELDS if k != "recovered"))
        for name, value in metrics.items():
            self.value(value, f"{where}.metrics.{name}", METRIC_FIELDS[name])
        return VersionEntry(version=self.hub_rule(raw["version"], _join(where, "version"), validate_version),
                            commit=self.pattern(raw["commit"], _join(where, "commit"), _COMMIT_RE,
                                                "a 40-hex-digit git commit"),
                            files=dict(files), metrics=dict(metrics))


def _ordered(values: dict, known) -> dict:
    """Known keys in schema order, then any others sorted: a stable layout for deterministic files."""
    return {**{k: values[k] for k in known if k in values}, **{k: values[k] for k in sorted(values) if k not in known}}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


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
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise RegistryError(f"{path}: cannot read the registry: {e.strerror or e}.") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise RegistryError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}.") from None
        return cls(_Checker(str(path)).registry(data), path)

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
        new = _Checker(f"add_version({repo_id!r}, {version!r})").entry(raw, "")  # same rules as a loaded file
        old = next((e for e in self.adapters if e.repo_id == new.repo_id), None)
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

    def find(self, sender: PairEnd, receiver: PairEnd, *, version: str | None = None, method: str | None = None,
             min_recovered: float | None = None) -> tuple[AdapterEntry, VersionEntry]:
        """The adapter version for exactly this pair.

        Rule: among entries fitting both sides (same id, or for an id the registry does not know, same tokenizer
        fingerprint and KV spec), and ``method`` if given, keep versions with ``recovered >= min_recovered``
        (``version`` pins one); prefer method "heterofold" when ``method`` is None and it has a candidate, then
        the highest version (version_key), then the higher ``recovered``, then the first repo_id.
        """
        if version is not None:
            validate_version(version)
        fits, notes = self._fitting(sender, receiver, method)
        candidates = [(e, v) for e in fits for v in e.versions if version is None or v.version == version]
        if version is not None and fits and not candidates:
            known = "; ".join(f"{e.repo_id}: {', '.join(v.version for v in e.versions) or 'none'}" for e in fits)
            raise NoAdapterError(f"Version {version} is not registered for {sender.id} -> "
                                 f"{receiver.id}; registered versions: {known}.")
        if min_recovered is not None:
            notes += [f"{e.repo_id} {v.version} skipped: recovered {v.metrics['recovered']:.3g} < min_recovered "
                      f"{min_recovered:g}" for e, v in candidates if v.metrics["recovered"] < min_recovered]
            candidates = [(e, v) for e, v in candidates if v.metrics["recovered"] >= min_recovered]
        if not candidates:
            raise NoAdapterError(self.miss_message(sender, receiver, notes))
        preferred = [(e, v) for e, v in candidates if e.method == PREFERRED_METHOD]
        pool = preferred if method is None and preferred else candidates
        return max(pool, key=lambda ev: (version_key(ev[1].version), ev[1].metrics["recovered"]))

    def paths(self, sender: PairEnd, receiver: PairEnd, *, pivot: str | None = None,
              methods: set[str] | None = None) -> list[PivotPath]:
        """Every sender -> P -> receiver path through two registered adapters (of ``methods``, when given) that
        meet at exactly the same P (id, revision, tokenizer, KV spec); ``pivot`` pins P. Best estimate first."""
        firsts, seconds = self._legs(sender, receiver, methods)
        found = [PivotPath(e1, _newest(e1), e2, _newest(e2)) for e1 in firsts for e2 in seconds
                 if e1.receiver == e2.sender and (pivot is None or e1.receiver.id == pivot) and e1.versions and e2.versions]
        return sorted(found, key=lambda p: (-p.estimate, p.first.repo_id, p.second.repo_id))

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


def _newest(entry: AdapterEntry) -> VersionEntry | None:
    """The version ``find`` would pick from this entry alone: the highest, then the higher recovered."""
    return max(entry.versions, key=lambda v: (version_key(v.version), v.metrics["recovered"]), default=None)


def default_registry_path() -> Path:
    """``$HF_FOLD_REGISTRY``, else ``registry.json`` at the repository root."""
    return Path(os.environ.get("HF_FOLD_REGISTRY") or Path(__file__).resolve().parents[2] / "registry.json")


def open_registry(registry: Registry | str | os.PathLike | None = None, *, must_exist: bool = False) -> Registry:
    """``registry`` as a Registry: itself, the file at a path (empty, but saving there, if it does not exist
    yet), or with None the default one (``$HF_FOLD_REGISTRY``, else ``registry.json`` at the repository root).
    ``must_exist``: a path given explicitly must be a file (for reading; a typo must not look like an empty
    registry)."""
    if isinstance(registry, Registry):
        return registry
    path = Path(registry) if registry is not None else default_registry_path()
    if must_exist and registry is not None and not path.is_file():
        raise RegistryError(f"{path}: no such registry file. Pass an existing registry.json, or leave out --registry "
                            "for the project's own.")
    return Registry.load(path) if path.exists() else Registry.empty(path)


def load_default_registry() -> Registry:
    """The registry at $HF_FOLD_REGISTRY, else ``registry.json`` at the repository root; empty if absent."""
    return open_registry(None)
