"""Gemma 3 -> SmolLM2: the bench's own ``run_bench`` on heterofold v1.1.0 and its rank-64 and rank-32 packages only
(no baselines fitted, so it runs in minutes), with a given number of torch threads.

    python benchmarks/bench_low_rank_threads.py THREADS OUT.json

Why: on a loaded machine two OpenMP threads wait on each other at every GEMM, and a low-rank map makes twice as
many (smaller) GEMM calls as the full one, so a 2-thread bench there measures the barriers, not the FLOPs.
"""
import sys, torch
from heterofold_hub.base_models.loading import Side
from heterofold_hub.hub.resolve import resolve_adapter
from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.bench import run_bench
from heterofold_hub.io import write_json_atomic
torch.set_num_threads(int(sys.argv[1]))
s, r = Side.load("gguf/gemma3-270m-q4_k_m"), Side.load("gguf/smollm2-135m-instruct-q4_1")
adapters = {"heterofold": resolve_adapter(s, r).adapter,
            **{f"g2s-rank{k}": resolve_adapter(s, r, adapter=f"runs/low-rank/g2s-rank{k}").adapter for k in (64, 32)}}
result = run_bench(s, r, adapters, read_texts("bundled:unseen"), [512, 2048], repeats=3)
result["note"] = f"benchmarks/bench_low_rank_threads.py {sys.argv[1]} (run_bench without the fitted baselines), torch threads {sys.argv[1]}"
write_json_atomic(sys.argv[2], result)
for row in result["rows"]:
    print(row["context_tokens"], f"prefill {row['prefill_s']*1e3:.0f} plan {row['plan_s']*1e3:.0f}",
          {k: f"{v*1e3:.0f} ms e2e {row['speedup']['end_to_end'][k]:.1f}x map {row['speedup']['map_only'][k]:.1f}x" for k, v in row["transfer_s"].items()})
