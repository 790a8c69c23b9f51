#!/usr/bin/env bash
# The real pair's figures in README.md, each from one command whose JSON lands in benchmarks/results/real/.
# SmolLM2-135M-Instruct (Llama family) <-> Gemma 3 270M, both from their PyPI GGUF packages (scripts/setup.sh).
# On 2 CPU cores: training about 30 minutes per direction, each evaluation 10 to 20 minutes.
#
#   bash benchmarks/real_pair.sh train       # the two heterofold adapters (runs/real/), then push them
#   bash benchmarks/real_pair.sh eval        # fidelity at 512 receiver tokens on unseen-source text
#
# The adapters were published with `hf-fold push` (see the push step); evaluation scores the registered ones.
set -euo pipefail
cd "$(dirname "$0")/.."
SMOL=gguf/smollm2-135m-instruct-q4_1
GEMMA=gguf/gemma3-270m-q4_k_m
OUT=benchmarks/results/real
FOLD=${FOLD:-.venv/bin/hf-fold}
mkdir -p "$OUT"

case "${1:-}" in
  train)
    $FOLD train --sender $SMOL --receiver $GEMMA --out runs/real/s2g
    $FOLD train --sender $GEMMA --receiver $SMOL --out runs/real/g2s
    $FOLD push runs/real/s2g --repo heterofold/smollm2-135m-to-gemma3-270m --version 1.0.0 --hub-dir hub
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
