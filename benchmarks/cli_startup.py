"""Start-up time of the CLI: `hf-fold --help`, `list` and `show`, each run N times in a fresh interpreter.

    python benchmarks/cli_startup.py              # this checkout, 7 runs each
    python benchmarks/cli_startup.py --runs 11 --root /path/to/other/checkout

Prints the median (and min/max) wall-clock seconds per command. `list` and `show` are piped (not a terminal), as a
script reads them; `show` prints the tiny pair's entry with its model card. The target is under 0.5 s for each; a benchmark, not a timed test, because shared CI machines vary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (("--help",), ("list",), ("show", "heterofold/tiny-llama-code-to-tiny-qwen-code"))


def time_command(root: Path, args: tuple[str, ...], runs: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1")
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(root / "cli.py"), *args], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"hf-fold {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (the median is reported)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout whose cli.py is timed (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    time_command(root, ("--help",), 1)  # warm the file cache and __pycache__ so the first timed run is not an outlier
    print(f"{root} (python {sys.version.split()[0]}, {args.runs} runs each)")
    for command in COMMANDS:
        t = time_command(root, command, args.runs)
        print(f"hf-fold {' '.join(command):<52} median {statistics.median(t):.3f} s  (min {min(t):.3f}, max {max(t):.3f})")


if __name__ == "__main__":
    main()
