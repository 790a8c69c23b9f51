"""``hf-fold train``: fit a pair adapter and write a complete adapter package."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from heterofold_hub.output import messages as stderr
from heterofold_hub.errors import TrainingError, UsageError

TRAINABLE = ("heterofold", "kv-ridge", "dense-latent")
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true")
STRATEGIES = ("auto", "ddp", "fsdp", "ddp_spawn")
CALIB_WINDOWS = 64  # --calib-windows when not given (fewer when --windows is smaller)
MAX_LR = 1e37  # AdamW's first step is lr / (1 - beta1) = 10 lr, which must stay below float32's 3.4e38


@dataclass(kw_only=True)
class TrainArgs:
    """``hf-fold train``'s arguments; the defaults here are the command line's."""

    sender: str
    receiver: str
    data: str = "bundled:train-natural"
    heldout: str = "bundled:unseen"
    out: Path = Path("runs/adapter")
    method: str = "heterofold"
    max_steps: int = 250
    context_tokens: int = 512
    continuation_tokens: int = 64
    windows: int = 160
    eval_windows: int = 96
    lr: float | None = None  # None: the method's own default (CalibrationOptions, DenseLatentOptions)
    lora_rank: int = 0
    batch_size: int = 2
    accumulate: int = 1
    precision: str = "32-true"
    devices: str = "1"
    strategy: str = "auto"
    seed: int = 0
    resume: bool = False
    sender_layers: str = "all"
    sources_per_layer: int = 2
    init: str = "auto"
    calib_windows: int | None = None  # None: the first min(CALIB_WINDOWS, windows); recorded as the number used
    max_minutes: float | None = None
    copy_weight: float = 0.0
    teacher_top_k: int = 0
    offload_features: Path | None = None  # a folder for the training features, instead of memory
    via: str | None = None  # --init composed (--pivot): the pivot model whose registered legs are composed
    init_adapter: str | None = None  # --init composed / adapter: a package folder, or a registered ORG/NAME[@VERSION]

    def __post_init__(self):
        # folders given as text (an experiment's TOML, Python callers) are paths like the command line's
        for name in ("out", "offload_features"):
            if isinstance(getattr(self, name), str):
                setattr(self, name, Path(getattr(self, name)))
        if isinstance(self.init_adapter, Path):
            self.init_adapter = str(self.init_adapter)
        if self.calib_windows is None:
            self.calib_windows = min(CALIB_WINDOWS, self.windows)

    def validate(self) -> None:
        """All argument problems at once, phrased in flags, before any model is loaded."""
        problems = []
        if self.method not in TRAINABLE:
            problems.append(f"--method: {self.method!r} is not trainable; choose from {', '.join(TRAINABLE)}")
        if self.precision not in PRECISIONS:
            problems.append(f"--precision: {self.precision!r}; choose from {', '.join(PRECISIONS)}")
        if self.strategy not in STRATEGIES:
            problems.append(f"--strategy: {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        for flag, value, low in (("--max-steps", self.max_steps, 1), ("--context-tokens", self.context_tokens, 2),
                                 ("--continuation-tokens", self.continuation_tokens, 1), ("--windows", self.windows, 1),
                                 ("--eval-windows", self.eval_windows, 2), ("--batch-size", self.batch_size, 1),
                                 ("--calib-windows", self.calib_windows, 1),
                                 ("--sources-per-layer", self.sources_per_layer, 1),
                                 ("--accumulate", self.accumulate, 1)):
            if value < low:
                problems.append(f"{flag}: {value} is too small (minimum {low})")
        # Flags read against each other: the closed-form statistics come from the first --calib-windows of the
        # --windows training windows (more would silently be all of them, yet recorded as asked), and a step
        # takes --batch-size of them.
        if self.calib_windows > self.windows:
            problems.append(f"--calib-windows {self.calib_windows} is more than --windows {self.windows}: the statistics "
                            f"are fitted on the first --calib-windows training windows; give at most {self.windows} "
                            "or raise --windows")
        if self.batch_size > self.windows:
            problems.append(f"--batch-size {self.batch_size} is more than --windows {self.windows}; give at most "
                            f"{self.windows} or raise --windows")
        heterofold_only = [flag for flag, value, default in (
            ("--lora-rank", self.lora_rank, 0), ("--max-minutes", self.max_minutes, None),
            ("--accumulate", self.accumulate, 1), ("--precision", self.precision, "32-true"),
            ("--teacher-top-k", self.teacher_top_k, 0),
            ("--devices", self.devices, "1"), ("--strategy", self.strategy, "auto"), ("--resume", self.resume, False),
        ) if value != default]
        if self.method != "heterofold" and heterofold_only:  # method_options hands them to heterofold alone
            problems.append(f"{', '.join(heterofold_only)}: only for --method heterofold (Lightning calibration); "
                            f"--method is {self.method!r}. Drop them or train heterofold")
        if self.lr is not None and not self.lr > 0:
            problems.append(f"--lr: {self.lr} must be positive")
        elif self.lr is not None and not self.lr < MAX_LR:  # beyond it AdamW's step size overflows float32
            problems.append(f"--lr: {self.lr:g} is too large (at most {MAX_LR:g}); leave it out for the method's default")
        from heterofold_hub.transfer.alignment import SENDER_LAYERS

        from .calibrate import GIVEN_STARTS, INIT_CHOICES

        if self.sender_layers not in SENDER_LAYERS:
            problems.append(f"--sender-layers: {self.sender_layers!r}; choose from {', '.join(SENDER_LAYERS)}")
        if self.init not in INIT_CHOICES:
            problems.append(f"--init: {self.init!r}; choose from {', '.join(INIT_CHOICES)}")
        if self.init == "composed" and (self.via is None) == (self.init_adapter is None):
            problems.append("--init composed: give --pivot PIVOT (compose the registry's legs) or --init-adapter DIR "
                            "(a package from `hf-fold compose`), one of the two")
        elif self.init == "adapter" and (self.init_adapter is None or self.via is not None):
            problems.append("--init adapter: give --init-adapter DIR or ORG/NAME[@VERSION] (the package whose "
                            "calibration goes on) and no --pivot")
        elif self.init not in GIVEN_STARTS and (self.via, self.init_adapter) != (None, None):
            problems.append(f"--pivot / --init-adapter only apply to --init composed or adapter (it is {self.init!r})")
        elif self.init in GIVEN_STARTS and self.method != "heterofold":
            problems.append(f"--init {self.init} starts heterofold calibration; --method is {self.method!r}")
        if self.init in GIVEN_STARTS and self.sources_per_layer != TrainArgs.sources_per_layer:
            problems.append(f"--sources-per-layer does not apply to --init {self.init} (the starting package's maps "
                            "already read their sender layers); drop it")
        if self.init_adapter is not None:
            problems += [p for p in [init_adapter_problem(self.init_adapter)] if p]
        if self.max_minutes is not None and not self.max_minutes > 0:
            problems.append(f"--max-minutes: {self.max_minutes} must be positive (or left out)")
        if not self.copy_weight >= 0:
            problems.append(f"--copy-weight: {self.copy_weight} must be 0 (a plain mean over targets) or positive")
        elif self.copy_weight and self.method != "heterofold":
            problems.append(f"--copy-weight weights heterofold's calibration loss; --method is {self.method!r}")
        if self.teacher_top_k < 0:
            problems.append(f"--teacher-top-k: {self.teacher_top_k} must be 0 (the teacher's full distribution, every "
                            "step) or positive (its top k tokens and the rest, kept from a window's first visit)")
        if self.lora_rank < 0:
            problems.append(f"--lora-rank: {self.lora_rank} must be 0 (full-rank corrections) or positive")
        if self.continuation_tokens >= self.context_tokens:
            problems.append(f"--continuation-tokens {self.continuation_tokens} must be shorter than --context-tokens {self.context_tokens}")
        if self.sender == self.receiver:
            problems.append(f"--sender and --receiver are both {self.sender!r}; an adapter maps between two different models")
        from heterofold_hub.data.texts import same_source

        if same_source(self.data, self.heldout):
            problems.append(f"--data and --heldout are both {self.data!r}; held-out text must never be trained on")
        if not (self.devices == "auto" or self.devices.isdigit()):
            problems.append(f"--devices: {self.devices!r}; give a number or 'auto'")
        from heterofold_hub.io import output_problem

        problems += [p for p in (output_problem("--out", self.out, folder=True),
                                 output_problem("--offload-features", self.offload_features, folder=True)) if p]
        config = self.out / "adapter_config.json"
        if config.is_file() and not self.resume:
            existing = json.loads(config.read_text())
            same = (existing.get("sender"), existing.get("receiver"), existing.get("method")) == (self.sender, self.receiver, self.method)
            if not same:
                problems.append(f"--out: {self.out} already holds a different adapter ({existing.get('method')} "
                                f"{existing.get('sender')} -> {existing.get('receiver')}); choose another --out")
        if problems:
            raise UsageError("Invalid arguments:\n  " + "\n  ".join(problems))


def method_options(args: TrainArgs) -> dict:
    """The options of the method being trained, from the flags that apply to it (every method: --sender-layers;
    trained ones: --max-steps and --lr; heterofold: the Lightning and starting-map flags). Same --max-steps for
    every method is what "same budget" means: dense-latent gets that many MSE steps and as many NLL steps."""
    from heterofold_hub.methods.dense_latent import DenseLatentOptions

    from .calibrate import CalibrationOptions

    options = {"sender_layers": args.sender_layers, "sources_per_layer": args.sources_per_layer}
    if args.method == "kv-ridge":
        return options
    if args.method == "dense-latent":
        lr = DenseLatentOptions.lr if args.lr is None else args.lr
        return {**options, "lr": lr, "mse_steps": args.max_steps, "nll_steps": args.max_steps}
    lr = CalibrationOptions.lr if args.lr is None else args.lr
    return {**options, "lr": lr, "steps": args.max_steps, "lora_rank": args.lora_rank, "precision": args.precision,
            "devices": args.devices if args.devices == "auto" else int(args.devices), "strategy": args.strategy,
            "accumulate": args.accumulate, "copy_weight": args.copy_weight, "teacher_top_k": args.teacher_top_k,
            "default_root_dir": str(args.out / "checkpoints"),
            "ckpt_path": "last" if args.resume else None, "init": args.init, "max_minutes": args.max_minutes}


def check_sources(args: TrainArgs, sender) -> None:
    """``--sources-per-layer`` against the sender layers ``--sender-layers`` lets a map read, once the sender is known."""
    from heterofold_hub.transfer.alignment import source_candidates

    available = source_candidates(sender.spec, args.sender_layers)
    if args.sources_per_layer > len(available):
        raise UsageError(f"--sources-per-layer {args.sources_per_layer}: {args.sender!r} has only {len(available)} "
                              f"sender layer(s) a map may read with --sender-layers {args.sender_layers} "
                              f"({available}); give at most {len(available)}")


def init_adapter_problem(value: str) -> str | None:
    """Why ``--init-adapter`` names no package: a folder without one, or neither a folder nor ORG/NAME[@VERSION]."""
    from heterofold_hub.adapter.config import CONFIG_NAME
    from heterofold_hub.hub.base import HubError, split_ref, validate_repo_id

    folder = Path(value)
    if folder.exists():
        if not (folder / CONFIG_NAME).is_file():
            return f"--init-adapter: {value} is not an adapter package (no {CONFIG_NAME})"
        return None
    try:
        validate_repo_id(split_ref(value)[0])  # and its version, if pinned
    except HubError as err:
        return (f"--init-adapter: {value!r} is neither a package folder on this machine nor a registered repo "
                f"(ORG/NAME or ORG/NAME@VERSION): {err}")
    return None


def given_start(args: TrainArgs, sender, receiver):
    """The package ``--init composed`` or ``--init adapter`` starts from: ``--init-adapter`` (a folder, or a registered
    version fetched and checked like any resolved adapter) or the registry's legs composed through ``--pivot``;
    refused when it (or a parent) was trained on the held-out text. A continued package records what it continues
    (``extra["continued_from"]``), so held-out checks see that text too."""
    from heterofold_hub.evaluation.provenance import adapter_record
    from heterofold_hub.hub.base import split_ref
    from heterofold_hub.hub.composition import compose_path, held_out_problem
    from heterofold_hub.hub.registry import open_registry
    from heterofold_hub.hub.resolve import resolve_adapter
    from heterofold_hub.methods.composed import training_data

    if args.init_adapter is not None:
        ref = (args.init_adapter, None) if Path(args.init_adapter).is_dir() else split_ref(args.init_adapter)
        found = resolve_adapter(sender, receiver, adapter=ref[0], version=ref[1])
        start = found.adapter
        if start.affine_maps(0) is None:
            raise UsageError(f"--init-adapter {args.init_adapter} is {start.config.method}, not an affine map; "
                             "pass a heterofold, kv-ridge or composed package.")
    else:
        start = compose_path(sender, receiver, via=args.via, registry=open_registry())
    problem = held_out_problem(start, args.heldout)
    if problem:
        raise UsageError(problem)
    if args.init == "adapter":
        record = adapter_record(start, found)  # where it came from, its weights' hash (the file's, checked on load)
        continued = {"path": record["source"], "weights_sha256": record["weights_sha256"],
                     "method": start.config.method, "data": training_data(start.config),
                     "training_windows": start.config.training_windows,
                     "calibration_steps": start.config.extra.get("calibration_steps")}
        start.config.extra = {**start.config.extra, "continued_from": continued}
    return start


def run_train(args: TrainArgs, console: Console, messages: Console = stderr) -> dict:
    """Train, print the held-out table on ``console`` (data) and progress and what was written on ``messages``."""
    args.validate()
    from heterofold_hub.evaluation.fidelity import results_table
    from heterofold_hub.data.texts import SHINGLE_LINES, read_texts, shared_passages
    from heterofold_hub.evaluation.fidelity import evaluate
    from heterofold_hub.base_models.fingerprint import tokenizer_fingerprint
    from heterofold_hub.methods.fitting import fit_methods
    from heterofold_hub.io import write_json_atomic
    from heterofold_hub.base_models.loading import Side
    from heterofold_hub.adapter.config import METRICS_NAME
    from heterofold_hub.adapter.save_and_load import save_adapter
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.progress import status

    from heterofold_hub import __version__

    from .calibrate import GIVEN_STARTS, calibrate
    from .faults import training_faults

    train_texts, heldout_texts = read_texts(args.data), read_texts(args.heldout)
    shared = shared_passages(train_texts, heldout_texts)
    if shared:
        raise UsageError(f"--data {args.data!r} and --heldout {args.heldout!r} share passages ({len(shared)} held-out "
                              f"text(s) repeat {SHINGLE_LINES} consecutive lines of training text, e.g. text {shared[0]}); "
                              "held-out text must be disjoint from training text.")
    with status("loading models", messages):
        sender, receiver = Side.load(args.sender), Side.load(args.receiver)
    check_sources(args, sender)
    cut = dict(context_tokens=args.context_tokens, continuation_tokens=args.continuation_tokens)
    windows = make_windows(train_texts, receiver, max_windows=args.windows, **cut)
    if len(windows) < args.batch_size:
        raise UsageError(f"--data {args.data!r} gives only {len(windows)} windows of {sum(cut.values())} tokens, "
                              f"fewer than --batch-size {args.batch_size}. Add text or lower --context-tokens.")
    options = method_options(args)
    if args.init in GIVEN_STARTS:
        options["start"] = given_start(args, sender, receiver)
    lr = options.get("lr", 0.0)
    settings = {"--batch-size": args.batch_size, "--accumulate": args.accumulate, "--context-tokens": args.context_tokens}
    with training_faults(lr=lr, precision=args.precision, settings=settings, where=f"while fitting {args.method}"):
        adapter = fit_methods(
            sender, receiver, [args.method], windows, batch_size=args.batch_size, seed=args.seed,
            calib_windows=args.calib_windows, fitters={"heterofold": calibrate}, options={args.method: options},
            offload_features=args.offload_features,
        )[args.method]
    broken = adapter.non_finite()
    if broken:  # methods trained outside Lightning (dense-latent) have no per-step check
        hint = "" if args.precision == "32-true" else " or use --precision 32-true"
        raise TrainingError(f"Training diverged: the fitted {args.method} adapter has NaN/inf in {broken[:3]}. Lower "
                            f"--lr (it is {lr:g}){hint} and train again. No adapter was saved.")
    held_out = make_windows(heldout_texts, receiver, max_windows=args.eval_windows, **cut)
    with training_faults(lr=lr, precision=args.precision, settings=settings, where="while evaluating on --heldout"):
        result = evaluate(sender, receiver, {args.method: adapter}, held_out, batch_size=args.batch_size,
                          data=args.heldout)
    console.print(results_table(result))
    adapter.config = replace(
        adapter.config,
        library_version=__version__,
        sender_revision=sender.revision,
        receiver_revision=receiver.revision,
        sender_tokenizer=tokenizer_fingerprint(sender.tokenizer),
        receiver_tokenizer=tokenizer_fingerprint(receiver.tokenizer),
        training_args={k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()},
        training_windows=len(windows),
    )
    save_adapter(adapter, args.out)
    write_json_atomic(args.out / METRICS_NAME, result)
    messages.print(f"wrote adapter package to {args.out}", highlight=False)
    return result
