"""``hf-fold eval``: arguments, their checks, and the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING, NamedTuple


from heterofold_hub.commands import conventions
from heterofold_hub.io import output_problem
from heterofold_hub.commands.placement import dtype_problems, map_dtype_problems, map_dtype_row, place, with_map_dtype
from heterofold_hub.commands.transfer_args import TransferArgs
from heterofold_hub.errors import UsageError
from heterofold_hub.zoo import DEMO_PAIR

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_METHODS = ("recolor", "kv-ridge", "dense-latent")


@dataclass(kw_only=True)
class EvalArgs(TransferArgs):
    """``hf-fold eval --task fidelity``'s arguments; the defaults here are the command line's."""

    sender: str = DEMO_PAIR[0]
    receiver: str = DEMO_PAIR[1]
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    data: str = "bundled:unseen"
    calib_data: str = "bundled:calib"
    context_tokens: int = 512
    continuation_tokens: int = 64
    windows: int = 96
    calib_windows: int = 64
    batch_size: int = 8
    seed: int = 0
    json_path: Path | None = None
    adapters: list[Path] = field(default_factory=list)  # trained adapter packages scored beside the methods
    registered: bool = True  # with no --adapter, also score the adapter registry.json lists for the pair
    pivot: str | None = None  # "auto" or a model id: with no direct adapter, score the composed path
    dtype: str = "float32"  # models, caches and maps; adapters are fitted in fp32 first
    map_dtype: str | None = None  # also score each package row with its maps' products in this dtype

    def validate(self) -> None:
        """Every argument problem at once, phrased in flags (before any model is loaded)."""
        from heterofold_hub.transfer.selects import needs_query

        problems = shared_problems(self.sender, self.receiver, self.methods, self.adapters, registered=self.registered,
                                   pivot=self.pivot) + dtype_problems(self.dtype)
        problems += map_dtype_problems(self.map_dtype, self.dtype)
        transfer = self.transfer_problems()
        problems += transfer
        if not transfer:
            settings = self.transfer_config()
            if (needs_query(settings.select) or settings.select == "oracle") and settings.active:
                problems.append(f"--select: {settings.select!r} needs a prompt or answer spans, which fidelity windows do "
                                "not have; choose content, digits, deviation, tail or chunk-start")
        problems += [p for p in (output_problem("--json", self.json_path),) if p]
        for flag, value, low in (("--context-tokens", self.context_tokens, 2), ("--continuation-tokens", self.continuation_tokens, 1),
                                 ("--windows", self.windows, 2), ("--calib-windows", self.calib_windows, 1), ("--batch-size", self.batch_size, 1)):
            if value < low:
                problems.append(f"{flag}: {value} is too small (minimum {low})")
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))


def shared_problems(sender: str, receiver: str, methods: list[str], adapters: list[Path], *, registered: bool = True,
                    pivot: str | None = None) -> list[str]:
    """Argument problems every ``hf-fold eval`` task checks: methods, adapter packages, the pair, and --pivot, which
    only picks the registered adapter (so it means nothing beside --adapter or --no-registered)."""
    from heterofold_hub.adapter.config import CONFIG_NAME
    from heterofold_hub.methods import METHODS

    problems = []
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        problems.append(f"--methods: unknown {unknown}; choose from {', '.join(sorted(METHODS))}")
    if not methods and not adapters:
        problems.append("--methods: give at least one method, or score packages alone with --methods '' --adapter DIR")
    for folder in adapters:
        if not (Path(folder) / CONFIG_NAME).is_file():
            problems.append(f"--adapter: {folder} is not an adapter package (no {CONFIG_NAME}); "
                            "pass an --out folder of `hf-fold train`")
    if sender == receiver:
        problems.append(f"--sender and --receiver are both {sender!r}; transfer needs two different models")
    if pivot is not None and (adapters or not registered):
        problems.append(f"--pivot {pivot!r} picks the registered adapter or path to score; it does not apply with "
                        f"{'--adapter' if adapters else '--no-registered'}. Drop one of the two")
    return problems


def check_repair_layers(receivers, repair_layers: int) -> None:
    """``--repair-layers`` against each receiver's layer count, read from its config alone (no weights), so a count
    beyond the receiver is a usage error before any fitting, not a failure at the end of the run."""
    if repair_layers <= 0:
        return
    from heterofold_hub.base_models.arch import kv_spec
    from heterofold_hub.base_models.loading import load_config

    problems = []
    for receiver in dict.fromkeys(receivers):
        layers = kv_spec(load_config(receiver)).num_layers
        if repair_layers > layers:
            problems.append(f"--repair-layers: {repair_layers}, but the receiver {receiver} has {layers} layers; give "
                            f"0 .. {layers} (its first layers recomputed for every position)")
    if problems:
        raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))


def load_packages(args: EvalArgs, sender, receiver, *, taken: set[str]) -> dict[str, tuple[str, object]]:
    """``{row name: (source, ResolvedAdapter)}`` for the ``--adapter`` packages (with none, the adapter registry.json
    lists for this pair, if any), checked against the loaded pair and against training on the eval text.
    Each row is named by its method, plus its source when that name is taken."""
    from heterofold_hub.data.texts import trained_on_eval_text
    from heterofold_hub.methods.composed import training_data
    from heterofold_hub.hub.registry import NoAdapterError
    from heterofold_hub.hub.resolve import resolve_adapter

    resolved = []
    for folder in args.adapters:
        resolved.append((str(folder), resolve_adapter(sender, receiver, adapter=folder)))
    if not args.adapters and args.registered:
        try:
            found = resolve_adapter(sender, receiver, pivot=args.pivot)
            resolved.append((found.describe() if found.path else f"{found.repo_id}@{found.version}", found))
        except NoAdapterError:
            if args.pivot is not None:
                raise  # a path was asked for: say why there is none
            # nothing registered for this pair: score the methods alone
    out = {}
    for source, found in resolved:
        seen = [d for d in training_data(found.adapter.config) if trained_on_eval_text(d, args.data)]
        if seen:
            raise UsageError(f"Adapter {source} was trained on {seen[0]!r}, which shares text with the --data "
                                  f"{args.data!r} being evaluated; held-out text must never be trained on. Evaluate on "
                                  "other text.")
        name = found.adapter.config.method
        if name in taken or name in out:
            name = f"{name} ({Path(source).name})"
        out[name] = (source, found)
    return out


def disjoint_texts(args) -> tuple[list[str], list[str]]:
    """The held-out and calibration texts of ``args`` (``data``, ``calib_data``), refused if they overlap."""
    from heterofold_hub.data.texts import SHINGLE_LINES, read_texts, shared_passages

    eval_texts, calib_texts = read_texts(args.data), read_texts(args.calib_data)
    shared = shared_passages(calib_texts, eval_texts)
    if shared:
        raise UsageError(f"--data {args.data!r} and --calib-data {args.calib_data!r} share passages ({len(shared)} "
                              f"held-out text(s) repeat {SHINGLE_LINES} consecutive lines of calibration text); held-out "
                              "text must never be fitted on. Use disjoint data.")
    return eval_texts, calib_texts


class Scored(NamedTuple):
    """What :func:`scored_adapters` gives: the adapters by row name, each package row's source, the calibration
    windows the methods were fitted on, and each row's provenance record (:func:`adapter_record`)."""

    adapters: dict
    sources: dict[str, str]
    calibration_windows: int
    records: dict[str, dict]


def scored_adapters(args, sender, receiver, calib_texts: list[str]) -> Scored:
    """``args.methods`` fitted on calibration windows, plus the ``--adapter`` packages (or the registered adapter)."""
    from heterofold_hub.methods.fitting import fit_methods
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.provenance import adapter_record

    packages = load_packages(args, sender, receiver, taken=set(args.methods))
    adapters, n_calib = {}, 0
    if args.methods:  # with packages alone, nothing to fit and no calibration text read
        calib = make_windows(calib_texts, receiver, max_windows=args.calib_windows,
                             context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens)
        adapters, n_calib = fit_methods(sender, receiver, args.methods, calib, batch_size=args.batch_size,
                                        seed=args.seed), len(calib)
    records = {name: adapter_record(adapter) for name, adapter in adapters.items()}
    for name, (_, found) in packages.items():
        adapters[name], records[name] = found.adapter, adapter_record(found.adapter, found)
    return Scored(adapters, {name: source for name, (source, _) in packages.items()}, n_calib, records)


def run_eval(args: EvalArgs, console: Console, messages: Console = conventions.messages) -> dict:
    """Score, print the table on ``console`` (data) and say what was written on ``messages``."""
    args.validate()
    check_repair_layers([args.receiver], args.repair_layers)
    from heterofold_hub.evaluation.fidelity import evaluate, results_table
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.provenance import provenance
    from heterofold_hub.progress import status

    eval_texts, calib_texts = disjoint_texts(args)
    with status("loading models", messages):
        sender, receiver = Side.load(args.sender), Side.load(args.receiver)
    scored = scored_adapters(args, sender, receiver, calib_texts)
    records = dict(scored.records)
    if args.map_dtype:
        records.update({map_dtype_row(name, args.map_dtype): {**scored.records[name], "map_dtype": args.map_dtype}
                        for name in scored.sources})
    made = provenance(records)  # before scoring: the commit it records is the code that ran
    adapters = place((sender, receiver), scored.adapters, dtype=args.dtype)
    adapters = with_map_dtype(adapters, list(scored.sources), args.map_dtype)
    held_out = make_windows(eval_texts, receiver, max_windows=args.windows, context_tokens=args.context_tokens,
                            continuation_tokens=args.continuation_tokens)
    settings = args.transfer_config()
    result = evaluate(sender, receiver, adapters, held_out, batch_size=args.batch_size,
                      recompute=settings if settings.active else None, data=args.data)
    result["calibration_windows"] = scored.calibration_windows
    result["dtype"] = args.dtype
    result["map_dtype"] = args.map_dtype
    result["adapters"] = scored.sources  # where each adapter row came from, as given
    result["provenance"] = made
    console.print(results_table(result))
    if args.json_path:
        from heterofold_hub.io import write_json_atomic

        write_json_atomic(args.json_path, result)
        messages.print(f"wrote {args.json_path}", highlight=False)
    return result
