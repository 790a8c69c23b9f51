"""`hf-fold bench` on the real pair in both directions, into one JSON and one plot, with llama.cpp's prefill beside
transformers' (llama-cpp-python must be installed: docs/llamacpp.md). The command line benches one given pair, or the
demo pair both ways; this runs the same command code with the real pair's two directions:

    python benchmarks/bench_llamacpp.py --contexts 512,2048 --repeats 3 \
        --json benchmarks/results/real/bench-llamacpp.json --plot benchmarks/results/real/bench-llamacpp.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from heterofold_hub.commands.bench import BenchArgs, parse_contexts, run_bench_command  # noqa: E402

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


class RealPairBoth(BenchArgs):
    """``hf-fold bench``'s arguments, for the real pair in both directions."""

    def directions(self) -> list[tuple[str, str]]:
        return [(SMOL, GEMMA), (GEMMA, SMOL)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    from rich.console import Console

    run_bench_command(RealPairBoth(contexts=parse_contexts(args.contexts), repeats=args.repeats, json_path=args.json,
                                   plot_path=args.plot), Console(width=200))


if __name__ == "__main__":
    main()
