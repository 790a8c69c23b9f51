"""The experiment harness: named configs (``benchmarks/experiments/*.toml``), one runner, one results file per
experiment (``benchmarks/results/NAME.json``) and the report that regenerates the docs' tables from those files.

    python -m benchmarks list
    python -m benchmarks run NAME --stage train|compress|score|retrieval|handoff|handoff-speed|bench
    python -m benchmarks publish NAME
    python -m benchmarks report [--check]

docs/experiments.md describes the config and results formats.
"""
