#!/usr/bin/env bash
# The real pair's figures in README.md, each from one command whose JSON lands in benchmarks/results/real/.
# SmolLM2-135M-Instruct (Llama family) <-> Gemma 3 270M, both from their PyPI GGUF packages (scripts/setup.sh).
# On 2 CPU cores: training about 30 minutes per direction, each evaluation 10 to 20 minutes.
#
#   bash benchmarks/real_pair.sh train       # the two heterofold adapters (runs/real/), then push them
#   bash benchmarks/real_pair.sh wide        # the same on bundled:wide (third-party code and prose), 320 windows; + kv-ridge
#   bash benchmarks/real_pair.sh wide-g2s-memory  # Gemma 3 -> SmolLM2 v1.1.0's run again, timed, with today's memory use
#   bash benchmarks/real_pair.sh wide2 [train|score|push]  # SmolLM2 -> Gemma 3 v1.2.0: 400 windows, 16 minutes
#   bash benchmarks/real_pair.sh wide3 [train|score]  # v1.2.0's run with 100 synthetic recall documents added
#   bash benchmarks/real_pair.sh wide4 [train|score]  # wide3 with the loss weighted 4x on targets copied from the context
#   bash benchmarks/real_pair.sh wide5 [train|score|baseline|retrieval]  # SmolLM2 -> Gemma 3 with 4 sender layers per map, v1.1.0's budget
#   bash benchmarks/real_pair.sh eval        # the quick look: registered adapter, recolor and kv-ridge, both ways
#   bash benchmarks/real_pair.sh baselines   # kv-ridge and dense-latent on the same windows and budget (runs/real/)
#   bash benchmarks/real_pair.sh long [wide] # fidelity at 2048 receiver tokens (past Gemma 3's 512 window), all adapters
#   bash benchmarks/real_pair.sh prose       # fidelity on third-party prose (the 512 tables' 48 windows are all code)
#   bash benchmarks/real_pair.sh retrieval [mixed]  # exact-match retrieval with Gemma 3 as receiver at 512, 1024, 2048
#   bash benchmarks/real_pair.sh bench [s2g|g2s|all] [bfloat16]  # transfer vs native prefill, 256 to 8192 tokens
#   bash benchmarks/real_pair.sh bf16        # the shipped adapters' fidelity with models, caches and maps in bf16
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
adapters() { for dir in "$@"; do [ -d "$dir" ] && printf -- "--adapter %s " "$dir"; done; }  # those present

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
  wide)
    WIDE="--data bundled:wide --windows 320 --max-minutes 12 --eval-windows 48"
    $FOLD train --sender $SMOL --receiver $GEMMA $WIDE --out runs/real/s2g-wide
    $FOLD train --sender $GEMMA --receiver $SMOL $WIDE --out runs/real/g2s-wide
    cp runs/real/s2g-wide/metrics.json $OUT/fidelity-s2g-512-wide.json
    cp runs/real/g2s-wide/metrics.json $OUT/fidelity-g2s-512-wide.json
    $FOLD push runs/real/s2g-wide --repo heterofold/smollm2-135m-to-gemma3-270m --version 1.1.0 --hub-dir hub
    $FOLD push runs/real/g2s-wide --repo heterofold/gemma3-270m-to-smollm2-135m --version 1.1.0 --hub-dir hub
    # KV Ridge on the same text (closed form on the first 64 of those windows), scored on the same 48 windows
    KV_RIDGE="--data bundled:wide --windows 320 --eval-windows 48 --method kv-ridge"
    $FOLD train --sender $SMOL --receiver $GEMMA $KV_RIDGE --out runs/real/s2g-kv-ridge-wide
    $FOLD train --sender $GEMMA --receiver $SMOL $KV_RIDGE --out runs/real/g2s-kv-ridge-wide
    cp runs/real/s2g-kv-ridge-wide/metrics.json $OUT/fidelity-s2g-512-kv-ridge-wide.json
    cp runs/real/g2s-kv-ridge-wide/metrics.json $OUT/fidelity-g2s-512-kv-ridge-wide.json
    ;;
  wide-g2s-memory)
    # Gemma 3 -> SmolLM2 v1.1.0's command again under /usr/bin/time -v, with today's training memory (fp16 features,
    # statistics freed before the batches are prepared): its time and peak, not a new published version.
    /usr/bin/time -v $FOLD train --sender $GEMMA --receiver $SMOL --data bundled:wide --windows 320 --max-minutes 12 \
      --eval-windows 48 --out runs/real/g2s-wide-memory 2> runs/real/g2s-wide-memory.time
    cp runs/real/g2s-wide-memory/metrics.json $OUT/fidelity-g2s-512-wide-memory.json
    grep -E "Elapsed|Maximum resident" runs/real/g2s-wide-memory.time > $OUT/train-g2s-wide-memory-time.txt
    ;;
  wide2)
    # SmolLM2 -> Gemma 3 v1.2.0: bundled:wide again, on 400 windows, with a 16-minute calibration whose learning rate
    # decays over the 205 steps that fit in it (v1.1.0 stopped at 153 of 250 steps, its rate still 0.45 of the peak),
    # and training features stored in fp16. `wide2 score` scores it at 2048 tokens and on prose; `wide2 push`.
    case "${2:-train}" in
      train)
        $FOLD train --sender $SMOL --receiver $GEMMA --data bundled:wide --windows 400 --max-minutes 16 --max-steps 205 \
          --eval-windows 48 --out runs/real/s2g-wide2
        cp runs/real/s2g-wide2/metrics.json $OUT/fidelity-s2g-512-wide2.json ;;
      score)
        $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
          --adapter runs/real/s2g-wide2 --json $OUT/fidelity-s2g-2048-wide2.json
        $FOLD eval --sender $SMOL --receiver $GEMMA --data bundled:unseen-prose --windows 32 --methods '' \
          --adapter runs/real/s2g-wide2 --json $OUT/fidelity-s2g-512-prose-wide2.json ;;
      push)
        $FOLD push runs/real/s2g-wide2 --repo heterofold/smollm2-135m-to-gemma3-270m --version 1.2.0 --hub-dir hub ;;
    esac
    ;;
  wide3)
    # SmolLM2 -> Gemma 3 trained for retrieval too: bundled:wide plus the first 100 synthetic recall documents of
    # bundled:train ("# the code of X is NNNNN" facts, filler, then recall questions; the retrieval eval draws no
    # fact that occurs there), written to runs/real/wide-recall.jsonl. Otherwise v1.2.0's command.
    case "${2:-train}" in
      train)
        .venv/bin/python - <<'PY'
import json
from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.retrieval import FACT_RE
from heterofold_hub.io import write_bytes_atomic
recall = [t for t in read_texts("bundled:train") if FACT_RE.search(t)][:100]
docs = read_texts("bundled:wide") + recall
write_bytes_atomic("runs/real/wide-recall.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in docs).encode())
PY
        $FOLD train --sender $SMOL --receiver $GEMMA --data runs/real/wide-recall.jsonl --windows 400 --max-minutes 16 \
          --max-steps 205 --eval-windows 48 --out runs/real/s2g-wide3
        cp runs/real/s2g-wide3/metrics.json $OUT/fidelity-s2g-512-wide3.json ;;
      score)
        $FOLD eval --task retrieval --sender $SMOL --receiver $GEMMA --lengths 512,1024,2048 --docs 32 --methods '' \
          --adapter runs/real/s2g-wide3 --adapter runs/real/s2g-wide2 --json $OUT/retrieval-s2g-wide3.json \
          --plot $OUT/retrieval-s2g-wide3.png
        $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
          --adapter runs/real/s2g-wide3 --json $OUT/fidelity-s2g-2048-wide3.json ;;
    esac
    ;;
  wide4)
    # wide3's run (runs/real/wide-recall.jsonl: `wide3 train` writes it) with --copy-weight 3: targets that repeat the
    # context (34% of that text's continuation tokens) carry 4x the loss, 68% of it in all.
    case "${2:-train}" in
      train)
        $FOLD train --sender $SMOL --receiver $GEMMA --data runs/real/wide-recall.jsonl --windows 400 --max-minutes 16 \
          --max-steps 205 --copy-weight 3 --eval-windows 48 --out runs/real/s2g-wide4
        cp runs/real/s2g-wide4/metrics.json $OUT/fidelity-s2g-512-wide4.json ;;
      score)
        $FOLD eval --task retrieval --sender $SMOL --receiver $GEMMA --lengths 512,1024,2048 --docs 32 --methods '' \
          --adapter runs/real/s2g-wide4 --json $OUT/retrieval-s2g-wide4.json --plot $OUT/retrieval-s2g-wide4.png
        $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
          --adapter runs/real/s2g-wide4 --json $OUT/fidelity-s2g-2048-wide4.json ;;
    esac
    ;;
  wide5)
    # SmolLM2 -> Gemma 3 whose maps read 4 sender layers each (2 before): the probe
    # benchmarks/probes/sources_per_layer.py put closed-form KV Ridge at 0.217 / 0.235 / 0.261 with 2 / 3 / 4.
    # v1.1.0's text and 12-minute budget (320 windows), with the step count set to what fits, so the rate decays.
    case "${2:-train}" in
      train)
        /usr/bin/time -v $FOLD train --sender $SMOL --receiver $GEMMA --data bundled:wide --windows 320 --max-minutes 12 \
          --max-steps 150 --sources-per-layer 4 --eval-windows 48 --out runs/real/s2g-wide5 2> runs/real/s2g-wide5.time
        cp runs/real/s2g-wide5/metrics.json $OUT/fidelity-s2g-512-wide5.json
        grep -E "Elapsed|Maximum resident" runs/real/s2g-wide5.time > $OUT/train-s2g-wide5-time.txt ;;
      score)
        $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
          --adapter runs/real/s2g-wide5 --json $OUT/fidelity-s2g-2048-wide5.json ;;
      baseline)  # KV Ridge with the same 4 sources per map, on the same windows (closed form on the first 64)
        $FOLD train --sender $SMOL --receiver $GEMMA --data bundled:wide --windows 320 --eval-windows 48 --method kv-ridge \
          --sources-per-layer 4 --out runs/real/s2g-kv-ridge-wide5
        cp runs/real/s2g-kv-ridge-wide5/metrics.json $OUT/fidelity-s2g-512-kv-ridge-wide5.json
        $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
          --adapter runs/real/s2g-kv-ridge-wide5 --json $OUT/fidelity-s2g-2048-kv-ridge-wide5.json ;;
      retrieval)
        $FOLD eval --task retrieval --sender $SMOL --receiver $GEMMA --lengths 512,1024,2048 --docs 32 --methods '' \
          --adapter runs/real/s2g-wide5 --json $OUT/retrieval-s2g-wide5.json --plot $OUT/retrieval-s2g-wide5.png ;;
    esac
    ;;
  eval)
    # What the README's quick start names: hf-fold eval on the real pair both ways, the registered adapter beside
    # recolor and kv-ridge fitted on the training text (prints the tables; the committed figures come from below).
    $FOLD eval --sender $SMOL --receiver $GEMMA --methods recolor,kv-ridge --calib-data bundled:train-natural --windows 48
    $FOLD eval --sender $GEMMA --receiver $SMOL --methods recolor,kv-ridge --calib-data bundled:train-natural --windows 48
    ;;
  baselines)
    # Same training windows (the first 160 of bundled:train-natural), same held-out table as `train`. kv-ridge is
    # closed form on the 64 statistics windows; dense-latent gets 200 MSE + 200 receiver-NLL steps at batch 2,
    # about the 175-221 steps heterofold ran in its 12 minutes.
    SAME="--data bundled:train-natural --eval-windows 48"
    for dir in g2s s2g; do
      if [ $dir = g2s ]; then PAIR="--sender $GEMMA --receiver $SMOL"; else PAIR="--sender $SMOL --receiver $GEMMA"; fi
      $FOLD train $PAIR $SAME --method kv-ridge --out runs/real/$dir-kv-ridge
      cp runs/real/$dir-kv-ridge/metrics.json $OUT/fidelity-$dir-512-kv-ridge.json
      $FOLD train $PAIR $SAME --method dense-latent --max-steps 200 --out runs/real/$dir-dense-latent
      cp runs/real/$dir-dense-latent/metrics.json $OUT/fidelity-$dir-512-dense-latent.json
    done
    ;;
  long)
    if [ "${2:-}" = wide ]; then  # the bundled:wide adapters alone, on the same 16 windows as the rest
      $FOLD eval --sender $GEMMA --receiver $SMOL --context-tokens 2048 --windows 16 --methods '' \
        --adapter runs/real/g2s-wide --json $OUT/fidelity-g2s-2048-wide.json
      $FOLD eval --sender $SMOL --receiver $GEMMA --context-tokens 2048 --windows 16 --methods '' \
        --adapter runs/real/s2g-wide --json $OUT/fidelity-s2g-2048-wide.json
      exit 0
    fi
    # recolor is fitted here on the same training text; the trained adapters (those present) are scored beside it.
    LONG="--context-tokens 2048 --windows 16 --calib-windows 32 --methods recolor --calib-data bundled:train-natural"
    $FOLD eval --sender $GEMMA --receiver $SMOL $LONG $(adapters runs/real/g2s runs/real/g2s-kv-ridge \
      runs/real/g2s-dense-latent) --json $OUT/fidelity-g2s-2048.json
    $FOLD eval --sender $SMOL --receiver $GEMMA $LONG $(adapters runs/real/s2g-natural runs/real/s2g-kv-ridge \
      runs/real/s2g-dense-latent) --json $OUT/fidelity-s2g-2048.json
    ;;
  prose)
    # bundled:unseen lists its code first, and windows are taken one per document in order, so the 512-token
    # tables' 48 windows (and the 2048 ones' 16) are all third-party code: this scores the prose (19 READMEs).
    PROSE="--data bundled:unseen-prose --windows 32"
    $FOLD eval --sender $GEMMA --receiver $SMOL $PROSE --methods "" $(adapters runs/real/g2s-wide runs/real/g2s \
      runs/real/g2s-kv-ridge-wide) --json $OUT/fidelity-g2s-512-prose.json
    $FOLD eval --sender $SMOL --receiver $GEMMA $PROSE --methods "" $(adapters runs/real/s2g-wide runs/real/s2g-natural \
      runs/real/s2g-kv-ridge-wide) --json $OUT/fidelity-s2g-512-prose.json
    ;;
  retrieval)
    if [ "${2:-}" = mixed ]; then
      # The first SmolLM2 -> Gemma 3 run (runs/real/s2g, trained on bundled:train, whose windows are mostly synthetic
      # recall documents; the eval draws no fact that occurs there): the one adapter here that copies codes.
      $FOLD eval --task retrieval --sender $SMOL --receiver $GEMMA --lengths 512,1024,2048 --docs 32 --methods '' \
        --adapter runs/real/s2g --json $OUT/retrieval-s2g-mixed-train.json --plot $OUT/retrieval-s2g-mixed-train.png
    else
      $FOLD eval --task retrieval --sender $SMOL --receiver $GEMMA --lengths 512,1024,2048 --docs 32 --methods recolor \
        --calib-data bundled:train-natural --adapter runs/real/s2g-wide --adapter runs/real/s2g-kv-ridge \
        --json $OUT/retrieval-s2g.json --plot $OUT/retrieval-s2g.png
    fi
    ;;
  bench)
    # One direction with `bench s2g` or `bench g2s`, both with `bench all`; a third word `bfloat16` runs the models,
    # caches and maps in bf16 (AMX matrix units on this CPU), written to bench-*-bf16.*.
    DTYPE=${3:-float32}
    SUFFIX=$([ "$DTYPE" = float32 ] && echo "" || echo "-bf16")
    BENCH="--contexts 256,1024,2048,4096,8192 --repeats 3 --dtype $DTYPE"
    if [ "${2:-all}" != g2s ]; then
      $FOLD bench --sender $SMOL --receiver $GEMMA $BENCH --json $OUT/bench-s2g$SUFFIX.json --plot $OUT/bench-s2g$SUFFIX.png
    fi
    if [ "${2:-all}" != s2g ]; then
      $FOLD bench --sender $GEMMA --receiver $SMOL $BENCH --json $OUT/bench-g2s$SUFFIX.json --plot $OUT/bench-g2s$SUFFIX.png
    fi
    ;;
  bf16)
    # What bf16 maps and models cost in quality: the shipped adapters scored in bf16 on the 512 tables' 48 windows.
    $FOLD eval --sender $GEMMA --receiver $SMOL --windows 48 --methods "" --dtype bfloat16 \
      --adapter runs/real/g2s-wide --json $OUT/fidelity-g2s-512-bf16.json
    $FOLD eval --sender $SMOL --receiver $GEMMA --windows 48 --methods "" --dtype bfloat16 \
      $(adapters runs/real/s2g-wide2 runs/real/s2g-wide) --json $OUT/fidelity-s2g-512-bf16.json
    ;;
  *)
    echo "usage: bash benchmarks/real_pair.sh train|wide|wide-g2s-memory|wide2|wide3|wide4|wide5|eval|baselines|long|prose|retrieval|bench|bf16" >&2
    exit 2
    ;;
esac
