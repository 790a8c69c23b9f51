"""The ``registry.json`` schema: its entries as dataclasses, and the strict parser that turns parsed JSON into them.

Every failure raises :class:`RegistryError` naming the source, the JSON path, what was found and what was
expected; ``to_dict`` writes keys in schema order, so a loaded file saves back byte for byte. What ``json.loads``
takes on trust is refused too: bytes that are not UTF-8, a key given twice in one object (json keeps the last),
NaN and infinities (json reads ``NaN`` and ``Infinity``, and ``1e999`` as inf).
"""

from __future__ import annotations

import json
import math
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
                 "context_tokens": int, "data": str, "windows": int}  # only "recovered" is required
# Figures compare only when measured on the same text: the resolver's min_recovered and ranking read each version's
# recovered on this split (third-party code and prose that no shipped adapter was fitted on) unless told another.
REFERENCE_SPLIT = "bundled:unseen"
FIDELITY_FIGURES = ("recovered", "kl", "top1", "nll", "benefit")
UNRECORDED_SPLIT = "a split the registry does not record"
MAX_PATH_LINES = 8  # a miss message lists at most this many pivot paths
_FINGERPRINT_RE = re.compile(r"sha256:[0-9a-f]{64}")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class RegistryError(HeteroFoldError):
    """A registry file (or a registry change) that breaks the schema or the immutability of versions.
    ``reason`` is a short tag for what was wrong ("not-utf8", "duplicate-key", "type", ...), for callers and tests
    that count refusals without parsing messages."""

    def __init__(self, message: str, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


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
class Evaluation:
    """A measurement of a published version made after it was published (its files and metrics stay as they were):
    what was measured (``task``), on which text (``data``, and how much of it: ``windows`` of ``context_tokens``),
    when and by which code (``date``, ``commit``, ``command``), the figures (``results``: names to finite numbers)
    and, for a recompute trade-off, the ``recommended`` transfer settings (``recompute``, ``select``,
    ``repair_layers``, and ``mapped_key_scale`` where it is not 1) users get by default."""

    task: str
    data: str
    date: str
    commit: str
    command: str
    results: dict[str, float]
    recommended: dict | None = None
    windows: int | None = None
    context_tokens: int | None = None

    def to_dict(self) -> dict:
        out = {"task": self.task, "data": self.data}
        out.update({k: v for k, v in (("windows", self.windows), ("context_tokens", self.context_tokens)) if v is not None})
        out.update({"date": self.date, "commit": self.commit, "command": self.command, "results": dict(self.results)})
        if self.recommended is not None:
            out["recommended"] = _ordered(self.recommended, [*RECOMMENDED_FIELDS, *OPTIONAL_RECOMMENDED_FIELDS])
        return out


RECOMMENDED_FIELDS = {"recompute": float, "select": str, "repair_layers": int}
OPTIONAL_RECOMMENDED_FIELDS = {"mapped_key_scale": float}  # absent: 1, the keys left mapped unscaled


@dataclass
class VersionEntry:
    version: str
    commit: str
    files: dict[str, str]  # file name -> sha256 fingerprint
    metrics: dict[str, float]
    evaluations: list[Evaluation] = field(default_factory=list)  # added after publishing, oldest first

    def to_dict(self) -> dict:
        out = {"version": self.version, "commit": self.commit, "files": dict(sorted(self.files.items())),
               "metrics": _ordered(self.metrics, METRIC_FIELDS)}
        if self.evaluations:  # absent when none: files written before evaluations existed save back unchanged
            out["evaluations"] = [e.to_dict() for e in self.evaluations]
        return out

    @property
    def recommended(self) -> dict | None:
        """The newest evaluation's recommended transfer settings, if any."""
        return next((e.recommended for e in reversed(self.evaluations) if e.recommended is not None), None)

    def fidelity(self, data: str = REFERENCE_SPLIT) -> "Fidelity | None":
        """This version's fidelity figures measured on ``data``: the newest fidelity evaluation on it, else the
        figures published with the version when they record that same text; None when nothing was measured there."""
        for e in reversed(self.evaluations):
            if e.task == "fidelity" and e.data == data and "recovered" in e.results:
                return Fidelity(data, e.results, e.windows, e.context_tokens, f"evaluation of {e.date[:10]}")
        published = self.published()
        return published if published.data == data else None

    def published(self) -> "Fidelity":
        """The figures published with this version and the text they were measured on: the one record of it that
        ``hf-fold list``, ``show`` and the model card agree on (``data`` is None for a version whose registry entry
        does not record it)."""
        figures = {k: v for k, v in self.metrics.items() if k in FIDELITY_FIGURES}
        return Fidelity(self.metrics.get("data"), figures, self.metrics.get("windows"),
                        self.metrics.get("context_tokens"), "published")

    def measured_on(self) -> str:
        """Where the published metrics were measured, in words (versions published before metrics recorded it say
        so)."""
        return self.metrics.get("data", UNRECORDED_SPLIT)


@dataclass(frozen=True)
class Fidelity:
    """Fidelity figures of one version on one text: ``figures`` holds recovered (and kl, top1, nll, benefit when
    measured); ``source`` says whether they were published with the version or evaluated later."""

    data: str | None
    figures: dict
    windows: int | None
    context_tokens: int | None
    source: str

    @property
    def recovered(self) -> float:
        return self.figures["recovered"]

    def describe(self) -> str:
        size = f", {self.windows} x {self.context_tokens} tokens" if self.windows and self.context_tokens else ""
        return f"{self.data or UNRECORDED_SPLIT}{size}, {self.source}"


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

    def fail(self, where: str, found: str, expected: str, reason: str = "invalid"):
        raise RegistryError(f"{self.source}: {where or '(top level)'}: found {found}; expected {expected}.", reason)

    def keys(self, obj, where: str, required: tuple, optional: tuple = ()) -> None:
        if not isinstance(obj, dict):
            self.fail(where, f"{type(obj).__name__} {_short(obj)}", "a JSON object", "type")
        missing = [k for k in required if k not in obj]
        extra = sorted(set(obj) - set(required) - set(optional))
        if missing:
            self.fail(where, f"no key(s) {', '.join(missing)}", f"keys {', '.join(required + optional)}", "missing-key")
        if extra:
            self.fail(_key_path(where, extra[0]), "an unknown key", f"only keys {', '.join(required + optional)}",
                      "unknown-key")

    def value(self, obj, where: str, kind, *, nullable: bool = False):
        if obj is None and nullable:
            return None
        ok = isinstance(obj, kind) and not isinstance(obj, bool)
        if kind is float:  # JSON has one number type: 1 is as good as 1.0
            ok = isinstance(obj, (int, float)) and not isinstance(obj, bool)
        if not ok:
            name = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}[kind]
            self.fail(where, f"{type(obj).__name__} {_short(obj)}", name + (" or null" if nullable else ""), "type")
        if kind is float and not math.isfinite(obj):  # add_version's metrics do not pass through load_json
            self.fail(where, _short(obj), NOT_FINITE, "non-finite")
        return obj

    def pattern(self, obj, where: str, regex: re.Pattern, expected: str) -> str:
        if not isinstance(obj, str) or not regex.fullmatch(obj):
            self.fail(where, _short(obj), expected, "format")
        return obj

    def hub_rule(self, obj, where: str, validator) -> str:
        try:
            return validator(obj)
        except HubError as e:  # the hub's message already says what was found and what is expected
            raise RegistryError(f"{self.source}: {where}: {e}", "format") from None

    def registry(self, data) -> list[AdapterEntry]:
        self.keys(data, "", ("schema_version", "adapters"))
        self.schema_version(data["schema_version"])
        entries, seen = [], {}
        for i, raw in enumerate(self.value(data["adapters"], "adapters", list)):
            entry = self.entry(raw, f"adapters[{i}]")
            self.unique_repo(entry.repo_id, f"adapters[{i}].repo_id", seen)
            seen[entry.repo_id.lower()] = (i, entry.repo_id)
            entries.append(entry)
        return entries

    def schema_version(self, found) -> None:
        if type(found) is not int:  # true == 1 and 1.0 == 1 in Python, but neither is the schema number 1
            self.fail("schema_version", f"{type(found).__name__} {_short(found)}",
                      f'the integer {SCHEMA_VERSION}: write "schema_version": {SCHEMA_VERSION}', "schema-version")
        if found not in READABLE_SCHEMAS:
            newer = ("this file is newer: upgrade heterofold-hub (pip install -U heterofold-hub)"
                     if found > max(READABLE_SCHEMAS) else f'write "schema_version": {SCHEMA_VERSION}')
            self.fail("schema_version", _short(found),
                      f"one of {list(READABLE_SCHEMAS)} (the registry schemas this heterofold-hub reads); {newer}",
                      "schema-version")

    def unique_repo(self, repo_id: str, where: str, seen: dict) -> None:
        """Hubs resolve repo ids without regard to case, so 'Org/Name' would shadow 'org/name': one of them only."""
        if repo_id.lower() not in seen:
            return
        first_index, first = seen[repo_id.lower()]
        if first == repo_id:
            self.fail(where, f"{repo_id!r} again (first at adapters[{first_index}])",
                      "each repo_id once; merge the versions into one entry", "duplicate-repo")
        self.fail(where, f"{repo_id!r}, which differs only in case from {first!r} at adapters[{first_index}]",
                  "each repo_id once, ignoring case (hubs treat both as one repo): rename one, or merge the versions "
                  "into one entry", "duplicate-repo")

    def entry(self, raw, where: str) -> AdapterEntry:
        self.keys(raw, where, ("repo_id", "hub", "method", "sender", "receiver", "summary", "versions"))
        hub = self.value(raw["hub"], _join(where, "hub"), str)
        if hub not in HUB_NAMES and not hub.startswith(("http://", "https://")):
            self.fail(_join(where, "hub"), _short(hub), f"one of {', '.join(HUB_NAMES)} or an http(s):// URL", "format")
        method = self.value(raw["method"], _join(where, "method"), str)
        if not method:
            self.fail(_join(where, "method"), "an empty string", "a method name such as 'heterofold'", "format")
        entry = AdapterEntry(
            repo_id=self.hub_rule(raw["repo_id"], _join(where, "repo_id"), validate_repo_id), hub=hub, method=method,
            sender=self.end(raw["sender"], _join(where, "sender")),
            receiver=self.end(raw["receiver"], _join(where, "receiver")),
            summary=self.value(raw["summary"], _join(where, "summary"), str))
        for j, v in enumerate(self.value(raw["versions"], _join(where, "versions"), list)):
            version = self.version(v, _join(where, f"versions[{j}]"), repo_id=entry.repo_id,
                                   receiver_layers=entry.receiver.spec["num_layers"])
            if any(old.version == version.version for old in entry.versions):
                self.fail(_join(where, f"versions[{j}].version"), f"{version.version} twice",
                          "each version once (published versions are immutable)", "duplicate-version")
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
        for k, layer_type in enumerate(spec.get("layer_types", [])):
            self.value(layer_type, f"{where}.spec.layer_types[{k}]", str)
        return PairEnd(id=self.hub_rule(raw["id"], _join(where, "id"), validate_repo_id),
                       revision=self.value(raw["revision"], _join(where, "revision"), str, nullable=True),
                       tokenizer=self.pattern(raw["tokenizer"], _join(where, "tokenizer"), _FINGERPRINT_RE,
                                              "'sha256:' followed by 64 lowercase hex digits"),
                       spec=dict(spec))

    def evaluation(self, raw, where: str, *, owner: str = "", receiver_layers: int | None = None) -> Evaluation:
        """One evaluation of ``owner`` (``repo_id version``, for messages); its recommended setting must be one the
        transfer accepts (a :class:`~heterofold_hub.transfer.config.TransferConfig`), ``repair_layers`` within the
        receiver's ``receiver_layers``."""
        self.keys(raw, where, ("task", "data", "date", "commit", "command", "results"),
                  ("recommended", "windows", "context_tokens"))
        for name in ("task", "data", "date", "command"):
            self.value(raw[name], _join(where, name), str)
        for name in ("windows", "context_tokens"):
            self.value(raw.get(name), _join(where, name), int, nullable=True)
        results = self.value(raw["results"], _join(where, "results"), dict)
        for name, value in results.items():
            self.value(value, f"{where}.results.{name}", float)
        recommended = raw.get("recommended")
        if recommended is not None:
            self.keys(recommended, _join(where, "recommended"), tuple(RECOMMENDED_FIELDS),
                      tuple(OPTIONAL_RECOMMENDED_FIELDS))
            for name, kind in (RECOMMENDED_FIELDS | OPTIONAL_RECOMMENDED_FIELDS).items():
                if name in recommended:
                    self.value(recommended[name], f"{where}.recommended.{name}", kind)
            self.recommended(recommended, _join(where, "recommended"), owner, receiver_layers)
        return Evaluation(task=raw["task"], data=raw["data"], date=raw["date"],
                          commit=self.pattern(raw["commit"], _join(where, "commit"), _COMMIT_RE,
                                              "a 40-hex-digit git commit"),
                          command=raw["command"], results=dict(results),
                          recommended=None if recommended is None else dict(recommended),
                          windows=raw.get("windows"), context_tokens=raw.get("context_tokens"))

    def recommended(self, recommended: dict, where: str, owner: str, receiver_layers: int | None) -> None:
        """Refuse a recommended setting the transfer would refuse (it must load into a
        :class:`~heterofold_hub.transfer.config.TransferConfig`, ``repair_layers`` within the receiver's layers):
        users get it by default, and an error inside transfer() would blame their own arguments."""
        from heterofold_hub.transfer.config import TransferConfig  # torch-free

        problems = []
        try:
            TransferConfig.from_dict(recommended)
        except HeteroFoldError as bad:
            problems.append(str(bad).rstrip("."))
        layers = recommended.get("repair_layers")
        if receiver_layers is not None and isinstance(layers, int) and layers > receiver_layers:
            problems.append(f"repair_layers={layers}: expected at most the receiver's {receiver_layers} layers "
                            f"(0 .. {receiver_layers})")
        if problems:
            raise RegistryError(
                f"{self.source}: {owner + ': ' if owner else ''}{where}: found {'; '.join(problems)}. This is the "
                "setting the version recommends, which every transfer with it uses by default: correct it, or remove "
                "the recommended block.", "recommended")

    def version(self, raw, where: str, *, repo_id: str = "", receiver_layers: int | None = None) -> VersionEntry:
        self.keys(raw, where, ("version", "commit", "files", "metrics"), ("evaluations",))
        files = self.value(raw["files"], _join(where, "files"), dict)
        for name, digest in files.items():
            if not name or "/" in name or "\\" in name or name.startswith("."):
                self.fail(f"{where}.files", f"file name {name!r}", "plain file names (adapter folders are flat)",
                          "format")
            self.pattern(digest, f"{where}.files[{name!r}]", _FINGERPRINT_RE, "'sha256:' + 64 lowercase hex digits")
        metrics = raw["metrics"]
        self.keys(metrics, _join(where, "metrics"), ("recovered",), tuple(k for k in METRIC_FIELDS if k != "recovered"))
        for name, value in metrics.items():
            self.value(value, f"{where}.metrics.{name}", METRIC_FIELDS[name])
        return VersionEntry(version=self.hub_rule(raw["version"], _join(where, "version"), validate_version),
                            commit=self.pattern(raw["commit"], _join(where, "commit"), _COMMIT_RE,
                                                "a 40-hex-digit git commit"),
                            files=dict(files), metrics=dict(metrics),
                            evaluations=[self.evaluation(e, _join(where, f"evaluations[{k}]"),
                                                         owner=f"{repo_id} {raw['version']}".strip(),
                                                         receiver_layers=receiver_layers)
                                         for k, e in enumerate(self.value(raw.get("evaluations", []),
                                                                          _join(where, "evaluations"), list))])


NOT_FINITE = ("a finite number (JSON has no NaN or Infinity, and 1e999 overflows to Infinity): write the measured "
              "value, or leave out an optional metric that was not measured")


class _Object(dict):
    """A parsed JSON object that remembers the first key it was given twice (json.loads keeps the last silently)."""

    duplicate: str | None = None


def _object(pairs: list) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen = set()
        obj.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def load_json(raw: bytes, source: str):
    """The JSON value of a registry file's bytes, refusing what json.loads would take on trust: bytes that are not
    UTF-8, duplicate keys, NaN and infinities, lone surrogates (text that UTF-8 cannot hold). Each refusal names
    the JSON path where it can (a bad byte inside a string: the string's path; elsewhere: its line)."""
    bad_byte = _first_non_utf8(raw)
    # surrogateescape keeps a bad byte inside a string as a lone surrogate, so the walk below can name its path
    text = raw.decode("utf-8", errors="surrogateescape")
    try:
        data = json.loads(text, object_pairs_hook=_object)
    except RecursionError:
        raise RegistryError(f"{source}: the JSON nests too deeply to read; expected the registry's shallow layout "
                            "(schema_version, adapters[...]): restore the file from git.", "invalid-json") from None
    except ValueError as e:  # JSONDecodeError, or an integer too long for int()
        if bad_byte is not None:
            raise _not_utf8(source, raw, bad_byte, "") from None
        if not isinstance(e, json.JSONDecodeError):
            raise RegistryError(f"{source}: invalid JSON: found a number with thousands of digits; "
                                "expected the registry's counts and metrics: restore the file from git.",
                                "invalid-json") from None
        raise RegistryError(f"{source}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}.",
                            "invalid-json") from None
    _check_values(data, source, raw, bad_byte)
    return data


def _first_non_utf8(raw: bytes) -> int | None:
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        return e.start


def _not_utf8(source: str, raw: bytes, offset: int, where: str) -> RegistryError:
    line = raw.count(b"\n", 0, offset) + 1
    return RegistryError(f"{source}: {where + ': ' if where else ''}found byte 0x{raw[offset]:02x} (offset {offset}, "
                         f"line {line}), which is not UTF-8; expected a UTF-8 text file: re-save it as UTF-8 (an "
                         "editor's 'encoding' setting), or restore it from git.", "not-utf8")


def _check_values(data, source: str, raw: bytes, bad_byte: int | None) -> None:
    """Walk every key and value in document order (iteratively: depth is json's business, not the stack's)."""
    stack = [("", data)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise RegistryError(f"{source}: {where or '(top level)'}: found {_short(node)}; expected {NOT_FINITE}.",
                                "non-finite")
        if isinstance(node, str):
            _check_text(node, where, source, raw, bad_byte)
        elif isinstance(node, list):
            stack.extend(reversed([(f"{where}[{i}]", item) for i, item in enumerate(node)]))
        elif isinstance(node, dict):
            if node.duplicate is not None:
                raise RegistryError(f"{source}: {_key_path(where, node.duplicate)}: found the key "
                                    f"{node.duplicate!r} twice in one object; expected each key once (JSON readers "
                                    "keep only the last value, silently): delete the stale one.", "duplicate-key")
            # each key just before its value: the order of the text, so a bad byte is reported where it is
            stack.extend(reversed([(_key_path(where, k), item) for k, v in node.items() for item in (k, v)]))


def _check_text(text: str, where: str, source: str, raw: bytes, bad_byte: int | None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        if bad_byte is not None:  # a byte surrogateescape kept: report it as the byte it was
            raise _not_utf8(source, raw, bad_byte, where or "(top level)") from None
        raise RegistryError(f"{source}: {where or '(top level)'}: found a lone surrogate "
                            f"{text[e.start].encode('unicode_escape').decode()} in {_short(text)}; expected text that "
                            "UTF-8 can hold: remove the escape.", "surrogate") from None


def _key_path(where: str, key: str) -> str:
    """``a.b`` for a name-like key, ``a['x.y']`` for any other, as the parser's messages write paths."""
    return _join(where, key) if key.isidentifier() else f"{where}[{key!r}]"


def _ordered(values: dict, known) -> dict:
    """Known keys in schema order, then any others sorted: a stable layout for deterministic files."""
    return {**{k: values[k] for k in known if k in values}, **{k: values[k] for k in sorted(values) if k not in known}}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _short(value, limit: int = 60) -> str:
    if isinstance(value, float) and not math.isfinite(value):  # as JSON spells it, not Python's nan/inf
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
