"""Transfer vs native prefill on the demo pair, both directions, for the README's performance section.

Runs exactly what `hf-fold bench` runs (same code) and writes benchmarks/results/bench.json and bench.png:

    python benchmarks/transfer_vs_prefill.py [--contexts 256,512,1024,2048,4096] [--repeats 9]

Timings are medians after a warm-up, measured side by side in one run; compare ratios, not absolute times,
across machines (this machine is shared and noisy).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from heterofold_hub.commands.bench import BenchArgs, parse_contexts, run_bench_command

OUT = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="256,512,1024,2048,4096")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    run_bench_command(BenchArgs(contexts=parse_contexts(args.contexts), repeats=args.repeats,
                                json_path=OUT / "bench.json", plot_path=OUT / "bench.png"), Console())


if __name__ == "__main__":
    main()
