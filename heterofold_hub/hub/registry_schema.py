"""The ``registry.json`` schema: its entries as dataclasses, and the strict parser that turns parsed JSON into them.

Every failure raises :class:`RegistryError` naming the source, the JSON path, what was found and what was
expected; ``to_dict`` writes keys in schema order, so a loaded file saves back byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub.base import HubError, validate_repo_id, validate_version, version_key

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


class EntryParser:
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
