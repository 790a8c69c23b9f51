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
#   bash benchmarks/pivot.sh ridge      # tiny-llama's compositions again, with a KV Ridge first leg
#
# The other way round, the real models as senders and tiny-llama-code as the receiver (README "A first leg that
# reproduces the pivot"): Gemma 3 -> tiny-llama through SmolLM2, and SmolLM2 -> tiny-llama through Gemma 3.
# The direct budget is `hf-fold train`'s default 250 steps (36 s; the 6 minutes never bind); calibration gets 62.
#
#   bash benchmarks/pivot.sh to-tiny train|compose|calibrate|baselines|publish|bench
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
      $FOLD compose --sender $LLAMA --receiver $GEMMA --pivot $SMOL --first runs/pivot/l2s --second runs/real/s2g-wide $REMATCH \
        --out runs/pivot/l2g-via-s-rematch
      $FOLD compose --sender $LLAMA --receiver $SMOL --pivot $GEMMA --first runs/pivot/l2g --second runs/real/g2s-wide $REMATCH \
        --out runs/pivot/l2s-via-g-rematch
      cp runs/pivot/l2g-via-s-rematch/metrics.json $OUT/fidelity-l2g-composed-rematch.json
      cp runs/pivot/l2s-via-g-rematch/metrics.json $OUT/fidelity-l2s-composed-rematch.json
      exit 0
    fi
    if [ "${2:-}" = wide ]; then  # the second leg: the real pair's v1.1.0 (bundled:wide) adapters
      $FOLD compose --sender $LLAMA --receiver $GEMMA --pivot $SMOL --first runs/pivot/l2s --second runs/real/s2g-wide --out runs/pivot/l2g-via-s-wide
      $FOLD compose --sender $LLAMA --receiver $SMOL --pivot $GEMMA --first runs/pivot/l2g --second runs/real/g2s-wide --out runs/pivot/l2s-via-g-wide
      cp runs/pivot/l2g-via-s-wide/metrics.json $OUT/fidelity-l2g-composed-wide.json
      cp runs/pivot/l2s-via-g-wide/metrics.json $OUT/fidelity-l2s-composed-wide.json
      exit 0
    fi
    $FOLD compose --sender $LLAMA --receiver $GEMMA --pivot $SMOL --first runs/pivot/l2s --second runs/real/s2g-natural --out runs/pivot/l2g-via-s
    $FOLD compose --sender $LLAMA --receiver $SMOL --pivot $GEMMA --first runs/pivot/l2g --second runs/real/g2s --out runs/pivot/l2s-via-g
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
  to-tiny)  # g2l: Gemma 3 -> tiny-llama via SmolLM2; s2l: SmolLM2 -> tiny-llama via Gemma 3
    case "${2:-}" in
      train)  # direct heterofold adapters, which are also the other pair's second legs
        $FOLD train --sender $SMOL --receiver $LLAMA $SAME --max-minutes 6 --out runs/pivot/s2l
        $FOLD train --sender $GEMMA --receiver $LLAMA $SAME --max-minutes 6 --out runs/pivot/g2l
        cp runs/pivot/s2l/metrics.json $OUT/fidelity-s2l-direct.json
        cp runs/pivot/g2l/metrics.json $OUT/fidelity-g2l-direct.json
        ;;
      compose)  # first legs: the shipped heterofold real-pair adapters, then KV Ridge fitted on the same text
        $FOLD train --sender $GEMMA --receiver $SMOL $SAME --method kv-ridge --out runs/pivot/g2s-kv-ridge
        $FOLD train --sender $SMOL --receiver $GEMMA $SAME --method kv-ridge --out runs/pivot/s2g-kv-ridge
        for pair in "g2l $GEMMA $SMOL s2l g2s" "s2l $SMOL $GEMMA g2l s2g"; do
          set -- $pair
          $FOLD compose --sender $2 --receiver $LLAMA --pivot $3 --second runs/pivot/$4 --out runs/pivot/$1-via-pivot
          $FOLD compose --sender $2 --receiver $LLAMA --pivot $3 --first runs/pivot/$5-kv-ridge --second runs/pivot/$4 \
            --out runs/pivot/$1-via-pivot-ridge
          cp runs/pivot/$1-via-pivot/metrics.json $OUT/fidelity-$1-composed.json
          cp runs/pivot/$1-via-pivot-ridge/metrics.json $OUT/fidelity-$1-composed-ridge.json
        done
        ;;
      calibrate)  # a quarter of the direct budget, from each composition
        for pair in "g2l $GEMMA" "s2l $SMOL"; do
          set -- $pair
          for start in via-pivot via-pivot-ridge; do
            $FOLD train --sender $2 --receiver $LLAMA $SAME --init composed --init-adapter runs/pivot/$1-$start \
              --max-steps 62 --out runs/pivot/$1-$start-calibrated
          done
          cp runs/pivot/$1-via-pivot-calibrated/metrics.json $OUT/fidelity-$1-composed-calibrated.json
          cp runs/pivot/$1-via-pivot-ridge-calibrated/metrics.json $OUT/fidelity-$1-composed-ridge-calibrated.json
        done
        ;;
      baselines)
        $FOLD train --sender $SMOL --receiver $LLAMA $SAME --method kv-ridge --out runs/pivot/s2l-kv-ridge
        $FOLD train --sender $GEMMA --receiver $LLAMA $SAME --method kv-ridge --out runs/pivot/g2l-kv-ridge
        cp runs/pivot/s2l-kv-ridge/metrics.json $OUT/fidelity-s2l-kv-ridge.json
        cp runs/pivot/g2l-kv-ridge/metrics.json $OUT/fidelity-g2l-kv-ridge.json
        ;;
      publish)  # the legs that make Gemma 3 -> tiny-llama resolve through SmolLM2 (embedded hub, registry.json)
        $FOLD push runs/pivot/s2l --repo heterofold/smollm2-135m-to-tiny-llama-code --version 1.0.0 --hub-dir hub
        $FOLD push runs/pivot/g2s-kv-ridge --repo heterofold/gemma3-270m-to-smollm2-135m-kv-ridge --version 1.0.0 \
          --hub-dir hub
        ;;
      bench)  # composed (KV Ridge first leg) vs direct: a scratch hub and registry that hold the legs
        rm -rf runs/pivot/bench-hub && cp -r hub runs/pivot/bench-hub && cp registry.json runs/pivot/bench-registry.json
        export HF_FOLD_HOME=runs/pivot/bench-hub HF_FOLD_REGISTRY=runs/pivot/bench-registry.json
        for leg in "s2l smollm2-135m-to-tiny-llama-code" "g2l gemma3-270m-to-tiny-llama-code" \
                   "g2s-kv-ridge gemma3-270m-to-smollm2-135m-kv-ridge" "s2g-kv-ridge smollm2-135m-to-gemma3-270m-kv-ridge"; do
          set -- $leg
          $FOLD push runs/pivot/$1 --repo scratch/$2 --version 1.0.0
        done
        $FOLD bench --sender $GEMMA --receiver $LLAMA --pivot $SMOL --contexts 512,2048 --repeats 3 --json $OUT/bench-g2l.json
        $FOLD bench --sender $SMOL --receiver $LLAMA --pivot $GEMMA --contexts 512,2048 --repeats 3 --json $OUT/bench-s2l.json
        ;;
      *) echo "usage: bash benchmarks/pivot.sh to-tiny train|compose|calibrate|baselines|publish|bench" >&2; exit 2 ;;
    esac
    ;;
  ridge)  # tiny-llama -> each real model through the other, the first leg KV Ridge (pivot.sh baselines' fits)
    $FOLD compose --sender $LLAMA --receiver $GEMMA --pivot $SMOL --first runs/pivot/l2s-kv-ridge --out runs/pivot/l2g-via-s-ridge
    $FOLD compose --sender $LLAMA --receiver $SMOL --pivot $GEMMA --first runs/pivot/l2g-kv-ridge --out runs/pivot/l2s-via-g-ridge
    cp runs/pivot/l2g-via-s-ridge/metrics.json $OUT/fidelity-l2g-composed-ridge.json
    cp runs/pivot/l2s-via-g-ridge/metrics.json $OUT/fidelity-l2s-composed-ridge.json
    ;;
  *)
    echo "usage: bash benchmarks/pivot.sh train|compose|calibrate|baselines|bench|ridge|to-tiny ..." >&2
    exit 2
    ;;
esac
