"""Experiment configs: one TOML file per experiment under ``benchmarks/experiments/``, loaded into typed dataclasses.

A config names the pair and, per stage it has, what that stage runs::

    description = "what this experiment measures"
    sender = "gguf/smollm2-135m-instruct-q4_1"
    receiver = "gguf/gemma3-270m-q4_k_m"

    [train.heterofold]      # one package per table, fitted by hf-fold train's trainer (TrainArgs' fields)
    data = "bundled:wide"
    windows = 320

    [compress.rank64]       # one package per table, a registered adapter factored by hf-fold compress
    adapter = "heterofold/gemma3-270m-to-smollm2-135m@v1.1.0"
    rank = 64

    [score]                 # fidelity (hf-fold eval), one run per context length
    adapters = ["heterofold/smollm2-135m-to-gemma3-270m@v1.3.0", "train:kv-ridge"]
    contexts = [512, 2048]
    windows = [48, 16]

    [retrieval]             # exact-fact retrieval (hf-fold eval --task retrieval)
    [handoff]               # retrieval across a hand-off over recompute settings (benchmarks/handoff.py)
    [handoff-speed]         # the hand-off call's end-to-end time beside native prefill (benchmarks/handoff.py)
    [bench]                 # timings (hf-fold bench)
    [hidden-profile]        # an agent task against text communication (benchmarks/agents.py)
    [conversation]          # turn-by-turn hand-offs both ways, fidelity per turn (benchmarks/agents.py)
    [publish]               # what `python -m benchmarks publish` pushes: repo, version, package (a train table)

An adapter is ``repo@version`` (a registered version) or ``train:NAME`` (the package this experiment's
``[train.NAME]`` writes under ``runs/experiments/<experiment>/NAME``; ``train:EXPERIMENT/NAME`` another's) or
``compress:NAME`` (the package ``[compress.NAME]`` writes there). Every key is checked: a bad one is refused
with the file, the key, the valid choices and the fix.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent / "experiments"
STAGES = ("train", "compress", "score", "retrieval", "handoff", "handoff-speed", "bench", "hidden-profile",
          "conversation")
# train stage packages, relative to the repository root (ignored by git); tests point it elsewhere
RUNS = Path(os.environ.get("HF_FOLD_EXPERIMENT_RUNS", Path("runs") / "experiments"))


class ConfigError(ValueError):
    """A config that cannot be run, with what to change."""


@dataclass(frozen=True)
class Score:
    adapters: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)  # fitted in the run on calib_data (recolor, kv-ridge, ...)
    data: str = "bundled:unseen"
    calib_data: str = "bundled:calib"
    contexts: list[int] = field(default_factory=lambda: [512])
    windows: list[int] = field(default_factory=lambda: [48])  # one per context
    continuation_tokens: int = 64
    calib_windows: int = 64
    batch_size: int = 8
    dtype: str = "float32"
    map_dtype: str | None = None  # also score each package with its maps' products in this dtype (--map-dtype)
    seed: int = 0


@dataclass(frozen=True)
class Retrieval:
    adapters: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    data: str = "bundled:unseen"
    calib_data: str = "bundled:calib"
    lengths: list[int] = field(default_factory=lambda: [512])
    docs: int = 48
    batch_size: int = 8
    seed: int = 0
    recompute: float = 0.0
    select: str | None = None  # hf-fold's --select: content when recompute asks for any
    repair_layers: int = 0


@dataclass(frozen=True)
class Handoff:
    adapter: str  # repo@version the receiver's model loads (HeteroFoldModel.from_pretrained)
    grid: str  # recompute settings, "content:0.05,0.1;query+2:0.1;oracle" (benchmarks/handoff.py)
    lengths: list[int] = field(default_factory=lambda: [512])
    docs: int = 32
    formats: list[str] = field(default_factory=lambda: ["code", "prose"])
    repair: list[int] = field(default_factory=lambda: [0])
    data: str = "bundled:unseen"
    batch_size: int = 8
    map_dtype: str | None = None  # the adapter's products in this dtype (bfloat16) for every setting; models float32


@dataclass(frozen=True)
class HandoffSpeed:
    adapter: str
    grid: str
    lengths: list[int] = field(default_factory=lambda: [512, 2048])
    repeats: int = 3
    map_dtype: str | None = None  # also time every setting with the adapter's products in this dtype (bfloat16)


@dataclass(frozen=True)
class Bench:
    adapter: str | None = None  # repo@version hf-fold bench must resolve for the pair (checked after the run)
    contexts: list[int] = field(default_factory=lambda: [512])
    repeats: int = 3
    both_ways: bool = False
    dtype: str = "float32"
    map_dtype: str | None = None  # also time heterofold and each package with bf16 products (--map-dtype)
    device: str = "auto"  # auto: cuda when there is one
    data: str = "bundled:unseen"
    recompute: float = 0.0
    select: str | None = None  # hf-fold's --select: content when recompute asks for any
    query: str | None = None
    adapters: list[str] = field(default_factory=list)  # packages timed beside it (repo@version), one direction only


@dataclass(frozen=True)
class HiddenProfile:
    adapter: str  # repo@version of sender -> receiver; its registry entry's recommended setting is one condition
    lengths: list[int] = field(default_factory=lambda: [512])
    episodes: int = 48  # per length and format
    formats: list[str] = field(default_factory=lambda: ["code", "prose"])
    data: str = "bundled:unseen"
    seed: int = 0
    # the kv condition's recompute where the adapter's registry entry recommends none ("statement" at 0.05)
    select: str | None = None
    recompute: float | None = None
    extra: str = ""  # more kv conditions, a hand-off grid ("statement~0.7:0.05": keys left mapped scaled by 0.7)


@dataclass(frozen=True)
class Conversation:
    adapter: str  # repo@version of sender (agent A) -> receiver (agent B)
    reverse_adapter: str  # repo@version of receiver -> sender (B's turns into A)
    conversations: int = 8
    turns: int = 8
    document_tokens: int = 512
    turn_tokens: int = 448
    score_tokens: int = 128  # the first tokens of the listener's next turn that are scored
    recompute: float = 0.05
    select: str = "tail"  # a select that reads no question (a turn has none); the recent tail serves the next turn
    data: str = "bundled:unseen"
    seed: int = 0


@dataclass(frozen=True)
class Publish:
    package: str  # a [train.NAME] of this experiment
    repo: str
    version: str


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    sender: str
    receiver: str
    train: dict[str, dict] = field(default_factory=dict)  # NAME -> hf-fold train arguments (TrainArgs' fields)
    compress: dict[str, dict] = field(default_factory=dict)  # NAME -> hf-fold compress arguments (CompressArgs')
    score: Score | None = None
    retrieval: Retrieval | None = None
    handoff: Handoff | None = None
    handoff_speed: HandoffSpeed | None = None
    bench: Bench | None = None
    hidden_profile: HiddenProfile | None = None
    conversation: Conversation | None = None
    publish: Publish | None = None
    path: Path | None = None

    @property
    def stages(self) -> list[str]:
        return [s for s in STAGES if getattr(self, s.replace("-", "_"))]

    def package(self, name: str) -> Path:
        """Where ``[train.NAME]`` writes its package (``EXPERIMENT/NAME``: another experiment's)."""
        other, _, name = name.rpartition("/")
        return RUNS / (other or self.name) / name


PACKAGE_REF = re.compile(r"^(train:([\w.-]+/)?[\w.-]+|compress:[\w.-]+)$")


def registered_ref(ref: str) -> bool:
    """Whether ``ref`` is ``repo@version`` by the hub's own rules (``v1.0.0``, ``1.0.0``, ``v1.4.0-rc.1``)."""
    from heterofold_hub.hub.base import HubError, split_ref, validate_repo_id

    try:
        repo_id, version = split_ref(ref)
        validate_repo_id(repo_id)
    except HubError:
        return False
    return version is not None


def adapter_ref(ref: str) -> bool:
    """Whether ``ref`` names an adapter a stage can load: ``train:NAME``, ``compress:NAME`` or ``repo@version``."""
    return bool(PACKAGE_REF.match(ref)) or registered_ref(ref)
TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "list[str]": list, "list[int]": list,
         "str | None": (str, type(None)), "float | None": (int, float, type(None))}


def _problem(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}")


def _section(cls, table: dict, path: Path, prefix: str):
    """``cls`` from a TOML table, every key and type checked."""
    known = {f.name: f for f in fields(cls)}
    for key, value in table.items():
        if key not in known:
            raise _problem(path, f"{prefix}.{key}", f"unknown key; valid keys are {', '.join(known)}. Fix the spelling "
                                                    "or remove it")
        kind = known[key].type
        if not isinstance(value, TYPES[kind]) or (kind in ("int", "float", "float | None") and isinstance(value, bool)):
            raise _problem(path, f"{prefix}.{key}", f"{value!r} is not of type {kind}")
        if kind.startswith("list["):
            item = int if kind == "list[int]" else str
            if not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
                raise _problem(path, f"{prefix}.{key}", f"{value!r} must be a list of {item.__name__}")
    missing = [f.name for f in fields(cls) if f.name not in table and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise _problem(path, f"{prefix}.{missing[0]}", "required and missing")
    return cls(**table)


def _check_adapters(path: Path, key: str, refs: list[str], train: dict, compress: dict | None = None) -> None:
    for ref in refs:
        if not adapter_ref(ref):
            raise _problem(path, key, f"{ref!r} is neither repo@version (heterofold/a-to-b@v1.0.0), train:NAME nor "
                                      "compress:NAME")
        if ref.startswith("compress:"):
            if ref[9:] not in (compress or {}):
                raise _problem(path, key, f"{ref!r} names no [compress.{ref[9:]}] table; the config compresses "
                                          f"{', '.join(compress or {}) or 'nothing'}")
            continue
        if not ref.startswith("train:"):
            continue
        other, _, name = ref[6:].rpartition("/")  # train:EXPERIMENT/NAME: another experiment's package
        if other:
            source = path.parent / f"{other}.toml"
            trains = tomllib.loads(source.read_text()).get("train", {}) if source.is_file() else None
            if trains is None or name not in trains:
                raise _problem(path, key, f"{ref!r}: {source} has no [train.{name}] table")
        elif name not in train:
            raise _problem(path, key, f"{ref!r} names no [train.{name}] table; the config trains "
                                      f"{', '.join(train) or 'nothing'}")


def _check_compress(path: Path, compress: dict, train: dict) -> None:
    """Each ``[compress.NAME]``: hf-fold compress arguments, a parent that is registered or trained here, and a
    name no train table takes (both write ``runs/experiments/<experiment>/NAME``)."""
    from heterofold_hub.commands.compress import CompressArgs

    known = {f.name: f for f in fields(CompressArgs)}
    settable = set(known) - {"out", "sender", "receiver", "registry"}
    for name, table in compress.items():
        if not isinstance(table, dict):
            raise _problem(path, f"compress.{name}", "must be a table [compress.NAME] of hf-fold compress arguments")
        if name in train:
            raise _problem(path, f"compress.{name}", f"[train.{name}] writes the same package folder; rename one")
        for key, value in table.items():
            if key not in settable:
                raise _problem(path, f"compress.{name}.{key}", f"not an hf-fold compress argument; valid: "
                                                               f"{', '.join(sorted(settable))}")
            kind = TYPES[known[key].type]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise _problem(path, f"compress.{name}.{key}", f"{value!r} is not of type {known[key].type}")
        for key in ("adapter", "rank"):
            if key not in table:
                raise _problem(path, f"compress.{name}.{key}", "required and missing")
        if table["adapter"].startswith("compress:"):
            raise _problem(path, f"compress.{name}.adapter", "a low-rank package cannot be factored again; name its "
                                                             "parent (repo@version or train:NAME)")
        _check_adapters(path, f"compress.{name}.adapter", [table["adapter"]], train)


def parse(path: Path, data: dict) -> Experiment:
    """An :class:`Experiment` from a parsed TOML document, or :class:`ConfigError` naming the first problem."""
    from heterofold_hub.trainers.train import TrainArgs

    allowed = {"description", "sender", "receiver", *STAGES, "publish"}
    for key in data:
        if key not in allowed:
            raise _problem(path, key, f"unknown key; valid keys are {', '.join(sorted(allowed))}. Stages are tables "
                                      f"([score], [train.NAME], ...)")
    for key in ("description", "sender", "receiver"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise _problem(path, key, "required: a non-empty string")
    train = data.get("train", {})
    trainable = {f.name for f in fields(TrainArgs)} - {"sender", "receiver", "out", "resume"}
    for name, table in train.items():
        if not isinstance(table, dict):
            raise _problem(path, f"train.{name}", "must be a table [train.NAME] of hf-fold train arguments")
        for key in table:
            if key not in trainable:
                raise _problem(path, f"train.{name}.{key}", f"not an hf-fold train argument; valid: "
                                                            f"{', '.join(sorted(trainable))}")
    compress = data.get("compress", {})
    if not isinstance(compress, dict):
        raise _problem(path, "compress", "must be tables [compress.NAME] of hf-fold compress arguments")
    _check_compress(path, compress, train)
    sections = {}
    for key, cls in (("score", Score), ("retrieval", Retrieval), ("handoff", Handoff), ("handoff-speed", HandoffSpeed),
                     ("bench", Bench), ("hidden-profile", HiddenProfile), ("conversation", Conversation),
                     ("publish", Publish)):
        if key in data:
            if not isinstance(data[key], dict):
                raise _problem(path, key, f"must be a table [{key}]")
            sections[key.replace("-", "_")] = _section(cls, data[key], path, key)
    score = sections.get("score")
    if score:
        if len(score.windows) != len(score.contexts):
            raise _problem(path, "score.windows", f"{score.windows} must give one count per context {score.contexts}")
        _check_adapters(path, "score.adapters", score.adapters, train, compress)
        if not score.adapters and not score.methods:
            raise _problem(path, "score", "scores nothing: give adapters or methods")
    if sections.get("retrieval"):
        _check_adapters(path, "retrieval.adapters", sections["retrieval"].adapters, train, compress)
    bench = sections.get("bench")
    if bench and bench.adapters:
        _check_adapters(path, "bench.adapters", bench.adapters, train, compress)
        if bench.both_ways:
            raise _problem(path, "bench.adapters", "a package maps one direction: drop both_ways, or time the other "
                                                   "direction in its own experiment")
    for key in ("handoff", "handoff_speed"):
        map_dtype = getattr(sections.get(key), "map_dtype", None)
        if map_dtype is not None:
            from heterofold_hub.commands.placement import map_dtype_problems

            problems = map_dtype_problems(map_dtype, "float32")  # the harness loads the models in float32
            if problems:
                raise _problem(path, f"{key.replace('_', '-')}.map_dtype", problems[0].removeprefix("--map-dtype: "))
    for key, field_name in (("handoff", "adapter"), ("handoff_speed", "adapter"), ("bench", "adapter"),
                            ("hidden_profile", "adapter"), ("conversation", "adapter"),
                            ("conversation", "reverse_adapter")):
        ref = getattr(sections.get(key), field_name, None)
        if ref is not None and not registered_ref(ref):
            raise _problem(path, f"{key.replace('_', '-')}.{field_name}", f"{ref!r} must be a registered "
                                                                          "repo@version (heterofold/a-to-b@v1.0.0)")
    publish = sections.get("publish")
    if publish and publish.package not in train:
        raise _problem(path, "publish.package", f"{publish.package!r} is not a [train.NAME] of this experiment "
                                                f"(it trains {', '.join(train) or 'nothing'})")
    experiment = Experiment(name=path.stem, description=data["description"], sender=data["sender"],
                            receiver=data["receiver"], train=train, compress=compress, path=path, **sections)
    if not experiment.stages:
        raise _problem(path, "stages", f"none; give at least one of {', '.join(STAGES)} as a table")
    return experiment


def load(name_or_path: str | Path, root: Path = EXPERIMENTS) -> Experiment:
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = root / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(root.glob("*.toml")))
        raise ConfigError(f"no experiment {str(name_or_path)!r} ({path} does not exist); known: {known}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as bad:
        raise ConfigError(f"{path}: not valid TOML: {bad}") from None
    return parse(path, data)


def load_all(root: Path = EXPERIMENTS) -> list[Experiment]:
    return [load(p, root) for p in sorted(root.glob("*.toml"))]
