"""``hf-fold bench``: transfer vs native prefill timings for a pair, as a table, JSON and a plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from rich.table import Table

from heterofold_hub.commands import conventions
from heterofold_hub.io import output_problem
from heterofold_hub.commands.placement import dtype_problems, map_dtype_problems, map_dtype_row, place, with_map_dtype
from heterofold_hub.commands.transfer_args import TransferArgs
from heterofold_hub.errors import UsageError
from heterofold_hub.zoo import DEMO_PAIR

if TYPE_CHECKING:
    from rich.console import Console

METHODS = ("heterofold", "kv-ridge", "dense-latent")
DEFAULT_CONTEXTS = "256,512,1024,2048,4096"


@dataclass(kw_only=True)
class BenchArgs(TransferArgs):
    """``hf-fold bench``'s arguments; the defaults here are the command line's."""

    sender: str | None = None  # None: the demo pair, both directions
    receiver: str | None = None
    contexts: list[int] = field(default_factory=lambda: parse_contexts(DEFAULT_CONTEXTS))
    repeats: int = 5
    data: str = "bundled:unseen"  # the held-out split eval scores on: one default evaluation text
    json_path: Path | None = None
    plot_path: Path | None = None
    device: str = "auto"  # auto: cuda when there is one
    dtype: str = "float32"
    map_dtype: str | None = None  # also time heterofold (and each package) with its maps' products in this dtype
    pivot: str | None = None  # "auto" or a model id: also time the composed path sender -> pivot -> receiver
    query: str | None = None  # the receiver's prompt, for selections that read one (query, attention)
    both_ways: bool = False  # also time receiver -> sender (with the adapter registered for that direction)
    adapters: list[Path] = field(default_factory=list)  # packages timed beside the methods, each a row named by its folder

    def validate(self) -> None:
        problems = dtype_problems(self.dtype) + map_dtype_problems(self.map_dtype, self.dtype)
        transfer = self.transfer_problems()
        problems += transfer
        if not transfer:
            settings = self.transfer_config()
            from heterofold_hub.transfer.selects import needs_query

            if needs_query(settings.select) and settings.active and self.query is None:
                problems.append(f"--select {settings.select} reads the receiver's prompt: give it with --query TEXT")
            elif needs_query(settings.select) and settings.active and not self.query.strip():
                problems.append(f"--query {self.query!r}: --select {settings.select} reads the receiver's prompt, and an "
                                "empty one gives it nothing to match; give the question the receiver answers, e.g. "
                                "--query 'What is the code of amber?'")
            if settings.select == "oracle":
                problems.append("--select oracle needs the facts' character spans, which a bench text has none of; "
                                "choose a strategy that reads the text or a --query")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            problems.append(f"--device: {self.device!r}; choose auto, cpu, cuda or cuda:N")
        elif self.device.startswith("cuda") and not cuda_available():
            problems.append(f"--device: {self.device!r} but this torch sees no CUDA device; use --device cpu")
        if (self.sender is None) != (self.receiver is None):
            problems.append("--sender and --receiver: give both, or neither for the demo pair in both directions")
        if self.pivot is not None and self.sender is None:
            problems.append("--pivot: give --sender and --receiver too (the demo pair has direct adapters only)")
        if not self.contexts or any(n < 8 for n in self.contexts):
            problems.append(f"--contexts: {self.contexts} must be receiver token counts of at least 8, e.g. 512,2048")
        if self.repeats < 1:
            problems.append(f"--repeats: {self.repeats} is too small (minimum 1)")
        problems += self.package_problems()
        problems += [p for p in (output_problem("--json", self.json_path), output_problem("--plot", self.plot_path)) if p]
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))

    def package_problems(self) -> list[str]:
        """What is wrong with ``--adapter``: not a package, names that clash, or no single direction to time it in."""
        from heterofold_hub.adapter.config import CONFIG_NAME

        if not self.adapters:
            return []
        problems = [f"--adapter: {folder} is not an adapter package (no {CONFIG_NAME}); pass a folder of "
                    "`hf-fold compress`, `compose` or `train`" for folder in self.adapters
                    if not (Path(folder) / CONFIG_NAME).is_file()]
        names = [package_name(folder) for folder in self.adapters]
        clashes = sorted({n for n in names if names.count(n) > 1 or n in (*METHODS, "composed")})
        if clashes:
            problems.append(f"--adapter: folder names {clashes} repeat or clash with a method's row; each package's "
                            "row is named by its folder, so rename or move the folders")
        if self.sender is None or self.both_ways:
            problems.append("--adapter: a package maps one direction; give its --sender and --receiver, without "
                            "--both-ways")
        return problems

    def directions(self) -> list[tuple[str, str]]:
        if self.sender is None:
            return [DEMO_PAIR, DEMO_PAIR[::-1]]
        return [(self.sender, self.receiver)] + ([(self.receiver, self.sender)] if self.both_ways else [])


def cuda_available() -> bool:
    import torch  # here, not at the top: `hf-fold --help` must not pay for torch

    return torch.cuda.is_available()


def package_name(folder) -> str:
    """The row a ``--adapter`` package is timed under: its folder's name."""
    return Path(folder).resolve().name


def load_packages(sender, receiver, folders: list[Path]) -> tuple[dict, dict]:
    """``--adapter`` packages, checked against the pair: ``({row: adapter}, {row: ResolvedAdapter})``."""
    from heterofold_hub.hub.resolve import resolve_adapter

    found = {package_name(folder): resolve_adapter(sender, receiver, adapter=folder) for folder in folders}
    return {name: f.adapter for name, f in found.items()}, found


def packages_table(result: dict, names: list[str]) -> Table:
    """Each timed adapter's map and hand-off, heterofold's beside the packages, per context: the trade-off table."""
    table = Table(title="each adapter's hand-off", caption="map: its transfer, ms; end-to-end: prefill / (plan + map); "
                  "map only: prefill / map")
    for column in ("context", "adapter", "map ms", "end-to-end", "map only"):
        table.add_column(column, justify="right")
    for row in result["rows"]:
        for name in ("heterofold", *names):
            table.add_row(str(row["context_tokens"]), name, f"{row['transfer_s'][name] * 1e3:.2f}",
                          f"{row['speedup']['end_to_end'][name]:.1f}x", f"{row['speedup']['map_only'][name]:.1f}x")
    return table


def parse_contexts(value: str) -> list[int]:
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--contexts {value!r}: give comma-separated token counts, e.g. 512,2048") from None


def bench_adapters(sender, receiver, pivot: str | None = None) -> tuple[dict, dict]:
    """The registered HeteroFold adapter of the pair, plus both baselines fitted on a little calibration text
    (their transfer cost does not depend on how well they were fitted); with ``pivot``, the composed path too.
    Also where the resolved ones came from (name -> ResolvedAdapter), for the results' provenance."""
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.methods.fitting import fit_methods
    from heterofold_hub.hub.registry import NoAdapterError
    from heterofold_hub.hub.resolve import resolve_adapter, resolve_path
    from heterofold_hub.data.windows import make_windows

    calib = make_windows(read_texts("bundled:calib"), receiver, context_tokens=256, continuation_tokens=32, max_windows=16)
    adapters = fit_methods(sender, receiver, ["kv-ridge", "dense-latent"], calib,
                           options={"dense-latent": {"mse_steps": 50, "nll_steps": 5}})
    origins = {}
    try:
        origins["heterofold"] = resolve_adapter(sender, receiver)
        adapters = {"heterofold": origins["heterofold"].adapter, **adapters}
    except NoAdapterError:  # no registered adapter: time the recolor map, which has exactly its cost
        adapters = {"heterofold": fit_methods(sender, receiver, ["recolor"], calib)["recolor"], **adapters}
    if pivot is not None:
        origins["composed"] = resolve_path(sender, receiver, pivot=pivot)
        adapters["composed"] = origins["composed"].adapter
    return adapters, origins


def results_tables(result: dict) -> tuple[Table, Table]:
    """Two tables that fit a terminal: the times, and what they mean for heterofold's hand-off."""
    from heterofold_hub.evaluation.bench import WITH_RECOMPUTE  # here: `hf-fold --help` must not pay for torch
    from heterofold_hub.evaluation.reports import recompute_phrase

    times = Table(title=f"{result['sender']} -> {result['receiver']}: milliseconds, median of {result['repeats']} "
                        f"({result['threads']} CPU threads)", caption="plan: on a warm pipeline (a second hand-off); "
                  "plan cold: a new pipeline's first; recompute: heterofold's, when timed (its call minus the map); sender extra: "
                  "the sender's surprisal pass that content selection reads; each method: its map")
    methods, cpp = timed_methods(result), ["llama.cpp"] if "llamacpp" in result else []  # its columns when timed
    for column in ("context", "prefill", *cpp, "plan", "plan cold", "recompute", "sender extra", "copy", *methods):
        times.add_column(column, justify="right")
    recomputed = result.get("recompute")
    title = "heterofold hand-off" + ("" if not recomputed else ", " + recompute_phrase(recomputed))
    variant = ["with recompute"] if recomputed else []  # heterofold+recompute's end-to-end, beside the pure transfer's
    ratios = Table(title=title, caption="end-to-end: prefill / (plan + map), the headline; with recompute: prefill / "
                   "(plan + map + recompute + sender extra); "
                   "map only: prefill / map; cold: end-to-end with a new pipeline's plan; plan / map: the plan's cost "
                   "beside the map's; vs copy: map / cache copy; peak: temporary memory of one map, in receiver layers "
                   "(keys + values)")
    if cpp:
        times.caption += f"; llama.cpp: its prefill of the GGUF ({result['llamacpp']['version']}, its own tokens)"
        ratios.caption += "; vs llama.cpp: llama.cpp's prefill / (plan + map)"
    for column in ("context", "end-to-end", *variant, *(f"vs {c}" for c in cpp), "map only", "cold", "plan / map",
                   "vs copy", "peak"):
        ratios.add_column(column, justify="right")
    for row in result["rows"]:
        t, hf, speedup = row["transfer_s"], row["transfer_s"]["heterofold"], row["speedup"]
        recompute, extra = (row.get(k, {}).get(WITH_RECOMPUTE) for k in ("recompute_s", "sender_extra_s"))
        times.add_row(str(row["context_tokens"]),
                      f"{row['prefill_s'] * 1e3:.1f}", *(f"{row['llamacpp_prefill_s'] * 1e3:.1f}" for _ in cpp),
                      *(f"{row[k] * 1e3:.1f}" for k in ("plan_s", "plan_cold_s")),
                      *("-" if x is None else f"{x * 1e3:.1f}" for x in (recompute, extra)),
                      f"{row['copy_s'] * 1e3:.2f}", *(f"{t[m] * 1e3:.2f}" for m in methods))
        ratios.add_row(str(row["context_tokens"]),
                       f"{speedup['end_to_end']['heterofold']:.1f}x",
                       *(f"{speedup['end_to_end'][WITH_RECOMPUTE]:.1f}x" for _ in variant),
                       *(f"{speedup['vs_llamacpp']['heterofold']:.1f}x" for _ in cpp),
                       *(f"{speedup[k]['heterofold']:.1f}x" for k in ("map_only", "cold")),
                       f"{row['plan_s'] / hf:.0%}", f"{hf / row['copy_s']:.1f}x",
                       f"{row['peak_extra_bytes']['heterofold'] / row['layer_bytes']:.2f}")
    return times, ratios


def timed_methods(result: dict) -> list[str]:
    """The methods a bench result timed, in table order (the composed path last, when there is one)."""
    timed = result["rows"][0]["transfer_s"] if result["rows"] else {}
    return [m for m in METHODS if m in timed] + [m for m in timed if m not in METHODS]


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 9), squeeze=False)
    for ax, result in zip(axes[1], results):
        plot_speedups(ax, result)
    for ax, result in zip(axes[0], results):
        ctx = [r["context_tokens"] for r in result["rows"]]
        ax.plot(ctx, [r["prefill_s"] * 1e3 for r in result["rows"]], "o-", label="native prefill")
        if "llamacpp" in result:
            ax.plot(ctx, [r["llamacpp_prefill_s"] * 1e3 for r in result["rows"]], "o-", label="llama.cpp prefill")
        for m in timed_methods(result):
            ax.plot(ctx, [r["transfer_s"][m] * 1e3 for r in result["rows"]], "o-", label=f"transfer: {m}")
        ax.plot(ctx, [r["end_to_end_s"]["heterofold"] * 1e3 for r in result["rows"]], ":",
                label="heterofold hand-off (plan + map)")
        ax.plot(ctx, [r["copy_s"] * 1e3 for r in result["rows"]], "k--", label="cache copy (floor)")
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="context tokens (receiver)", ylabel="ms",
               title=f"{_short(result['sender'])} -> {_short(result['receiver'])}")
        ax.set_xticks(ctx, [str(n) for n in ctx])
        ax.minorticks_off()
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _short(model_id: str) -> str:
    """A model id's name without its owner or quantization suffix, for plot titles (``gguf/gemma3-270m-q4_k_m``:
    ``gemma3-270m``)."""
    name = model_id.split("/")[-1]
    return name.split("-q4")[0].split("-instruct")[0]


def plot_speedups(ax, result: dict) -> None:
    """Heterofold's speed-up over native prefill by context: end-to-end (the hand-off), cold and map only."""
    ctx = [r["context_tokens"] for r in result["rows"]]
    for key, style, label in (("end_to_end", "o-", "end-to-end: plan + map"),
                              ("cold", "s:", "end-to-end, a new pipeline's plan"), ("map_only", "o--", "map only")):
        ax.plot(ctx, [r["speedup"][key]["heterofold"] for r in result["rows"]], style, label=label)
    variant = next(iter(result["rows"][0].get("recompute_of", {})), None) if result["rows"] else None
    if variant is not None:
        ax.plot(ctx, [r["speedup"]["end_to_end"][variant] for r in result["rows"]], "d-",
                label="end-to-end with recompute (+ recompute + sender extra)")
    if "llamacpp" in result:
        ax.plot(ctx, [r["speedup"]["vs_llamacpp"]["heterofold"] for r in result["rows"]], "^-",
                label="end-to-end vs llama.cpp's prefill")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="context tokens (receiver)", ylabel="x faster than native prefill", ylim=(0, None),
           title=f"{_short(result['sender'])} -> {_short(result['receiver'])}: heterofold speed-up")
    ax.set_xticks(ctx, [str(n) for n in ctx])
    ax.minorticks_off()
    ax.legend(fontsize=8)


def run_bench_command(args: BenchArgs, console: Console, messages: Console = conventions.messages) -> list[dict]:
    """Time, print the tables on ``console`` (data) and warnings and what was written on ``messages``."""
    args.validate()
    from heterofold_hub.commands.evaluate import check_repair_layers

    check_repair_layers([receiver for _, receiver in args.directions()], args.repair_layers)
    from heterofold_hub.progress import progress_bar, status

    from heterofold_hub.evaluation.bench import run_bench
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.evaluation.provenance import adapter_record, provenance

    texts = read_texts(args.data)
    results = []
    for sender_id, receiver_id in args.directions():
        with status(f"loading {sender_id} -> {receiver_id} and fitting the baselines", messages):
            sender, receiver = Side.load(sender_id), Side.load(receiver_id)
            adapters, origins = bench_adapters(sender, receiver, args.pivot)  # fitted in fp32 on the CPU, then moved
            packages, package_origins = load_packages(sender, receiver, args.adapters)
            adapters, origins = {**adapters, **packages}, {**origins, **package_origins}
            records = {name: adapter_record(adapter, origins.get(name)) for name, adapter in adapters.items()}
            device = args.device if args.device != "auto" else ("cuda" if cuda_available() else "cpu")
            adapters = place((sender, receiver), adapters, dtype=args.dtype, device=device)
            narrow = [map_dtype_row(name, args.map_dtype) for name in ("heterofold", *packages)] if args.map_dtype else []
            adapters = with_map_dtype(adapters, ["heterofold", *packages], args.map_dtype)
            records.update({row: {**records[name], "map_dtype": args.map_dtype}
                            for name, row in zip(("heterofold", *packages), narrow)})
        made = provenance(records)  # before timing: the commit it records is the code that ran, whatever lands meanwhile
        with progress_bar(console=messages) as bar:
            task = bar.add_task(f"timing {sender_id} -> {receiver_id}", total=len(args.contexts))
            result = run_bench(sender, receiver, adapters, texts, args.contexts, repeats=args.repeats,
                               progress=lambda: bar.advance(task), recompute=args.transfer_config(), query=args.query)
        result["provenance"] = made
        console.print(*results_tables(result))
        if args.adapters or narrow:
            console.print(packages_table(result, [*packages, *narrow]))
        for warning in result["checks"]["warnings"]:
            messages.print(f"[yellow]warning:[/] {warning}", highlight=False)
        for skip in result["skipped"]:
            messages.print(f"[yellow]skipped {skip['context_tokens']} tokens:[/] {skip['reason']}", highlight=False)
        results.append(result)
    if args.json_path:
        write_json_atomic(args.json_path, results[0] if len(results) == 1 else {"directions": results})
        messages.print(f"wrote {args.json_path}", highlight=False)
    if args.plot_path:
        plot(results, args.plot_path)
        messages.print(f"wrote {args.plot_path}", highlight=False)
    return results
