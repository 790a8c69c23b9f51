"""``hf-fold compose``: two affine adapters through a pivot model become one package, scored on held-out text."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from heterofold_hub.commands import conventions
from heterofold_hub.io import output_problem
from heterofold_hub.errors import HeteroFoldError, UsageError


@dataclass(kw_only=True)
class ComposeArgs:
    sender: str
    receiver: str
    via: str  # the pivot model's id (--pivot)
    out: Path
    first: Path | None = None  # a package sender -> via (default: the registry's)
    second: Path | None = None  # a package via -> receiver (default: the registry's)
    heldout: str = "bundled:unseen"
    eval_windows: int = 48  # 0: do not score (the package then cannot be pushed)
    context_tokens: int = 512
    continuation_tokens: int = 64
    batch_size: int = 8
    registry: Path | None = None
    hub_dir: Path | None = None
    token: str | None = None
    rematch_data: str | None = None  # calibration text: recolour the first leg's pivot K/V to the pivot's moments
    rematch_windows: int = 64

    def validate(self) -> None:
        from heterofold_hub.adapter.config import CONFIG_NAME

        problems = []
        if len({self.sender, self.receiver, self.via}) < 3:
            problems.append(f"--sender {self.sender!r}, --receiver {self.receiver!r} and --pivot {self.via!r} must be three "
                            "different models")
        problem = output_problem("--out", self.out, folder=True)
        if problem:
            problems.append(problem)
        elif self.out.is_dir() and any(self.out.iterdir()):
            problems.append(f"--out: {self.out} already exists and is not empty; choose a new folder (a package, once "
                            "written, is not overwritten)")
        for flag, folder in (("--first", self.first), ("--second", self.second)):
            if folder is not None and not (folder / CONFIG_NAME).is_file():
                problems.append(f"{flag}: {folder} is not an adapter package (no {CONFIG_NAME})")
        if self.eval_windows < 0 or self.eval_windows == 1:
            problems.append(f"--eval-windows: {self.eval_windows}; give 0 (do not score) or at least 2")
        if self.rematch_windows < 1:
            problems.append(f"--rematch-windows: {self.rematch_windows} is too small (minimum 1)")
        if self.rematch_data is not None and self.eval_windows > 0:
            from heterofold_hub.data.texts import trained_on_eval_text

            if trained_on_eval_text(self.rematch_data, self.heldout):
                problems.append(f"--rematch-data {self.rematch_data!r} shares text with --heldout {self.heldout!r}; "
                                "held-out text must never be fitted on. Pass other --rematch-data.")
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))


def pivot_features(args: ComposeArgs, sender):
    """Calibration features sender -> pivot on ``--rematch-data`` (the pivot model is loaded for this alone)."""
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.methods.features import collect

    pivot = Side.load(args.via)
    windows = make_windows(read_texts(args.rematch_data), pivot, max_windows=args.rematch_windows,
                           context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens)
    return collect(sender, pivot, windows, batch_size=args.batch_size)


def run_compose(args: ComposeArgs, console: Console, messages: Console = conventions.messages) -> dict | None:
    """Compose, print the score table on ``console`` (data) and what was composed and written on ``messages``."""
    args.validate()
    from heterofold_hub import __version__
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.hub.registry import open_registry
    from heterofold_hub.adapter.config import METRICS_NAME
    from heterofold_hub.adapter.save_and_load import save_adapter
    from heterofold_hub.evaluation.fidelity import results_table, score_package
    from heterofold_hub.hub.composition import compose_path, held_out_problem
    from heterofold_hub.progress import status

    scoring = args.eval_windows > 0
    with status("loading models", messages):
        sender = Side.load(args.sender, with_model=scoring or args.rematch_data is not None)
        receiver = Side.load(args.receiver, with_model=scoring)
    rematch_on = None if args.rematch_data is None else pivot_features(args, sender)
    composed = compose_path(sender, receiver, via=args.via, registry=open_registry(args.registry), first=args.first,
                            second=args.second, hub_dir=args.hub_dir, token=args.token, rematch_on=rematch_on)
    del rematch_on  # the pivot's features (GBs for a real pivot) are folded in: free them before scoring
    for parent in composed.parents:
        messages.print(f"parent: {parent.describe()}", highlight=False)
    messages.print(f"composed: {len(composed.config.layer_sources[0])} sender layers per receiver layer",
                  highlight=False)
    result = None
    if scoring:
        problem = held_out_problem(composed, args.heldout)
        if problem:
            raise UsageError(problem)
        result = score_package(sender, receiver, "composed", composed, heldout=args.heldout, windows=args.eval_windows,
                               context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens,
                               batch_size=args.batch_size)
        console.print(results_table(result))
    rematched = {} if args.rematch_data is None else {"data": args.rematch_data, "rematch_windows": args.rematch_windows}
    composed.config = replace(composed.config, library_version=__version__, training_args={
        "via": args.via, "heldout": args.heldout, "eval_windows": args.eval_windows,
        "context_tokens": args.context_tokens, "continuation_tokens": args.continuation_tokens, **rematched})
    save_adapter(composed, args.out)
    if result is not None:
        write_json_atomic(args.out / METRICS_NAME, result)
    messages.print(f"wrote composed adapter package to {args.out}" + ("" if scoring else " (not scored: "
                  "--eval-windows 0; score it with `hf-fold eval --adapter` before pushing)"), highlight=False)
    return result
