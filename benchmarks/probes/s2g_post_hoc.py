"""Two post-hoc changes to the SmolLM2 -> Gemma 3 adapter, scored on held-out windows beside the adapter as is.

    .venv/bin/python benchmarks/probes/s2g_post_hoc.py [ADAPTER_DIR] [--windows 16] [--json OUT]

- ``key-norm-0.2`` / ``key-norm-0.05``: each predicted (un-rotated) key rescaled so that its k_norm-normalised norm
  over the dimensions whose scale ``1 + w`` exceeds 0.2 (0.05) equals the native keys' mean on training text
  (``bundled:wide``, 6 documents). Gemma 3's keys lie on that ellipsoid; a regression's predictions shrink off it.
- ``native-layer-0``: receiver layer 0 taken from the receiver itself (its keys and values depend only on the token
  ids, so they cost an embedding lookup and two projections, no attention).

Neither is part of the library: this script measures whether either should be (README: "What limits").
"""

import argparse
import json
from pathlib import Path

import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.data.windows import make_windows
from heterofold_hub.evaluation.fidelity import evaluate
from heterofold_hub.methods import load_adapter
from heterofold_hub.io import write_json_atomic
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.transfer import forward
from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.transfer.reference import receiver_targets

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


def native_key_norms(gemma: Side, scale: torch.Tensor, mask: torch.Tensor, docs: int = 6) -> torch.Tensor:
    """``[L]``: per layer, the mean norm of native un-rotated keys divided by the scale, over ``mask``'s dims."""
    norms = torch.zeros(len(scale))
    for text in read_texts("bundled:wide")[:docs]:
        ids = gemma.tokenizer(text, return_tensors="pt").input_ids[:, :500]  # within the sliding window
        with torch.no_grad():
            kv = [(l.keys, l.values) for l in gemma.model(input_ids=ids, use_cache=True).cache.layers]
        for r, (k, _) in enumerate(receiver_targets(kv, torch.arange(ids.shape[1])[None], gemma.rope)):
            norms[r] += (k[0][:, mask[r]] / scale[r][mask[r]]).norm(dim=-1).mean() / docs
    return norms


class KeyNorm(PairAdapter):
    """``inner`` with each predicted key rescaled onto the native keys' mean normalised norm."""

    def __init__(self, inner: PairAdapter, scale: torch.Tensor, mask: torch.Tensor, target: torch.Tensor):
        super().__init__(inner.config)
        self.inner, self.scale, self.mask, self.target = inner, scale, mask, target

    def map_layer(self, r, keys, values):
        k, v = self.inner.map_layer(r, keys, values)  # one KV head of 256: heads need no reshaping
        m = self.mask[r]
        norm = (k[..., m] / self.scale[r][m]).norm(dim=-1, keepdim=True)
        return k * (self.target[r] / norm.clamp_min(1e-3)), v


class NativeLayer0(PairAdapter):
    """``inner``, marked so that the patched ``assemble`` below puts the receiver's own layer 0 in place."""

    def __init__(self, inner: PairAdapter):
        super().__init__(inner.config)
        self.inner = inner

    def map_layer(self, r, keys, values):
        return self.inner.map_layer(r, keys, values)


def with_native_layer_0(receiver: Side):
    assemble = forward.assemble

    def patched(adapter, features, alignment, rope, native, *, dtype):
        layers = assemble(adapter, features, alignment, rope, native, dtype=dtype)
        if isinstance(adapter, NativeLayer0):
            with torch.no_grad():  # the full forward's layer 0 equals layer 0 computed alone: nothing flows into it
                out = receiver.model.model(input_ids=alignment.receiver_ids, attention_mask=alignment.attention_mask,
                                           position_ids=alignment.receiver_positions, use_cache=True, cache=full_cache())
            layers[0] = (out.cache.layers[0].keys.to(dtype), out.cache.layers[0].values.to(dtype))
        return layers

    forward.assemble = patched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("adapter", nargs="?", default="runs/real/s2g-wide2")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--context-tokens", type=int, default=512)
    parser.add_argument("--json", type=Path, help="also write the evaluation result here")
    args = parser.parse_args()
    smol, gemma = Side.load(SMOL), Side.load(GEMMA)
    adapter = load_adapter(args.adapter)
    scale = torch.stack([1.0 + layer.self_attn.k_norm.weight.float() for layer in gemma.model.model.layers])  # [L, 256]
    variants = {"as is": adapter, "native-layer-0": NativeLayer0(adapter)}
    for threshold in (0.2, 0.05):
        mask = scale.abs() > threshold
        variants[f"key-norm-{threshold}"] = KeyNorm(adapter, scale, mask, native_key_norms(gemma, scale, mask))
    with_native_layer_0(gemma)
    windows = make_windows(read_texts("bundled:unseen"), gemma, max_windows=args.windows,
                           context_tokens=args.context_tokens, continuation_tokens=64)
    result = evaluate(smol, gemma, variants, windows, batch_size=4)
    if args.json:
        write_json_atomic(args.json, {**result, "adapter": args.adapter})
    print(json.dumps({name: {k: round(row[k], 4) for k in ("recovered", "recovered_se", "kl")}
                      for name, row in result["methods"].items()}, indent=1))


if __name__ == "__main__":
    main()
