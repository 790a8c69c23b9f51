"""Every `hf-fold` command: `--help` shows examples; bad arguments exit non-zero with one short message and no
traceback; `--debug` shows the traceback."""

import pytest
from typer.testing import CliRunner

from cli import app
from helpers import hf_fold

COMMANDS = sorted(command.name for command in app.registered_commands)

# One bad invocation per command, and a piece of the message it must give.
BAD = {
    "eval": (["--methods", "nope", "--task", "fidelity"], "--methods: unknown ['nope']"),
    "train": (["--method", "nope", "--max-steps", "0"], "--method"),
    "bench": (["--contexts", "4"], "--contexts"),
    "push": (["/no/such/package", "--repo", "a/b", "--version", "1.0.0"], "/no/such/package"),
    "pull": (["bad..repo@1.0.0"], "bad..repo"),
    "list": (["--registry", "/no/such/registry.json"], "/no/such/registry.json"),
    "show": (["nobody/no-such-adapter"], "nobody/no-such-adapter"),
    "search": (["--registry", "/no/such/registry.json", "qwen"], "/no/such/registry.json"),
}


def test_every_command_has_a_bad_input_case():
    assert sorted(BAD) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_examples(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Examples" in result.output and f"hf-fold {command}" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_arguments_give_one_clear_message_and_no_traceback(command):
    args, expected = BAD[command]
    run = hf_fold(command, *args)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert "Traceback" not in output
    assert expected in output
    message = [line for line in output.splitlines() if line.strip() and "Loading weights" not in line]
    assert 0 < len(message) <= 12, output  # a paragraph, not a dump


def test_debug_shows_the_traceback():
    run = hf_fold("--debug", "show", "nobody/no-such-adapter")
    assert run.returncode != 0 and "Traceback" in run.stderr
