"""What scripts rely on (docs/cli-conventions.md): data on stdout, errors and messages on stderr; exit 1 for a
failure, 2 for a usage error; -h; plain help labels; the old flag names still working, with a warning; and plain
progress lines when stderr is not a terminal."""

import io
import re

import pytest
from typer.testing import CliRunner

from heterofold_hub.cli import app
from heterofold_hub.progress import PlainProgress, progress_bar
from rich.console import Console

from helpers import hf_fold

COMMANDS = sorted(command.name for command in app.registered_commands)


def test_a_failure_exits_1_with_the_error_on_stderr_and_nothing_on_stdout():
    run = hf_fold("show", "nobody/no-such-adapter")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("error:") and "nobody/no-such-adapter" in run.stderr


@pytest.mark.parametrize("args, expected", [
    (["eval", "--task", "nope"], "--task: unknown 'nope'"),
    (["train", "--calib-windows", "500", "--windows", "4"], "--calib-windows 500 is more than --windows 4"),
    (["show", "nobody/x", "--sender", "a"], "give a REF"),
    (["eval", "--nope"], "No such option: --nope"),  # click's own usage errors exit 2 too
])
def test_a_usage_error_exits_2_on_stderr(args, expected):
    run = hf_fold(*args)
    assert run.returncode == 2 and run.stdout == ""
    assert expected in " ".join(run.stderr.split()), run.stderr  # rich wraps long lines
    assert "Traceback" not in run.stderr


def test_list_prints_data_on_stdout_and_nothing_on_stderr():
    run = hf_fold("list")
    assert run.returncode == 0 and run.stderr == ""
    assert all(len(line.split("\t")) == 9 for line in run.stdout.splitlines()) and run.stdout  # ..., hub, measured on


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_dash_h_is_help_with_plain_labels(command):
    runner = CliRunner()
    short = runner.invoke(app, [*command, "-h"], env={"COLUMNS": "200"})
    assert short.exit_code == 0, short.output
    assert short.output == runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
    assert not re.search(r"<(str|bool|int|float|path)>|\{[a-z_]+\}", short.output), short.output  # no <str>, {sender}


def test_hidden_aliases_are_not_in_help():
    help_text = CliRunner().invoke(app, ["compose", "--help"], env={"COLUMNS": "200"}).output
    assert "--pivot" in help_text and "--sender" in help_text and "--via" not in help_text
    assert "--endpoint" not in CliRunner().invoke(app, ["push", "--help"], env={"COLUMNS": "200"}).output


def test_via_still_works_as_pivot_with_a_warning():
    # --via reaches the same check --pivot does (here: it only applies to --init composed)
    run = hf_fold("train", "--via", "some/pivot", "--init", "auto")
    assert run.returncode == 2 and run.stdout == ""
    assert "warning: --via is deprecated; use --pivot" in run.stderr
    assert "--pivot / --init-adapter only apply to --init composed" in run.stderr
    both = hf_fold("train", "--via", "a/p", "--pivot", "b/p")
    assert both.returncode == 2 and "give --pivot only" in both.stderr


def test_compose_takes_flags_and_still_its_old_positional_form():
    new = hf_fold("compose", "--sender", "a/x", "--receiver", "b/y", "--pivot", "a/x", "--out", "/tmp/nowhere")
    assert new.returncode == 2 and "must be three different models" in new.stderr and "warning" not in new.stderr
    old = hf_fold("compose", "a/x", "b/y", "--via", "a/x", "--out", "/tmp/nowhere")
    assert old.returncode == 2 and "must be three different models" in old.stderr
    assert "positional SENDER RECEIVER is deprecated" in old.stderr and "--via is deprecated" in old.stderr
    both = hf_fold("compose", "a/x", "b/y", "--sender", "a/x", "--receiver", "b/y", "--pivot", "p", "--out", "/tmp/x")
    assert both.returncode == 2 and "not also positional SENDER RECEIVER" in both.stderr
    missing = hf_fold("compose", "--sender", "a/x", "--out", "/tmp/nowhere")
    assert missing.returncode == 2 and "give --receiver, --pivot" in missing.stderr


def test_push_endpoint_still_works_as_hub_with_a_warning(tmp_path):
    run = hf_fold("push", str(tmp_path / "missing"), "--repo", "a/b", "--version", "1.0.0", "--endpoint",
                  "http://127.0.0.1:9")
    assert "warning: --endpoint is deprecated; use --hub" in run.stderr
    assert run.returncode == 1 and str(tmp_path / "missing") in run.stderr and run.stdout == ""


class Clock:
    """A clock the test moves by hand: which lines are written depends on time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_off_a_terminal_is_plain_lines_every_few_seconds_and_the_last():
    stream, clock = io.StringIO(), Clock()
    with PlainProgress(stream, every_s=5, clock=clock) as bar:
        task = bar.add_task("fitting kv-ridge", total=12)
        for step in range(12):
            clock.now += 2  # a step every 2 s: a line at most every 5 s
            bar.advance(task)
    assert stream.getvalue().splitlines() == ["fitting kv-ridge: 3/12", "fitting kv-ridge: 6/12",
                                              "fitting kv-ridge: 9/12", "fitting kv-ridge: 12/12"]


def test_progress_off_a_terminal_ends_with_the_count_reached():
    stream = io.StringIO()
    with PlainProgress(stream, every_s=60) as bar:  # an early stop: the count reached, not the total
        task = bar.add_task("dense-latent: MSE", total=10)
        for _ in range(4):
            bar.advance(task)
        bar.advance(bar.add_task("evaluating"), 3)  # no total known
    assert stream.getvalue().splitlines() == ["dense-latent: MSE: 4/10", "evaluating: 3"]


def test_progress_bar_picks_plain_lines_for_a_non_terminal_stream():
    stream = io.StringIO()
    with progress_bar(console=Console(file=stream)) as bar:
        bar.advance(bar.add_task("evaluating", total=2), 2)
    assert stream.getvalue() == "evaluating: 2/2\n"
    with progress_bar(False, console=Console(file=stream)) as bar:  # progress=False: nothing at all
        bar.advance(bar.add_task("quiet", total=1))
    assert stream.getvalue() == "evaluating: 2/2\n"


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)")  # inside Lightning, as calibrate.py
@pytest.mark.parametrize("terminal", [True, False])
def test_training_progress_counts_optimizer_steps_with_the_loss(terminal):
    import lightning as L
    from lightning.pytorch.demos.boring_classes import BoringModel

    from heterofold_hub.trainers.progress import TrainingProgress

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("kl", out["loss"])
            return out

    stream = io.StringIO()
    console = Console(file=stream, force_terminal=terminal, width=120)
    trainer = L.Trainer(max_steps=3, callbacks=[TrainingProgress(console, every_s=3600)], enable_progress_bar=False,
                        logger=False, enable_checkpointing=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(Model())
    if terminal:  # a bar in steps, not Lightning's epochs
        assert "calibration" in stream.getvalue() and "100%" in stream.getvalue()
    else:  # with a line every hour at most: only the last step's
        assert re.fullmatch(r"step 3/3 kl=\S+\n", stream.getvalue()), stream.getvalue()
