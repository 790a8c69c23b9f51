"""``hf-fold eval --task retrieval``: arguments, their checks, the run, the table, JSON and plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from rich.table import Table

from heterofold_hub.commands.evaluate import DEFAULT_METHODS
from heterofold_hub.commands import conventions
from heterofold_hub.commands.transfer_args import TransferArgs
from heterofold_hub.errors import UsageError
from heterofold_hub.zoo import DEMO_PAIR

if TYPE_CHECKING:
    from rich.console import Console

MIN_LENGTH = 256  # the longest facts block plus a question takes about 170 receiver tokens on the demo models
DEFAULT_LENGTHS = "512,768,1024"


def parse_lengths(value: str) -> list[int | str]:
    """``"512,1024"`` -> ``[512, 1024]``; a piece that is not an integer stays a string for ``validate`` to report."""
    out: list[int | str] = []
    for part in (p.strip() for p in str(value).split(",")):
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            out.append(part)
    return out


@dataclass(kw_only=True)
class RetrievalArgs(TransferArgs):
    """``hf-fold eval --task retrieval``'s arguments; the defaults here are the command line's."""

    sender: str = DEMO_PAIR[0]
    receiver: str = DEMO_PAIR[1]
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    data: str = "bundled:unseen"  # held-out text the filler comes from
    calib_data: str = "bundled:calib"  # text the methods are fitted on
    lengths: list = field(default_factory=lambda: parse_lengths(DEFAULT_LENGTHS))  # receiver tokens per prompt
    docs: int = 48  # prompts per length
    context_tokens: int = 512  # calibration window sizes, as in `hf-fold eval`
    continuation_tokens: int = 64
    calib_windows: int = 64
    batch_size: int = 8
    seed: int = 0
    json_path: Path | None = None
    plot_path: Path | None = None
    adapters: list[Path] = field(default_factory=list)  # trained adapter packages scored beside the methods
    registered: bool = True  # with no --adapter, also score the adapter registry.json lists for the pair
    pivot: str | None = None  # "auto" or a model id: with no direct adapter, score the composed path
    question_by: str = "receiver"  # the hand-off: the receiver reads the question itself after the mapped cache

    def validate(self) -> None:
        """Every argument problem at once, phrased in flags (before any model is loaded)."""
        from heterofold_hub.io import output_problem
        from heterofold_hub.commands.evaluate import shared_problems
        problems = shared_problems(self.sender, self.receiver, self.methods, self.adapters, registered=self.registered,
                                   pivot=self.pivot)
        if self.question_by not in ("receiver", "sender"):
            problems.append(f"--question-by: {self.question_by!r}; choose receiver (the hand-off: the receiver reads "
                            "its own question) or sender (the question is transferred with the context)")
        transfer = self.transfer_problems()
        problems += transfer
        if not transfer:
            config = self.transfer_config()
            if config.reads_prompt and self.question_by != "receiver":
                problems.append(f"--select {self.select}: reads the receiver's question, so it needs --question-by receiver")
            if config.select == "oracle":
                problems.append("--select oracle: needs answer spans, which this command does not pass; use "
                                "the harness's handoff stage (benchmarks/handoff.py) for the oracle")
        bad = [n for n in self.lengths if not isinstance(n, int) or n < MIN_LENGTH]
        if not self.lengths or bad:
            problems.append(f"--lengths: {', '.join(map(str, bad)) or 'none given'}: give comma-separated receiver "
                            f"token counts of at least {MIN_LENGTH}, e.g. {DEFAULT_LENGTHS}")
        elif len(set(self.lengths)) != len(self.lengths):
            problems.append(f"--lengths: {self.lengths} repeats a length; give each once")
        for flag, value, low in (("--docs", self.docs, 1), ("--context-tokens", self.context_tokens, 2),
                                 ("--continuation-tokens", self.continuation_tokens, 1),
                                 ("--calib-windows", self.calib_windows, 1), ("--batch-size", self.batch_size, 1)):
            if value < low:
                problems.append(f"{flag}: {value} is too small (minimum {low})")
        if self.plot_path is not None and Path(self.plot_path).suffix.lower() != ".png":
            problems.append(f"--plot: {self.plot_path} must be a .png file")
        problems += [p for p in (output_problem("--json", self.json_path), output_problem("--plot", self.plot_path)) if p]
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))


def _cell(row: dict, reference: bool) -> str:
    if reference:
        return f"{row['accuracy']:.3f}"
    return f"{row['accuracy']:.3f} ({'—' if row['kept'] is None else format(row['kept'], '.2f')})"


def results_table(result: dict) -> Table:
    """Rows: methods; columns: lengths; cells: exact-match accuracy (kept share of native accuracy)."""
    from heterofold_hub.evaluation.retrieval import REFERENCES
    from heterofold_hub.evaluation.reports import recompute_phrase

    recompute = result.get("recompute")
    how = f"question read by the {result.get('question_by', 'sender')}" + (
        "" if not recompute else ", " + recompute_phrase(recompute))
    table = Table(title=f"{result['sender']} -> {result['receiver']}: retrieval exact-match accuracy (kept = accuracy "
                        f"/ native accuracy), {result['docs']} docs per length, {how}")
    table.add_column("method")
    for length in result["lengths"]:
        table.add_column(f"{length} tok", justify="right")
    table.add_column("digits", justify="right")
    for name, rows in result["methods"].items():
        digits = sum(r["digit_accuracy"] for r in rows.values()) / len(rows)
        table.add_row(name, *(_cell(rows[str(n)], name in REFERENCES) for n in result["lengths"]), f"{digits:.3f}")
    se = max(r["accuracy_se"] for rows in result["methods"].values() for r in rows.values())
    notes = [f"standard errors (binomial) up to {se:.3f}, in the JSON",
             "digits: share of answer digits reproduced in place, mean over lengths (chance about 0.1)"]
    qualifying = result["qualifying_lengths"]
    gap = f"native - no-context >= {result['qualifying_gap']:.2f}"
    if qualifying:
        kept = result["kept_on_qualifying"].get("heterofold")
        extra = "" if kept is None else "; heterofold keeps " + ", ".join(
            f"{'—' if k is None else format(k, '.2f')} at {n}" for n, k in kept.items())
        notes.insert(0, f"lengths where {gap}: {', '.join(map(str, qualifying))}{extra}")
    else:
        notes.insert(0, f"no length has {gap}, so no length qualifies for a kept-share check")
    table.caption = "\n".join(notes)
    return table


def plot(result: dict, path: Path) -> None:
    """Exact-match accuracy (left) and per-digit accuracy (right) against context length, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = result["lengths"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, rows in result["methods"].items():
        style = {"native": "k-", "no-context": "k--"}.get(name, "-")
        acc = [rows[str(n)]["accuracy"] for n in lengths]
        se = [rows[str(n)]["accuracy_se"] for n in lengths]
        axes[0].errorbar(lengths, acc, yerr=se, fmt=style, capsize=3, label=name, marker="o")
        axes[1].plot(lengths, [rows[str(n)]["digit_accuracy"] for n in lengths], style, marker="o", label=name)
    title = f"{result['sender'].split('/')[-1]} -> {result['receiver'].split('/')[-1]}"
    axes[0].set(ylim=(-0.02, 1.02), ylabel="exact-match accuracy", title=f"{title}: retrieval, {result['docs']} docs/length")
    axes[1].set(ylim=(-0.02, 1.02), ylabel="answer digits right (in place)", title="per-digit accuracy (chance ~0.1)")
    for ax in axes:
        ax.set_xlabel("context length (receiver tokens)")
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


def run_retrieval(args: RetrievalArgs, console: Console, messages: Console = conventions.messages) -> dict:
    """Score, print the table on ``console`` (data) and say what was written on ``messages``."""
    args.validate()
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.evaluation.retrieval import evaluate_retrieval, filler_texts, known_facts, make_prompts
    from heterofold_hub.commands.evaluate import check_repair_layers, disjoint_texts, scored_adapters

    check_repair_layers([args.receiver], args.repair_layers)
    from heterofold_hub.evaluation.provenance import provenance
    from heterofold_hub.progress import status

    eval_texts, calib_texts = disjoint_texts(args)
    # Facts of the eval documents must not occur in text anything was fitted or trained on: the calibration
    # text, and the bundled train split the demo models and registered adapters were trained on.
    seen = known_facts(calib_texts) | known_facts(read_texts("bundled:train"))
    with status("loading models", messages):
        sender, receiver = Side.load(args.sender), Side.load(args.receiver)
    limit = min(receiver.spec.max_positions, sender.spec.max_positions)
    too_long = [n for n in args.lengths if n > limit]
    if too_long:
        raise UsageError(f"--lengths: {too_long} exceed the {limit} positions {args.receiver!r} / "
                              f"{args.sender!r} allow; give lengths up to {limit}.")
    prompts = make_prompts(filler_texts(eval_texts), receiver, args.lengths, args.docs, seed=args.seed, exclude=seen)
    longest = max(len(sender.tokenizer(p.prompt, verbose=False)["input_ids"]) for group in prompts.values() for p in group)
    if longest > sender.spec.max_positions:  # the sender may need more tokens than the receiver for the same text
        raise UsageError(f"--lengths: a prompt of {max(args.lengths)} receiver tokens is {longest} tokens for "
                              f"{args.sender!r}, which allows {sender.spec.max_positions}; give shorter lengths.")
    scored = scored_adapters(args, sender, receiver, calib_texts)
    made = provenance(scored.records)  # before scoring: the commit it records is the code that ran
    result = evaluate_retrieval(sender, receiver, scored.adapters, prompts, batch_size=args.batch_size,
                                question_by=args.question_by, recompute=args.transfer_config())
    result.update(seed=args.seed, data=args.data, calib_data=args.calib_data,
                  calibration_windows=scored.calibration_windows, adapters=scored.sources, provenance=made)
    result = _json_safe(result)
    console.print(results_table(result))
    if args.json_path:
        write_json_atomic(args.json_path, result)
        messages.print(f"wrote {args.json_path}", highlight=False)
    if args.plot_path:
        plot(result, args.plot_path)
        messages.print(f"wrote {args.plot_path}", highlight=False)
    return result
