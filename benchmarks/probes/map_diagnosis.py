"""Where does the pure map lose? Diagnose before fitting: the mapped cache with one part made native at a time.

On fidelity windows (as ``hf-fold eval`` scores them), the receiver's mapped cache is compared with hybrids that
take one part from the receiver's own prefill of the same context, everything else mapped:

- ``layer L``: receiver layer L's keys and values native;
- ``keys`` / ``values``: every layer's keys (values mapped), or every layer's values (keys mapped);
- token classes, every layer, only the class's rows native: ``first 16`` (the first positions after the native
  prefix), ``spans sender tokens`` (a receiver token whose text covers several sender tokens: it reads only the
  last), ``splits a sender token`` (a receiver token drawing on the same sender token as the one before it) and
  ``one to one`` (the rest).

``gained`` is the hybrid's recovered minus the pure map's, on the same windows: what the map loses there. The
class's share of the mapped rows is printed beside it (a class that is 5% of the rows and gains 0.2 is where the
loss concentrates). Native K/V come from the receiver's recompute of every mapped row (checked: the all-native
hybrid recovers 1).

    python benchmarks/probes/map_diagnosis.py --direction s2g --windows 16 --context 512 --data bundled:unseen \
        --out benchmarks/results/real/probe-map-diagnosis-s2g-512.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.data.windows import make_windows  # noqa: E402
from heterofold_hub.evaluation.fidelity import summarise, token_measures  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402
from heterofold_hub.transfer.forward import native_logits, no_context_logits  # noqa: E402
from heterofold_hub.transfer.kvcache import build_cache  # noqa: E402
from heterofold_hub.transfer.recompute import recompute  # noqa: E402
from heterofold_hub.transfer.reference import assemble, native_prefix_kv  # noqa: E402

MODELS = {"s2g": ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"),
          "g2s": ("gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1")}
FIRST = 16


def token_classes(alignment) -> dict[str, torch.Tensor]:
    """``[B, Tr]`` bool masks over the mapped rows: how each receiver token draws on the sender's tokens."""
    mapped = alignment.mapped_mask
    index = alignment.sender_index
    step = torch.zeros_like(index)
    step[:, 1:] = index[:, 1:] - index[:, :-1]
    order = mapped.long().cumsum(1)  # 1 for the first mapped row of each left-padded row
    return {"first 16": mapped & (order <= FIRST), "spans sender tokens": mapped & (step > 1),
            "splits a sender token": mapped & (step == 0), "one to one": mapped & (step == 1)}


def replaced(mapped: list, native: list, *, layers=None, rows=None, part: str = "kv") -> list:
    """``mapped`` with ``native`` K/V taken at ``layers`` (None: all), ``rows`` ``[B, Tr]`` (None: all), for the
    keys (``part="k"``), the values (``"v"``) or both."""
    out = []
    for i, ((mk, mv), (nk, nv)) in enumerate(zip(mapped, native)):
        if layers is not None and i not in layers:
            out.append((mk, mv))
            continue
        pick = (torch.ones(mk.shape[0], mk.shape[2], dtype=torch.bool) if rows is None else rows)[:, None, :, None]
        out.append((torch.where(pick, nk, mk) if "k" in part else mk, torch.where(pick, nv, mv) if "v" in part else mv))
    return out


@torch.no_grad()
def continue_from(receiver, batch, layers) -> torch.Tensor:
    """``[B, M, V]``: the receiver continuing from ``layers`` (every position of every layer)."""
    alignment, steps = batch.alignment, batch.query.shape[1]
    positions = alignment.receiver_positions[:, -1:] + 1 + torch.arange(steps)
    mask = torch.cat([alignment.attention_mask, torch.ones_like(batch.query)], dim=1)
    return receiver.model(input_ids=batch.query, attention_mask=mask, position_ids=positions,
                          cache=build_cache(layers)).logits.float()


@torch.no_grad()
def diagnose(model, windows, batch_size: int) -> tuple[dict, dict]:
    """Per variant, the fidelity summary over ``windows``; and each token class's share of the mapped rows."""
    receiver, adapter = model.receiver, model.adapter
    per_window: dict[str, dict[str, list]] = {}
    counts = {}
    windows_of = [None if w is None else w + 1 for w in receiver.spec.windows]
    for start in range(0, len(windows), batch_size):
        batch = prepare_batch(windows[start:start + batch_size], model.sender, receiver)
        alignment = batch.alignment
        prefix = native_prefix_kv(receiver.model, alignment)
        mapped = assemble(adapter, batch.features, alignment, receiver.rope, prefix, dtype=receiver.model.dtype)
        columns = torch.arange(alignment.receiver_ids.shape[1]).expand_as(alignment.receiver_ids)
        native = recompute(receiver.model, [(k.clone(), v.clone()) for k, v in mapped], alignment.receiver_ids,
                           alignment.attention_mask, columns, alignment.mapped_mask, windows=windows_of)
        classes = token_classes(alignment)
        for name, mask in classes.items():
            counts[name] = counts.get(name, 0) + int(mask.sum())
        counts["mapped rows"] = counts.get("mapped rows", 0) + int(alignment.mapped_mask.sum())
        variants = {"pure map": mapped, "all native (check)": native,
                    "keys native": replaced(mapped, native, part="k"),
                    "values native": replaced(mapped, native, part="v"),
                    **{f"layer {i}": replaced(mapped, native, layers={i}) for i in range(len(mapped))},
                    **{name: replaced(mapped, native, rows=mask) for name, mask in classes.items()}}
        reference = native_logits(receiver, batch)
        logits = {"native": reference, "no-context": no_context_logits(receiver, batch)}
        logits |= {name: continue_from(receiver, batch, layers) for name, layers in variants.items()}
        for name, values in logits.items():
            for key, v in token_measures(values, reference, batch.targets).items():
                per_window.setdefault(name, {}).setdefault(key, []).append(v)
        print(f"windows {start + len(batch.query)}/{len(windows)}", file=sys.stderr, flush=True)
    summary = summarise({name: {k: torch.cat(v) for k, v in m.items()} for name, m in per_window.items()})
    return summary, {name: n / counts["mapped rows"] for name, n in counts.items() if name != "mapped rows"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=sorted(MODELS), default="s2g")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--continuation", type=int, default=64)
    parser.add_argument("--data", default="bundled:unseen")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained(*MODELS[args.direction], load_sender=True)
    windows = make_windows(read_texts(args.data), model.receiver, max_windows=args.windows,
                           context_tokens=args.context, continuation_tokens=args.continuation)
    summary, shares = diagnose(model, windows, args.batch_size)
    pure = summary["pure map"]["recovered"]
    print(f"{'variant':28} {'recovered':>10} {'gained':>8} {'KL':>7} {'rows':>6}")
    for name, row in summary.items():
        share = f"{shares[name]:.3f}" if name in shares else ""
        print(f"{name:28} {row['recovered']:10.3f} {row['recovered'] - pure:8.3f} {row['kl']:7.3f} {share:>6}")
    if args.out:
        write_json_atomic(args.out, {"direction": args.direction, "adapter": model.pipeline.source,
                                     "data": args.data, "windows": len(windows), "context_tokens": args.context,
                                     "continuation_tokens": args.continuation, "variants": summary,
                                     "class_shares": shares, "command": " ".join(sys.argv)})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
