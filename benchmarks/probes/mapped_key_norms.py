"""Are v1.2.0's mapped keys larger than v1.1.0's? Gemma 3 -> SmolLM2: the mean key norm (per head and position) of
each receiver layer after each version's transfer, beside SmolLM2's own prefill of the same two unseen-code windows
(2000 characters each). Asked because scaling the mapped keys by 0.6 let a recomputed line win attention with v1.1.0
but not with v1.2.0 (docs/results/retrieval.md).

    .venv/bin/python benchmarks/probes/mapped_key_norms.py | tee benchmarks/results/real/mapped-key-norms-g2s.txt
"""
import torch
from heterofold_hub import HeteroFoldModel
from heterofold_hub.data.texts import read_texts
from heterofold_hub.transfer.pipeline import native_prefill
G, S = "gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1"
texts = [t[:2000] for t in read_texts("bundled:unseen-code")[:2]]
models = {v: HeteroFoldModel.from_pretrained(G, S, adapter="heterofold/gemma3-270m-to-smollm2-135m", revision=v, load_sender=True) for v in ("v1.1.0", "v1.2.0")}
native = native_prefill(models["v1.1.0"].receiver, texts)
rows = {}
for v, m in models.items():
    with torch.no_grad():
        res = m.transfer(m.prefill_sender(texts), texts)
    rows[v] = [float(l.keys.norm(dim=-1).mean()) for l in res.cache.layers]
own = [float(l.keys.norm(dim=-1).mean()) for l in native.cache.layers]
print("layer  native  v1.1.0  v1.2.0  (mean key norm per head and position)")
for i in range(len(own)):
    print(f"{i:5d} {own[i]:7.2f} {rows['v1.1.0'][i]:7.2f} {rows['v1.2.0'][i]:7.2f}")
print("mean ratio mapped/native:", {v: sum(r[i] / own[i] for i in range(len(own))) / len(own) for v, r in rows.items()})
