"""Are v1.2.0's mapped keys larger than v1.1.0's? Gemma 3 -> SmolLM2: the mean key norm (per head and position) of
each receiver layer after each version's transfer, beside SmolLM2's own prefill of the same two unseen-code windows
(2000 characters each, one at a time, so no padding enters the means). Asked because scaling the mapped keys by 0.6
let a recomputed line win attention with v1.1.0 but not with v1.2.0 (docs/results/retrieval.md).

    .venv/bin/python benchmarks/probes/mapped_key_norms.py | tee benchmarks/results/real/mapped-key-norms-g2s.txt
"""
import torch

from heterofold_hub import HeteroFoldModel
from heterofold_hub.data.texts import read_texts
from heterofold_hub.transfer.pipeline import native_prefill

SENDER, RECEIVER = "gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1"
REPO, VERSIONS = "heterofold/gemma3-270m-to-smollm2-135m", ("v1.1.0", "v1.2.0")


def key_norms(cache) -> torch.Tensor:
    """``[layers]``: the mean over heads and positions of each layer's key norm."""
    return torch.stack([layer.keys.norm(dim=-1).mean() for layer in cache.layers])


texts = [t[:2000] for t in read_texts("bundled:unseen-code")[:2]]
models = {v: HeteroFoldModel.from_pretrained(SENDER, RECEIVER, adapter=REPO, revision=v, load_sender=True)
          for v in VERSIONS}
receiver = models[VERSIONS[0]].receiver
with torch.no_grad():
    own = torch.stack([key_norms(native_prefill(receiver, t).cache) for t in texts]).mean(0)
    mapped = {v: torch.stack([key_norms(m.transfer(m.prefill_sender(t), t).cache) for t in texts]).mean(0)
              for v, m in models.items()}
print("layer  native  " + "  ".join(VERSIONS) + "  (mean key norm per head and position)")
for i, norm in enumerate(own.tolist()):
    print(f"{i:5d} {norm:7.2f} " + " ".join(f"{mapped[v][i]:7.2f}" for v in VERSIONS))
print("mean ratio mapped/native:", {v: round(float((mapped[v] / own).mean()), 4) for v in VERSIONS})
