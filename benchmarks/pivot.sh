#!/usr/bin/env bash
# Pivot composition (README "Composing adapters through a pivot"): tiny-llama-code, which has no adapter into
# either real model, reaches Gemma 3 through SmolLM2 and SmolLM2 through Gemma 3. Each row of the table is one
# command below; its held-out table (48 windows of bundled:unseen, 512 receiver tokens) lands in
# benchmarks/results/pivot/. The direct adapters are trained for this check with a 6-minute calibration budget;
# the short calibration of a composition gets a quarter of it.
#
#   bash benchmarks/pivot.sh train      # direct heterofold adapters tiny-llama -> SmolLM2 and -> Gemma 3 (runs/pivot/)
#   bash benchmarks/pivot.sh compose [wide|rematch]  # each composed through the other real model, no training, scored;
#                                       # rematch: the pivot K/V recoloured to the pivot's own moments (no gradient)
#   bash benchmarks/pivot.sh calibrate [l2g|l2s]  # each composition calibrated for 1.5 minutes
#   bash benchmarks/pivot.sh baselines  # kv-ridge direct, same data
#   bash benchmarks/pivot.sh bench      # composed vs direct transfer time at 512 and 2048 tokens
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=heterofold/tiny-llama-code
SMOL=gguf/smollm2-135m-instruct-q4_1
GEMMA=gguf/gemma3-270m-q4_k_m
OUT=benchmarks/results/pivot
FOLD=${FOLD:-.venv/bin/hf-fold}
SAME="--data bundled:train-natural --eval-windows 48"
mkdir -p "$OUT"

case "${1:-}" in
  train)
    $FOLD train --sender $LLAMA --receiver $SMOL $SAME --max-minutes 6 --out runs/pivot/l2s
    $FOLD train --sender $LLAMA --receiver $GEMMA $SAME --max-minutes 6 --out runs/pivot/l2g
    cp runs/pivot/l2s/metrics.json $OUT/fidelity-l2s-direct.json
    cp runs/pivot/l2g/metrics.json $OUT/fidelity-l2g-direct.json
    ;;
  compose)  # the legs: this check's direct adapters and the shipped real-pair adapters (runs/real/)
    if [ "${2:-}" = rematch ]; then  # v1.1.0 second legs, the first leg's pivot K/V recoloured to the pivot's moments
      REMATCH="--rematch-data bundled:train-natural --rematch-windows 64"
      $FOLD compose $LLAMA $GEMMA --via $SMOL --first runs/pivot/l2s --second runs/real/s2g-wide $REMATCH \
        --out runs/pivot/l2g-via-s-rematch
      $FOLD compose $LLAMA $SMOL --via $GEMMA --first runs/pivot/l2g --second runs/real/g2s-wide $REMATCH \
        --out runs/pivot/l2s-via-g-rematch
      cp runs/pivot/l2g-via-s-rematch/metrics.json $OUT/fidelity-l2g-composed-rematch.json
      cp runs/pivot/l2s-via-g-rematch/metrics.json $OUT/fidelity-l2s-composed-rematch.json
      exit 0
    fi
    if [ "${2:-}" = wide ]; then  # the second leg: the real pair's v1.1.0 (bundled:wide) adapters
      $FOLD compose $LLAMA $GEMMA --via $SMOL --first runs/pivot/l2s --second runs/real/s2g-wide --out runs/pivot/l2g-via-s-wide
      $FOLD compose $LLAMA $SMOL --via $GEMMA --first runs/pivot/l2g --second runs/real/g2s-wide --out runs/pivot/l2s-via-g-wide
      cp runs/pivot/l2g-via-s-wide/metrics.json $OUT/fidelity-l2g-composed-wide.json
      cp runs/pivot/l2s-via-g-wide/metrics.json $OUT/fidelity-l2s-composed-wide.json
      exit 0
    fi
    $FOLD compose $LLAMA $GEMMA --via $SMOL --first runs/pivot/l2s --second runs/real/s2g-natural --out runs/pivot/l2g-via-s
    $FOLD compose $LLAMA $SMOL --via $GEMMA --first runs/pivot/l2g --second runs/real/g2s --out runs/pivot/l2s-via-g
    cp runs/pivot/l2g-via-s/metrics.json $OUT/fidelity-l2g-composed.json
    cp runs/pivot/l2s-via-g/metrics.json $OUT/fidelity-l2s-composed.json
    ;;
  calibrate)  # both pairs, or one with `calibrate l2g` / `calibrate l2s`
    if [ "${2:-l2g}" = l2g ]; then
      $FOLD train --sender $LLAMA --receiver $GEMMA $SAME --init composed --init-adapter runs/pivot/l2g-via-s \
        --max-minutes 1.5 --out runs/pivot/l2g-via-s-calibrated
      cp runs/pivot/l2g-via-s-calibrated/metrics.json $OUT/fidelity-l2g-composed-calibrated.json
    fi
    if [ "${2:-l2s}" = l2s ]; then
      $FOLD train --sender $LLAMA --receiver $SMOL $SAME --init composed --init-adapter runs/pivot/l2s-via-g \
        --max-minutes 1.5 --out runs/pivot/l2s-via-g-calibrated
      cp runs/pivot/l2s-via-g-calibrated/metrics.json $OUT/fidelity-l2s-composed-calibrated.json
    fi
    ;;
  baselines)
    $FOLD train --sender $LLAMA --receiver $GEMMA $SAME --method kv-ridge --out runs/pivot/l2g-kv-ridge
    $FOLD train --sender $LLAMA --receiver $SMOL $SAME --method kv-ridge --out runs/pivot/l2s-kv-ridge
    cp runs/pivot/l2g-kv-ridge/metrics.json $OUT/fidelity-l2g-kv-ridge.json
    cp runs/pivot/l2s-kv-ridge/metrics.json $OUT/fidelity-l2s-kv-ridge.json
    ;;
  bench)  # needs tiny-llama -> SmolLM2 registered (it is: heterofold/tiny-llama-code-to-smollm2-135m)
    $FOLD bench --sender $LLAMA --receiver $GEMMA --pivot $SMOL --contexts 512,2048 --repeats 3 --json $OUT/bench-l2g.json
    ;;
  *)
    echo "usage: bash benchmarks/pivot.sh train|compose|calibrate|baselines|bench" >&2
    exit 2
    ;;
esac
