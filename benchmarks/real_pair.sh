#!/usr/bin/env bash
# The real pair's figures in README.md, each from one command whose JSON lands in benchmarks/results/real/.
# SmolLM2-135M-Instruct (Llama family) <-> Gemma 3 270M, both from their PyPI GGUF packages (scripts/setup.sh).
# On 2 CPU cores: training about 30 minutes per direction, each evaluation 10 to 20 minutes.
#
#   bash benchmarks/real_pair.sh train       # the two heterofold adapters (runs/real/), then push them
#   bash benchmarks/real_pair.sh eval        # fidelity at 512 receiver tokens on unseen-source text, baselines too
#
# `train` is what made the shipped adapters; each run's held-out table (metrics.json, 48 windows of bundled:unseen)
# was copied to $OUT/fidelity-{g2s,s2g}-512.json. A first SmolLM2 -> Gemma 3 run on the default --data
# (bundled:train, mostly synthetic question/answer documents; 250 steps) is kept as fidelity-s2g-512-mixed-train.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SMOL=gguf/smollm2-135m-instruct-q4_1
GEMMA=gguf/gemma3-270m-q4_k_m
OUT=benchmarks/results/real
FOLD=${FOLD:-.venv/bin/hf-fold}
mkdir -p "$OUT"

case "${1:-}" in
  train)
    NATURAL="--data bundled:train-natural --max-minutes 12 --eval-windows 48"
    $FOLD train --sender $GEMMA --receiver $SMOL $NATURAL --out runs/real/g2s
    $FOLD train --sender $SMOL --receiver $GEMMA $NATURAL --out runs/real/s2g-natural
    cp runs/real/g2s/metrics.json $OUT/fidelity-g2s-512.json
    cp runs/real/s2g-natural/metrics.json $OUT/fidelity-s2g-512.json
    $FOLD push runs/real/s2g-natural --repo heterofold/smollm2-135m-to-gemma3-270m --version 1.0.0 --hub-dir hub
    $FOLD push runs/real/g2s --repo heterofold/gemma3-270m-to-smollm2-135m --version 1.0.0 --hub-dir hub
    ;;
  eval)
    $FOLD eval --sender $SMOL --receiver $GEMMA --windows 64 --json $OUT/fidelity-s2g-512.json
    $FOLD eval --sender $GEMMA --receiver $SMOL --windows 64 --json $OUT/fidelity-g2s-512.json
    ;;
  *)
    echo "usage: bash benchmarks/real_pair.sh train|eval" >&2
    exit 2
    ;;
esac
