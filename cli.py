"""``hf-fold``: the HeteroFold Hub command line (thin commands over ``heterofold_hub``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.zoo import DEMO_PAIR

app = typer.Typer(help="Share KV caches between LLMs of different families.", no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()
DEBUG = {"on": False}


@app.callback()
def main(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")):
    DEBUG["on"] = debug or bool(os.environ.get("HF_FOLD_DEBUG"))


def fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


@app.command("eval")
def eval_command(
    sender: str = typer.Option(DEMO_PAIR[0], help="Sender model id or local folder."),
    receiver: str = typer.Option(DEMO_PAIR[1], help="Receiver model id or local folder."),
    methods: str = typer.Option("recolor,kv-ridge,dense-latent", help="Comma-separated transfer methods to fit and score."),
    data: str = typer.Option("bundled:heldout", help="Held-out text: bundled:<split>, a file, a folder or a JSONL file."),
    calib_data: str = typer.Option("bundled:calib", help="Calibration text the methods are fitted on."),
    context_tokens: int = typer.Option(512, help="Receiver tokens of context per window."),
    continuation_tokens: int = typer.Option(64, help="Receiver tokens scored after the context."),
    windows: int = typer.Option(96, help="Held-out windows to score."),
    calib_windows: int = typer.Option(64, help="Calibration windows to fit on."),
    batch_size: int = typer.Option(8, help="Windows per forward pass."),
    seed: int = typer.Option(0, help="Seed for fitting."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON here."),
):
    """Score transfer fidelity of each method against native prefill on held-out text.

    Examples:

      hf-fold eval

      hf-fold eval --sender heterofold/tiny-qwen-code --receiver heterofold/tiny-llama-code --json out.json

      hf-fold eval --methods kv-ridge --context-tokens 256 --windows 32
    """
    from heterofold_hub.commands.evaluate import EvalArgs, run_eval

    args = EvalArgs(sender, receiver, [m.strip() for m in methods.split(",") if m.strip()], data, calib_data,
                    context_tokens, continuation_tokens, windows, calib_windows, batch_size, seed, json_path)
    run_eval(args, console)


def run() -> None:
    """Entry point: project errors become one clear message and exit code 2 (``--debug`` for tracebacks)."""
    try:
        app(standalone_mode=False)
    except HeteroFoldError as err:
        if DEBUG["on"]:
            raise
        console.print(f"[bold red]error:[/] {err}", highlight=False)
        sys.exit(2)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except Exception as err:  # click usage errors and the like
        import click

        if isinstance(err, click.ClickException):
            err.show()
            sys.exit(err.exit_code)
        if isinstance(err, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    run()
