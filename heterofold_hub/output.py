"""Where HeteroFold Hub writes: data (tables, JSON, paths a script reads) to stdout, everything else (errors,
warnings, "wrote X", spinners, progress) to stderr, so ``hf-fold list --json > out.json`` holds only the data.
Low in the package (rich only), so progress bars, the trainer and the CLI all share these two consoles.
See docs/cli-conventions.md."""

from __future__ import annotations

from rich.console import Console

data = Console()  # stdout: what a command produces
# stderr: what it says while producing it; never wrapped by rich (a terminal wraps itself; a log should keep an
# error or a path on one line, for grep)
messages = Console(stderr=True, soft_wrap=True)
