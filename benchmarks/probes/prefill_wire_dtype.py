"""What a sender prefill costs on the wire, and what sending its K/V as bfloat16 costs in quality.

Per direction of the real pair, on windows of unseen text: the sender prefills each window's context, the prefill is
saved as float32 and as bfloat16 (``SenderPrefill.save_pretrained(..., dtype=)``), loaded back (cast to float32) and
transferred by the registered adapter (pure transfer); the receiver then reads the continuation from each cache.
Reported: bytes per 1K sender tokens of each file (measured on a 1024-token file), and per wire dtype the usual
fidelity (recovered, KL against native prefill, top-1 agreement), plus KL(float32 wire || bfloat16 wire) and top-1
agreement between the two, with standard errors over windows.

    python benchmarks/probes/prefill_wire_dtype.py --windows 16 --out benchmarks/results/real/probe-prefill-wire-dtype.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from heterofold_hub import HeteroFoldModel  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.data.windows import make_windows  # noqa: E402
from heterofold_hub.evaluation.fidelity import summarise, token_measures  # noqa: E402
from heterofold_hub.transfer.kvcache import view_of  # noqa: E402
from heterofold_hub.transfer.sender import SenderPrefill  # noqa: E402

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
DIRECTIONS = {"s2g": (SMOL, GEMMA), "g2s": (GEMMA, SMOL)}
WIRES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def bytes_per_1k(model: HeteroFoldModel, text: str, folder: Path) -> dict:
    """File sizes of a prefill of exactly 1024 sender tokens, per wire dtype."""
    ids = model.sender.tokenizer(text, add_special_tokens=False)["input_ids"]
    prefix = len(model.sender.prefix_ids())
    cut = model.sender.tokenizer.decode(ids[: 1024 - prefix])
    prefill = model.prefill_sender(cut)
    tokens = int(prefill.attention_mask.sum())
    sizes = {name: prefill.save_pretrained(folder / f"{name}.safetensors", dtype=dtype).stat().st_size
             for name, dtype in WIRES.items()}
    spec = model.sender.spec
    return {"tokens": tokens, **{f"{name}_bytes_per_1k": round(size * 1000 / tokens) for name, size in sizes.items()},
            "kv_float32_bytes_per_1k": spec.num_layers * 2 * spec.kv_heads * spec.head_dim * 4 * 1000}


@torch.no_grad()
def continuation_logits(receiver, result, query: torch.Tensor) -> torch.Tensor:
    """``[1, M, V]``: the receiver reading ``query`` after ``result``'s cache (which covers all but its last token)."""
    cached = result.input_ids.shape[1] - 1
    mask = torch.ones(1, cached + query.shape[1], dtype=torch.long)
    positions = torch.arange(cached, cached + query.shape[1])[None]
    out = receiver.model(input_ids=query, attention_mask=mask, position_ids=positions, cache=view_of(result.cache))
    return out.logits.float()


@torch.no_grad()
def run(direction: str, windows: int, context: int, continuation: int, folder: Path) -> dict:
    sender, receiver = DIRECTIONS[direction]
    model = HeteroFoldModel.from_pretrained(sender, receiver, load_sender=True, local_files_only=True)
    texts = read_texts("bundled:unseen")
    sizes = bytes_per_1k(model, "\n\n".join(texts), folder)
    cut = make_windows(texts, model.receiver, max_windows=windows, context_tokens=context,
                       continuation_tokens=continuation)
    per: dict[str, dict[str, list]] = {}
    between = {"kl": [], "top1": []}
    rx = model.receiver
    for w in cut:
        prefill = model.prefill_sender(w.context)
        native_ids = torch.cat([rx.prefix_ids(), w.receiver_context, w.continuation[:-1]])[None]
        steps = len(w.continuation)
        native = rx.model(input_ids=native_ids).logits[:, -steps:].float()
        blind = rx.model(input_ids=torch.cat([rx.prefix_ids(), w.receiver_context[-1:], w.continuation[:-1]])[None]
                         ).logits[:, -steps:].float()
        logits = {"native": native, "no-context": blind}
        for name, dtype in WIRES.items():
            loaded = SenderPrefill.from_pretrained(prefill.save_pretrained(folder / f"w.{name}.safetensors",
                                                                           dtype=dtype), sender=model.sender)
            result = model.transfer(loaded, w.context, recompute=0)
            assert torch.equal(result.input_ids[0], native_ids[0, : result.input_ids.shape[1]]), "tokenization differs"
            query = torch.cat([result.input_ids[:, -1:], w.continuation[None, :-1]], 1)
            logits[f"{name} wire"] = continuation_logits(rx, result, query)
        targets = w.continuation[None]
        for name, values in logits.items():
            for key, v in token_measures(values, native, targets).items():
                per.setdefault(name, {}).setdefault(key, []).append(v)
        pair = token_measures(logits["bfloat16 wire"], logits["float32 wire"], targets)
        between["kl"].append(pair["kl"])
        between["top1"].append(pair["top1"])
    merged = {name: {k: torch.cat(v) for k, v in m.items()} for name, m in per.items()}
    summary = summarise(merged)
    kl, top1 = torch.cat(between["kl"]), torch.cat(between["top1"])
    n = len(kl) ** 0.5
    return {"sender": sender, "receiver": receiver, "windows": len(cut), "context_tokens": context,
            "continuation_tokens": continuation, "bytes": sizes,
            "methods": {k: summary[k] for k in ("float32 wire", "bfloat16 wire")},
            "benefit_nats": float((merged["no-context"]["nll"] - merged["native"]["nll"]).mean()),
            "bf16_vs_f32": {"kl": float(kl.mean()), "kl_se": float(kl.std() / n), "kl_max": float(kl.max()),
                            "top1": float(top1.mean()), "top1_se": float(top1.std() / n)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS), choices=list(DIRECTIONS))
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--continuation", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("probe-prefill-wire-dtype.json"))
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        results = {d: run(d, args.windows, args.context, args.continuation, Path(folder)) for d in args.directions}
    record = {"command": " ".join(sys.argv), "threads": torch.get_num_threads(), "seconds": round(time.time() - started),
              "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for d, r in results.items():
        m = r["methods"]
        print(f"{d}: bytes/1K f32 {r['bytes']['float32_bytes_per_1k']:,} bf16 {r['bytes']['bfloat16_bytes_per_1k']:,}; "
              f"recovered f32 {m['float32 wire']['recovered']:.4f} bf16 {m['bfloat16 wire']['recovered']:.4f}; "
              f"KL(native||.) f32 {m['float32 wire']['kl']:.4f} bf16 {m['bfloat16 wire']['kl']:.4f}; "
              f"KL(f32||bf16) {r['bf16_vs_f32']['kl']:.2e} top1 {r['bf16_vs_f32']['top1']:.4f}")


if __name__ == "__main__":
    main()
