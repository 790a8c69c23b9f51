#!/usr/bin/env bash
# On a CUDA machine, in under 5 minutes: `hf-fold bench` on the GPU in bf16 (transfer vs prefill vs copy, both
# demo directions) and a few bf16 training steps of `hf-fold train`. Writes everything under OUT.
#
#   bash benchmarks/gpu.sh [OUT]          (default OUT: benchmarks/results/gpu)
#
# Needs the project's dependencies with a CUDA build of torch: the project's .venv if there is one, else
# $PYTHON (default python3). Each step has its own time limit so that one stuck step cannot eat the budget.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$OUT/gpu.txt"

echo "== bench (bf16, cuda)"
timeout 180 "$PY" cli.py bench --device cuda --dtype bfloat16 --contexts 512,1024,2048,4096 --repeats 10 \
  --json "$OUT/bench.json" --plot "$OUT/bench.png" | tee "$OUT/bench.txt"

echo "== train: a few bf16-mixed steps on the GPU"
start=$(date +%s)
timeout 100 "$PY" cli.py train --precision bf16-mixed --max-steps 5 --windows 16 --eval-windows 8 \
  --out "$OUT/train" | tee "$OUT/train.txt"
echo "train wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/train.txt"
