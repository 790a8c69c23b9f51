"""``hf-fold compress``: an affine adapter's folded maps factored to a low rank on calibration text, as a package."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from heterofold_hub.commands import conventions
from heterofold_hub.io import output_problem
from heterofold_hub.errors import HeteroFoldError, UsageError


@dataclass(kw_only=True)
class CompressArgs:
    adapter: str  # a package folder or a registered repo id (the parent)
    rank: int
    out: Path
    sender: str | None = None  # default: the parent's
    receiver: str | None = None
    calib_data: str = "bundled:train"
    heldout: str = "bundled:unseen"  # the text evaluations score on: calibration must share none of it
    calib_windows: int = 64
    context_tokens: int = 512
    continuation_tokens: int = 64
    eval_windows: int = 48  # held-out windows scored into metrics.json; 0: not scored (then it cannot be pushed)
    batch_size: int = 8
    registry: Path | None = None

    def validate(self) -> None:
        from heterofold_hub.data.texts import trained_on_eval_text

        problems = []
        if self.rank < 1:
            problems.append(f"--rank: {self.rank} is too small (minimum 1)")
        for flag, value, low in (("--calib-windows", self.calib_windows, 1), ("--context-tokens", self.context_tokens, 2),
                                 ("--batch-size", self.batch_size, 1)):
            if value < low:
                problems.append(f"{flag}: {value} is too small (minimum {low})")
        if self.eval_windows < 0 or self.eval_windows == 1:
            problems.append(f"--eval-windows: {self.eval_windows}; give 0 (do not score) or at least 2")
        problem = output_problem("--out", self.out, folder=True)
        if problem:
            problems.append(problem)
        elif self.out.is_dir() and any(self.out.iterdir()):
            problems.append(f"--out: {self.out} already exists and is not empty; choose a new folder (a package, once "
                            "written, is not overwritten)")
        if trained_on_eval_text(self.calib_data, self.heldout):
            problems.append(f"--calib-data {self.calib_data!r} shares text with the evaluation text {self.heldout!r}; "
                            "held-out text must never be fitted on. Pass other --calib-data, e.g. bundled:train")
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))

    def pair(self) -> tuple[str, str]:
        """Sender and receiver ids: as given, else the parent package's, else its registry entry's."""
        if self.sender is not None and self.receiver is not None:
            return self.sender, self.receiver
        from heterofold_hub.adapter.config import CONFIG_NAME
        from heterofold_hub.adapter.save_and_load import read_config
        from heterofold_hub.hub.registry import open_registry

        if (Path(self.adapter) / CONFIG_NAME).is_file():
            config = read_config(Path(self.adapter) / CONFIG_NAME)
            named = config.sender, config.receiver
        else:
            entry = next((e for e in open_registry(self.registry).entries() if e.repo_id == self.adapter), None)
            if entry is None:
                raise HeteroFoldError(f"--adapter {self.adapter!r} is neither an adapter package folder nor a repo id "
                                      "in the registry; pass a folder (`hf-fold pull REPO` prints one) or a "
                                      "registered repo id (`hf-fold list`).")
            named = entry.sender.id, entry.receiver.id
        return self.sender or named[0], self.receiver or named[1]


def summary(adapter, parent_source: str) -> Table:
    """What was made: rank, shapes, multiply-adds per row and the calibration error, one row."""
    c, rank = adapter.config, adapter.rank
    full, low = c.in_features * c.out_features, rank * (c.in_features + c.out_features)
    table = Table(title=f"{c.sender} -> {c.receiver}: low rank of {parent_source}",
                  caption="MACs: multiply-adds per row and map; error: squared error on the calibration inputs as a "
                  "share of the map's output variance, mean over layers")
    for column in ("rank", "map", "MACs full", "MACs low rank", "keys error", "values error"):
        table.add_column(column, justify="right")
    error = c.extra["calibration_error"]
    table.add_row(str(rank), f"[{c.in_features}, {c.out_features}]", str(full), f"{low} ({low / full:.0%})",
                  f"{error['k']:.4f}", f"{error['v']:.4f}")
    return table


def run_compress(args: CompressArgs, console: Console, messages: Console = conventions.messages):
    """Factor, score on ``--heldout`` into ``metrics.json`` (unless ``--eval-windows 0``), print the summary and the
    scores on ``console`` (data) and what was read and written on ``messages``."""
    args.validate()
    from heterofold_hub import __version__
    from heterofold_hub.adapter.config import METRICS_NAME
    from heterofold_hub.adapter.save_and_load import save_adapter
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.fidelity import results_table, score_package
    from heterofold_hub.hub.composition import held_out_problem
    from heterofold_hub.hub.resolve import resolve_adapter
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.methods.low_rank import compress, rank_problem, saves_flops, input_moments
    from heterofold_hub.progress import status

    sender_id, receiver_id = args.pair()
    with status("reading the parent adapter", messages):  # tokenizers and configs only: a bad rank fails fast
        sender, receiver = Side.load(sender_id, with_model=False), Side.load(receiver_id, with_model=False)
        found = resolve_adapter(sender, receiver, adapter=args.adapter, registry=args.registry)
    problem = rank_problem(found.adapter, args.rank) or (held_out_problem(found.adapter, args.heldout)
                                                          if args.eval_windows else None)
    if problem:
        raise UsageError(problem)
    if not saves_flops(found.adapter.config, args.rank):
        c = found.adapter.config
        messages.print(f"[yellow]warning:[/] rank {args.rank} costs {args.rank * (c.in_features + c.out_features)} "
                       f"multiply-adds per row, not fewer than the full map's {c.in_features * c.out_features}",
                       highlight=False)
    source = found.describe()
    messages.print(f"parent: {source} ({found.adapter.config.method})", highlight=False)
    scoring = args.eval_windows > 0
    with status("loading the sender" + (" and the receiver" if scoring else ""), messages):
        sender = Side.load(sender_id)
        receiver = Side.load(receiver_id) if scoring else receiver
    windows = make_windows(read_texts(args.calib_data), receiver, max_windows=args.calib_windows,
                           context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens)
    moments = input_moments(found.adapter, sender, receiver, windows, batch_size=args.batch_size)
    tokens = next(iter(moments.values())).count
    adapter = compress(found.adapter, moments, args.rank, parent_ref={"repo_id": found.repo_id, "version": found.version},
                       calibration={"data": args.calib_data, "windows": len(windows), "tokens": tokens,
                                    "context_tokens": args.context_tokens})
    adapter.config = replace(adapter.config, library_version=__version__, training_args={
        "data": args.calib_data, "calib_windows": len(windows), "context_tokens": args.context_tokens,
        "rank": args.rank, "parent": source, "heldout": args.heldout, "eval_windows": args.eval_windows})
    console.print(summary(adapter, source))
    result = None
    if scoring:
        result = score_package(sender, receiver, "low-rank", adapter, heldout=args.heldout, windows=args.eval_windows,
                               context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens,
                               batch_size=args.batch_size)
        console.print(results_table(result))
    save_adapter(adapter, args.out)
    if result is not None:
        write_json_atomic(args.out / METRICS_NAME, result)
    messages.print(f"wrote low-rank adapter package to {args.out} ({tokens} calibration tokens of {args.calib_data})"
                   + ("" if scoring else "; not scored (--eval-windows 0), so it has no metrics.json and cannot "
                      "be pushed: compress again with --eval-windows 48 to publish it"), highlight=False)
    return adapter
