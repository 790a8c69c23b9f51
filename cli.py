"""``hf-fold``: the HeteroFold Hub command line (thin commands over ``heterofold_hub``)."""

from __future__ import annotations

if __name__ not in ("heterofold_hub.cli", "__main__"):  # one module, one name (docs/packaging.md)
    raise ImportError(f"Import heterofold_hub.cli, not {__name__}: the CLI is part of the heterofold_hub package (in a "
                      "checkout it is served from the repository root's cli.py; `python cli.py` runs it).")

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from heterofold_hub.commands.bench import DEFAULT_CONTEXTS, BenchArgs
from heterofold_hub.commands.compose import ComposeArgs
from heterofold_hub.commands.compress import CompressArgs
from heterofold_hub.commands.demo import DemoArgs
from heterofold_hub.commands.evaluate import DEFAULT_METHODS, EvalArgs
from heterofold_hub.commands import conventions  # its `data` console: commands have a --data option
from heterofold_hub.commands.conventions import EXIT_FAILURE, EXIT_USAGE, deprecated, renamed
from heterofold_hub.commands.hub_cli import HUB_COMMANDS, PIVOT
from heterofold_hub.commands.plain_help import PlainHelpCommand, PlainHelpGroup
from heterofold_hub.commands.retrieval import DEFAULT_LENGTHS, RetrievalArgs
from heterofold_hub.errors import HeteroFoldError, UsageError
from heterofold_hub.zoo import DEMO_PAIR
from heterofold_hub.trainers.train import CALIB_WINDOWS, TrainArgs

# Every default lives in its command's arguments dataclass (EvalArgs, TrainArgs, ...); the options below read them.

app = typer.Typer(help="Share KV caches between LLMs of different families.", no_args_is_help=True,
                  pretty_exceptions_enable=False, cls=PlainHelpGroup,
                  context_settings={"help_option_names": ["-h", "--help"]})  # inherited by every command
COMMAND = {"cls": PlainHelpCommand}  # plain labels in every command's --help
DEBUG = {"on": False}

# Options that mean the same in every command (typer lets one OptionInfo serve several commands).
SENDER = typer.Option(DEMO_PAIR[0], help="Sender model id or local folder.")
RECEIVER = typer.Option(DEMO_PAIR[1], help="Receiver model id or local folder.")
CONTEXT_TOKENS = typer.Option(EvalArgs.context_tokens, help="Receiver tokens of context per window.")
CONTINUATION_TOKENS = typer.Option(EvalArgs.continuation_tokens, help="Receiver tokens scored after the context.")
BATCH_SIZE = typer.Option(EvalArgs.batch_size, help="Windows per forward pass.")
SEED = typer.Option(EvalArgs.seed, help="Seed: same seed, same result (on CPU).")
# The hand-off's recompute (eval, bench): EvalArgs and BenchArgs share these defaults.
RECOMPUTE = typer.Option(EvalArgs.recompute, help="Share of the context's mapped positions the receiver recomputes "
                         "natively after the map (0: pure transfer, 1: native prefill).")
SELECT = typer.Option(EvalArgs.select, help="Which positions --recompute takes (default content): content, digits, deviation, tail, "
                      "chunk-start; statement, keywords, query and attention read the prompt (retrieval's question, bench's --query).")
REPAIR_LAYERS = typer.Option(EvalArgs.repair_layers, help="The receiver's first layers recomputed for every position.")
MAPPED_KEY_SCALE = typer.Option(EvalArgs.mapped_key_scale, help="Factor on the keys of the rows left mapped after the "
                                "recompute (below 1 they draw less attention from the receiver's own rows; 1: unchanged).")
MAP_DTYPE = typer.Option(None, help="Also score/time each adapter with only its maps' matrix products in this dtype "
                         "(bfloat16: about half their time on CPUs with AVX512-BF16 or AMX), a row beside it; the "
                         "models and caches keep --dtype.")


def _print_version(value: bool) -> None:
    if value:
        from heterofold_hub import __version__

        conventions.data.print(f"hf-fold {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
):
    DEBUG["on"] = debug or bool(os.environ.get("HF_FOLD_DEBUG"))


@app.command("demo", **COMMAND)
def demo_command(
    sender: str = typer.Option(DemoArgs.sender, help="Sender model id, local folder or GGUF id."),
    receiver: str = typer.Option(DemoArgs.receiver, help="Receiver model id, local folder or GGUF id."),
    helpers: int = typer.Option(DemoArgs.helpers, help="Filler functions after the facts (38: about 900 tokens)."),
    repeats: int = typer.Option(DemoArgs.repeats, help="Timed rounds per condition; the median is shown."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the rows as JSON to this file."),
):
    """Run one real hand-off: SmolLM2-135M reads a document, Gemma 3 270M answers questions about it after its own
    prefill, from the pure transfer, and with the recommended setting, with what each cost (a few minutes the first
    time, which converts the GGUF files once).

    Examples:

      hf-fold demo

      hf-fold demo --helpers 80 --json demo.json
    """
    import json

    from heterofold_hub.commands.demo import demo_table, run_demo

    args = DemoArgs(sender=sender, receiver=receiver, helpers=helpers, repeats=repeats)
    args.validate()
    result = run_demo(args, log=lambda line: conventions.messages.print(escape(line), highlight=False))
    conventions.data.print(demo_table(result))
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")


@app.command("eval", **COMMAND)
def eval_command(
    sender: str = SENDER,
    receiver: str = RECEIVER,
    task: str = typer.Option("fidelity", help="fidelity: continuation NLL/KL/top-1 against native prefill | "
                             "retrieval: exact-match answers to a question about facts early in a long context."),
    methods: str = typer.Option(",".join(DEFAULT_METHODS), help="Comma-separated transfer methods to fit and score; "
                                "'' with --adapter scores the packages alone."),
    data: str = typer.Option(EvalArgs.data, help="Held-out text: bundled:<split> (unseen: third-party code and prose no "
                             "fit saw), a file, a folder or a JSONL file; retrieval cuts its filler from it."),
    calib_data: str = typer.Option(EvalArgs.calib_data, help="Calibration text the methods are fitted on."),
    context_tokens: int = CONTEXT_TOKENS,
    continuation_tokens: int = CONTINUATION_TOKENS,
    windows: Optional[int] = typer.Option(None, help=f"Held-out windows to score (fidelity; default {EvalArgs.windows})."),
    calib_windows: int = typer.Option(EvalArgs.calib_windows, help="Calibration windows to fit on."),
    lengths: Optional[str] = typer.Option(None, help="Retrieval: comma-separated prompt lengths in receiver tokens "
                                          f"(default {DEFAULT_LENGTHS}; the demo models were trained on 1024-token sequences)."),
    docs: Optional[int] = typer.Option(None, help=f"Retrieval: documents (questions) per length (default {RetrievalArgs.docs})."),
    batch_size: int = BATCH_SIZE,
    seed: int = SEED,
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON here."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Retrieval: write a PNG plot (accuracy vs context length) here."),
    adapter: list[Path] = typer.Option([], "--adapter", help="A trained adapter package (`hf-fold train --out`) "
                                       "to score beside the methods; repeatable. Default: the adapter registry.json lists for the pair."),
    registered: bool = typer.Option(True, help="With no --adapter, also score the adapter registry.json lists for this pair."),
    pivot: Optional[str] = PIVOT,
    dtype: str = typer.Option(EvalArgs.dtype, help="Fidelity: model, cache and map dtype (float32, bfloat16, float16)."),
    map_dtype: Optional[str] = MAP_DTYPE,
    recompute: float = RECOMPUTE,
    select: Optional[str] = SELECT,
    repair_layers: int = REPAIR_LAYERS,
    mapped_key_scale: float = MAPPED_KEY_SCALE,
    question_by: str = typer.Option(RetrievalArgs.question_by, help="Retrieval: who reads the question: receiver (the "
                                    "hand-off: after the mapped cache) or sender (transferred with the context)."),
):
    """Score transfer methods against native prefill on held-out text: fidelity (default) or retrieval accuracy.

    Examples:

      hf-fold eval

      hf-fold eval --sender heterofold/tiny-qwen-code --receiver heterofold/tiny-llama-code --json out.json

      hf-fold eval --methods kv-ridge --context-tokens 256 --windows 32

      hf-fold eval --methods recolor --adapter runs/heterofold --adapter runs/kv-ridge --adapter runs/dense-latent

      hf-fold eval --task retrieval --json retrieval.json --plot retrieval.png

      hf-fold eval --task retrieval --lengths 512,1024,2048 --docs 100 --methods recolor,kv-ridge
    """
    tasks = ("fidelity", "retrieval")
    if task not in tasks:
        raise UsageError(f"--task: unknown {task!r}; choose from {', '.join(tasks)}")
    common = dict(sender=sender, receiver=receiver, methods=[m.strip() for m in methods.split(",") if m.strip()],
                  data=data, calib_data=calib_data, context_tokens=context_tokens,
                  continuation_tokens=continuation_tokens, calib_windows=calib_windows, batch_size=batch_size,
                  seed=seed, json_path=json_path, adapters=adapter, registered=registered, pivot=pivot)
    if task == "fidelity":
        given = [flag for flag, value in (("--lengths", lengths), ("--docs", docs), ("--plot", plot_path)) if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} only apply to --task retrieval; add --task retrieval or drop them")
        from heterofold_hub.commands.evaluate import run_eval

        run_eval(EvalArgs(**common, windows=EvalArgs.windows if windows is None else windows, dtype=dtype, map_dtype=map_dtype,
                          recompute=recompute, select=select, repair_layers=repair_layers,
                          mapped_key_scale=mapped_key_scale), conventions.data)
        return
    given = [flag for flag, value in (("--windows", windows), ("--dtype", dtype), ("--map-dtype", map_dtype))
             if value not in (None, EvalArgs.dtype)]
    if given:
        raise UsageError(f"{', '.join(given)}: only for --task fidelity; retrieval takes --lengths and --docs")
    from heterofold_hub.commands.retrieval import parse_lengths, run_retrieval

    args = RetrievalArgs(**common, plot_path=plot_path, lengths=parse_lengths(DEFAULT_LENGTHS if lengths is None else lengths),
                         docs=RetrievalArgs.docs if docs is None else docs, question_by=question_by,
                         recompute=recompute, select=select, repair_layers=repair_layers,
                         mapped_key_scale=mapped_key_scale)
    run_retrieval(args, conventions.data)


@app.command("train", **COMMAND)
def train_command(
    sender: str = SENDER,
    receiver: str = RECEIVER,
    data: str = typer.Option(TrainArgs.data, help="Training text: bundled:<split>, a text file, a folder or a "
                             "JSONL file ('text'), or several joined by commas. Default: the standard library's "
                             "files (no synthetic documents)."),
    heldout: str = typer.Option(TrainArgs.heldout, help="Held-out text for the final fidelity table (never trained on)."),
    out: Path = typer.Option(TrainArgs.out, help="Output folder: the adapter package."),
    method: str = typer.Option(TrainArgs.method, help="heterofold | kv-ridge | dense-latent."),
    max_steps: int = typer.Option(TrainArgs.max_steps, help="Optimizer steps of calibration."),
    context_tokens: int = typer.Option(TrainArgs.context_tokens, help="Receiver tokens of context per window."),
    continuation_tokens: int = typer.Option(TrainArgs.continuation_tokens, help="Receiver tokens scored after the context."),
    windows: int = typer.Option(TrainArgs.windows, help="Training windows cut from --data."),
    calib_windows: Optional[int] = typer.Option(None, help="Of those, the windows whose statistics fit the starting map "
                                                f"(default {CALIB_WINDOWS}, or --windows when fewer; at most --windows)."),
    eval_windows: int = typer.Option(TrainArgs.eval_windows, help="Held-out windows for the final table."),
    lr: Optional[float] = typer.Option(None, help="Peak learning rate (default: the method's own; heterofold 3e-4, "
                                       "dense-latent 2e-3)."),
    lora_rank: int = typer.Option(TrainArgs.lora_rank, help="LoRA rank of the corrections (PEFT); 0 trains full-rank corrections."),
    batch_size: int = typer.Option(TrainArgs.batch_size, help="Windows per optimizer step."),
    accumulate: int = typer.Option(TrainArgs.accumulate, help="Gradient accumulation steps."),
    precision: str = typer.Option(TrainArgs.precision, help="Lightning precision: 32-true, bf16-mixed, 16-mixed, bf16-true."),
    devices: str = typer.Option(TrainArgs.devices, help="Devices (a number or 'auto')."),
    strategy: str = typer.Option(TrainArgs.strategy, help="auto | ddp | fsdp | ddp_spawn."),
    seed: int = typer.Option(TrainArgs.seed, help="Seed: same seed, same result (on CPU)."),
    resume: bool = typer.Option(TrainArgs.resume, help="Resume from the last checkpoint in OUT/checkpoints."),
    sender_layers: str = typer.Option(TrainArgs.sender_layers, help="Sender layers the maps read: all | full (only layers whose cache "
                                      "keeps every position, so a Gemma 3 sender's default cache can be mapped)."),
    sources_per_layer: int = typer.Option(TrainArgs.sources_per_layer, help="Sender layers each receiver layer's map "
                                          "reads (the best-correlated ones, or the nearest in depth)."),
    init: str = typer.Option(TrainArgs.init, help="HeteroFold's starting map: auto (the lowest receiver KL on training batches) | "
                             "recolor (moment matching) | ridge-recolor (ridge's prediction, recoloured) | kv-ridge | "
                             "composed (two adapters through a pivot: --pivot or --init-adapter) | adapter "
                             "(go on calibrating --init-adapter, e.g. on longer windows)."),
    max_minutes: Optional[float] = typer.Option(None, help="Stop calibration after this many minutes (checkpointed)."),
    copy_weight: float = typer.Option(TrainArgs.copy_weight, help="Extra calibration-loss weight on continuation "
                                      "tokens that repeat the context (4-gram match): the tokens a receiver copies, "
                                      "as in retrieval. 0: every token weighs the same."),
    teacher_top_k: int = typer.Option(TrainArgs.teacher_top_k, help="Calibrate on the teacher's K most likely tokens "
                                      "and one bucket for the rest, computed on a window's first visit and reused, "
                                      "so revisits skip the receiver's prefill. 0: its full distribution, every step."),
    offload_features: Optional[Path] = typer.Option(None, help="Keep the training windows' sender features in files "
                                                    "under this folder instead of memory (removed when training "
                                                    "ends): memory then stays flat however many --windows."),
    pivot: Optional[str] = typer.Option(None, "--pivot", help="--init composed: the pivot whose registered adapters "
                                        "(sender -> pivot, pivot -> receiver) are composed into the starting map."),
    via: Optional[str] = typer.Option(None, "--via", hidden=True, help="Old name of --pivot."),
    init_adapter: Optional[str] = typer.Option(None, "--init-adapter", help="--init adapter: the package whose "
                                               "calibration goes on, a folder or a registered ORG/NAME[@VERSION]; "
                                               "--init composed: a package of `hf-fold compose`."),
):
    """Fit a pair adapter with receiver-logit calibration and write a complete adapter package.

    Examples:

      hf-fold train

      hf-fold train --sender heterofold/tiny-qwen-code --receiver heterofold/tiny-llama-code --out adapters/q2l

      hf-fold train --sender heterofold/tiny-llama-code --receiver gguf/gemma3-270m-q4_k_m --init composed \\
        --pivot gguf/smollm2-135m-instruct-q4_1 --max-minutes 2

      hf-fold train --init adapter --init-adapter adapters/q2l --context-tokens 1024 --out adapters/q2l-long

      hf-fold train --sender meta-llama/Llama-3.1-8B --receiver mistralai/Ministral-8B-Instruct-2410 \\
        --data corpus.jsonl --precision bf16-mixed --devices 4 --strategy ddp
    """
    from heterofold_hub.trainers.train import run_train

    pivot = renamed("--pivot", pivot, "--via", via)
    run_train(TrainArgs(sender=sender, receiver=receiver, data=data, heldout=heldout, out=out, method=method,
                        max_steps=max_steps, context_tokens=context_tokens, continuation_tokens=continuation_tokens,
                        windows=windows, eval_windows=eval_windows, lr=lr, lora_rank=lora_rank, batch_size=batch_size,
                        accumulate=accumulate, precision=precision, devices=devices, strategy=strategy, seed=seed,
                        resume=resume, sender_layers=sender_layers, sources_per_layer=sources_per_layer, init=init,
                        calib_windows=calib_windows, max_minutes=max_minutes, copy_weight=copy_weight,
                        teacher_top_k=teacher_top_k, offload_features=offload_features, via=pivot,
                        init_adapter=init_adapter), conventions.data)


@app.command("compose", **COMMAND)
def compose_command(
    sender: Optional[str] = typer.Option(None, "--sender", help="Sender model id or local folder A (required)."),
    receiver: Optional[str] = typer.Option(None, "--receiver", help="Receiver model id or local folder B (required)."),
    pivot: Optional[str] = typer.Option(None, "--pivot", help="Pivot model id P (required): composes adapters A -> P "
                                        "and P -> B."),
    old_sender: Optional[str] = typer.Argument(None, hidden=True, help="Old form of --sender."),
    old_receiver: Optional[str] = typer.Argument(None, hidden=True, help="Old form of --receiver."),
    via: Optional[str] = typer.Option(None, "--via", hidden=True, help="Old name of --pivot."),
    out: Path = typer.Option(..., "--out", help="New folder for the composed adapter package."),
    first: Optional[Path] = typer.Option(None, "--first", help="Package A -> P to use (default: the registry's best)."),
    second: Optional[Path] = typer.Option(None, "--second", help="Package P -> B to use (default: the registry's best)."),
    heldout: str = typer.Option(ComposeArgs.heldout, help="Held-out text the composed adapter is scored on (metrics.json)."),
    eval_windows: int = typer.Option(ComposeArgs.eval_windows, help="Held-out windows to score; 0 skips scoring (then it cannot be pushed)."),
    context_tokens: int = typer.Option(ComposeArgs.context_tokens, help="Receiver tokens of context per window."),
    continuation_tokens: int = typer.Option(ComposeArgs.continuation_tokens, help="Receiver tokens scored after the context."),
    batch_size: int = typer.Option(ComposeArgs.batch_size, help="Windows per forward pass."),
    registry: Optional[Path] = typer.Option(None, "--registry", help="registry.json the legs are resolved from."),
    hub_dir: Optional[Path] = typer.Option(None, "--hub-dir", help="Local hub root / download cache."),
    token: Optional[str] = typer.Option(None, "--token", help="Token for a remote hub."),
    rematch_data: Optional[str] = typer.Option(None, help="Calibration text: recolour the first leg's pivot K/V to "
                                               "the pivot's own mean and covariance on it (loads the pivot)."),
    rematch_windows: int = typer.Option(ComposeArgs.rematch_windows, help="Windows of --rematch-data to use."),
):
    """Compose two affine adapters A -> P and P -> B into one A -> B package (one affine map per layer), scored.

    Examples:

      hf-fold compose --sender heterofold/tiny-llama-code --receiver gguf/gemma3-270m-q4_k_m \\
        --pivot gguf/smollm2-135m-instruct-q4_1 --out runs/l2g

      hf-fold compose --sender ./a --receiver ./b --pivot ./p --first runs/a2p --second runs/p2b --out runs/a2b \\
        --eval-windows 0

      hf-fold compose --sender ./a --receiver ./b --pivot ./p --rematch-data bundled:calib --out runs/a2b-rematched
    """
    from heterofold_hub.commands.compose import run_compose

    if (old_sender, old_receiver) != (None, None):  # the first form: `hf-fold compose A B --via P`
        if (sender, receiver) != (None, None):
            raise UsageError("give --sender and --receiver, not also positional SENDER RECEIVER (their old form)")
        deprecated("positional SENDER RECEIVER", "--sender SENDER --receiver RECEIVER")
        sender, receiver = old_sender, old_receiver
    pivot = renamed("--pivot", pivot, "--via", via)
    missing = [flag for flag, value in (("--sender", sender), ("--receiver", receiver), ("--pivot", pivot)) if value is None]
    if missing:
        raise UsageError(f"hf-fold compose: give {', '.join(missing)} (e.g. hf-fold compose --sender A --receiver B "
                         "--pivot P --out DIR)")
    run_compose(ComposeArgs(sender=sender, receiver=receiver, via=pivot, out=out, first=first, second=second,
                            heldout=heldout, eval_windows=eval_windows, context_tokens=context_tokens,
                            continuation_tokens=continuation_tokens, batch_size=batch_size, registry=registry,
                            hub_dir=hub_dir, token=token, rematch_data=rematch_data,
                            rematch_windows=rematch_windows), conventions.data)


@app.command("bench", **COMMAND)
def bench_command(
    sender: Optional[str] = typer.Option(None, help="Sender id or folder (default: the demo pair, both directions)."),
    receiver: Optional[str] = typer.Option(None, help="Receiver id or folder."),
    contexts: str = typer.Option(DEFAULT_CONTEXTS, help="Context lengths in receiver tokens, comma-separated."),
    repeats: int = typer.Option(BenchArgs.repeats, help="Timed repeats per figure (the median is reported), after one warm-up."),
    data: str = typer.Option(BenchArgs.data, help="Text the contexts are cut from."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the timings as JSON here."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG plot (time vs context, log scale) here."),
    device: str = typer.Option(BenchArgs.device, help="auto (cuda when there is one), cpu, cuda or cuda:N."),
    dtype: str = typer.Option(BenchArgs.dtype, help="Model, cache and map dtype: float32, bfloat16 or float16."),
    map_dtype: Optional[str] = MAP_DTYPE,
    pivot: Optional[str] = PIVOT,
    recompute: float = RECOMPUTE,
    select: Optional[str] = SELECT,
    repair_layers: int = REPAIR_LAYERS,
    mapped_key_scale: float = MAPPED_KEY_SCALE,
    query: Optional[str] = typer.Option(None, help="The receiver's prompt, for --select statement, keywords, query or attention."),
    both_ways: bool = typer.Option(BenchArgs.both_ways, "--both-ways", help="Also time receiver -> sender (the demo "
                                   "pair, given no --sender/--receiver, always runs both ways)."),
    adapter: list[str] = typer.Option([], "--adapter", help="An adapter package to time beside the methods, a row "
                                      "named by its folder; repeatable or comma-separated (e.g. low-rank variants)."),
):
    """Time transfer (each method) against the receiver's native prefill and a plain cache copy, side by side.

    Examples:

      hf-fold bench

      hf-fold bench --contexts 512,2048 --repeats 3 --json bench.json --plot bench.png

      hf-fold bench --sender ./my-llama --receiver ./my-qwen --contexts 1024,8192

      hf-fold bench --device cuda --dtype bfloat16 --contexts 512,2048,4096

      hf-fold bench --sender gguf/gemma3-270m-q4_k_m --receiver gguf/smollm2-135m-instruct-q4_1 --map-dtype bfloat16

      hf-fold bench --contexts 512,2048 --recompute 0.2 --select content

      hf-fold bench --sender gguf/smollm2-135m-instruct-q4_1 --receiver gguf/gemma3-270m-q4_k_m --both-ways

      hf-fold bench --sender gguf/gemma3-270m-q4_k_m --receiver gguf/smollm2-135m-instruct-q4_1 \\
        --contexts 512,2048 --adapter runs/rank64 --adapter runs/rank32
    """
    from heterofold_hub.commands.bench import parse_contexts, run_bench_command

    run_bench_command(BenchArgs(sender=sender, receiver=receiver, contexts=parse_contexts(contexts), repeats=repeats,
                                data=data, json_path=json_path, plot_path=plot_path, device=device, dtype=dtype,
                                map_dtype=map_dtype,
                                pivot=pivot, recompute=recompute, select=select, repair_layers=repair_layers,
                                mapped_key_scale=mapped_key_scale,
                                query=query, both_ways=both_ways,
                                adapters=[Path(a.strip()) for given in adapter for a in given.split(",") if a.strip()]),
                      conventions.data)


@app.command("compress", **COMMAND)
def compress_command(
    adapter: str = typer.Option(..., "--adapter", help="The affine adapter to factor: a package folder or a "
                                "registered repo id."),
    rank: int = typer.Option(..., "--rank", help="Rank of every folded map (1 .. min(in, out) of the maps)."),
    out: Path = typer.Option(..., "--out", help="New folder for the low-rank adapter package."),
    sender: Optional[str] = typer.Option(None, help="Sender model id or folder (default: the adapter's)."),
    receiver: Optional[str] = typer.Option(None, help="Receiver model id or folder (default: the adapter's)."),
    calib_data: str = typer.Option(CompressArgs.calib_data, help="Calibration text the factors are fitted on (never "
                                   "the evaluation text, bundled:unseen)."),
    calib_windows: int = typer.Option(CompressArgs.calib_windows, help="Calibration windows."),
    context_tokens: int = typer.Option(CompressArgs.context_tokens, help="Receiver tokens of context per window."),
    heldout: str = typer.Option(CompressArgs.heldout, help="Held-out text the package is scored on (metrics.json)."),
    eval_windows: int = typer.Option(CompressArgs.eval_windows, help="Held-out windows scored; 0: not scored (the "
                                     "package then cannot be pushed)."),
    batch_size: int = BATCH_SIZE,
    registry: Optional[Path] = typer.Option(None, "--registry", help="registry.json a repo id is resolved from."),
):
    """Factor an affine adapter's maps to a low rank on calibration text and score it on held-out text: fewer FLOPs
    per token, measured error, a package `hf-fold push` publishes.

    Examples:

      hf-fold compress --adapter heterofold/gemma3-270m-to-smollm2-135m --rank 64 --out runs/g2s-rank64

      hf-fold compress --adapter runs/kv-ridge --rank 16 --out runs/kv-ridge-rank16 --calib-windows 32
    """
    from heterofold_hub.commands.compress import run_compress

    run_compress(CompressArgs(adapter=adapter, rank=rank, out=out, sender=sender, receiver=receiver,
                              calib_data=calib_data, calib_windows=calib_windows, context_tokens=context_tokens,
                              heldout=heldout, eval_windows=eval_windows, batch_size=batch_size, registry=registry),
                 conventions.data)


for _name, _command in HUB_COMMANDS.items():  # push, pull, list, show, search: heterofold_hub/commands/hub_cli.py
    app.command(_name, **COMMAND)(_command)


@app.command("compare", **COMMAND)
def compare_command(
    first: Path = typer.Argument(..., help="An hf-fold eval --json result."),
    second: Path = typer.Argument(..., help="Another, scored on the same windows."),
    row: list[str] = typer.Option([], "--row", help="A row to pair: NAME (in both results) or FIRST_ROW:SECOND_ROW; "
                                  "repeatable. Default: every row both have, or their only rows."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
):
    """Pair the rows of two fidelity results on the windows both scored: the difference in recovered and KL with its
    paired error, where two runs' own errors overlap. Both must be hf-fold eval --json files of the same windows
    (same --data, --context-tokens, --continuation-tokens, --windows) and receiver.

    Examples:

      hf-fold compare pure.json scaled.json

      hf-fold compare v130.json v140.json --row heterofold

      hf-fold compare a.json b.json --row recolor:kv-ridge --json
    """
    from heterofold_hub.commands.compare import run_compare

    run_compare(first, second, rows=row, as_json=as_json, console=conventions.data)


@app.command("env", **COMMAND)
def env_command(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")):
    """Show what this install runs with: versions, devices, folders and the CPU kernel. Paste it into bug reports.

    Examples:

      hf-fold env

      hf-fold env --json
    """
    import json

    from rich.table import Table

    from heterofold_hub.environment import describe

    info = describe()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    table = Table(show_header=False, box=None)
    for name, value in info.items():
        table.add_row(f"[bold]{name}[/]", value)
    conventions.data.print(table, highlight=False)


def run() -> None:
    """Entry point: a project error becomes one clear message on stderr and exit code 2 for a usage error (a bad
    flag value, contradicting flags), 1 for any other failure (``--debug`` for tracebacks). Click's own usage errors
    (an unknown option, a missing argument) are its own to print, with exit code 2."""
    # transformers' per-load "Loading weights" bars (and huggingface_hub's); our own progress stays. Set in the
    # environment, read when they are first imported: importing transformers here would slow every command's start.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        app(prog_name="hf-fold")  # not "cli.py" in usage lines when run from a checkout
    except HeteroFoldError as err:
        if DEBUG["on"]:
            raise
        conventions.messages.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        sys.exit(EXIT_USAGE if isinstance(err, UsageError) else EXIT_FAILURE)


if __name__ == "__main__":
    run()
