"""Every `hf-fold` command: `--help` shows examples; bad arguments exit non-zero with one short message and no
traceback; `--debug` shows the traceback."""

import json

import pytest
from typer.testing import CliRunner

from heterofold_hub.cli import app
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
    "env": (["--nope"], "No such option: --nope"),  # a usage error from the parser itself
    "compose": (["--sender", "a/x", "--receiver", "b/y", "--pivot", "a/x", "--out", "/tmp/nowhere"],
                "must be three different models"),
    "compress": (["--adapter", "/no/such/package", "--rank", "0", "--out", "/tmp/nowhere"], "--rank: 0 is too small"),
    "demo": (["--repeats", "0"], "--repeats: 0"),
    "compare": (["/no/such/a.json", "/no/such/b.json"], "/no/such/a.json: no such file"),
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


def test_version_and_env_say_what_is_installed():
    from importlib import metadata

    import torch

    from heterofold_hub import __version__

    version = hf_fold("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"hf-fold {__version__}"
    assert metadata.version("heterofold-hub") == __version__  # the package metadata reads the same one place
    env = hf_fold("env", "--json")
    assert env.returncode == 0, env.stderr
    info = json.loads(env.stdout)
    assert info["heterofold-hub"] == __version__ and info["torch"] == torch.__version__
    assert info["transformers"] == metadata.version("transformers")
    assert info["cpu kernel"].startswith(("on: ", "off ", "no C compiler", "could not be built"))
    table = hf_fold("env")
    assert table.returncode == 0 and "huggingface_hub" in table.stdout and info["registry"] in table.stdout


def test_debug_shows_the_traceback():
    run = hf_fold("--debug", "show", "nobody/no-such-adapter")
    assert run.returncode != 0 and "Traceback" in run.stderr


@pytest.mark.parametrize("command", ["eval", "bench"])
def test_a_bad_mapped_key_scale_is_refused_before_any_model_loads(command):
    run = hf_fold(command, "--mapped-key-scale", "0")
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "Traceback" not in output and "Loading weights" not in output
    assert "--mapped-key-scale: mapped_key_scale=0" in output and "(0, 4]" in output
