"""Where retrieval goes when the fact line is native: attention from the question onto the fact, layer by layer.

For retrieval documents (code format, facts at the top), the receiver reads its question over five caches: native
prefill; the pure transfer; the transfer with the asked fact's line recomputed (oracle); the same with its first two
layers native for every position (oracle + L2); and splices of the oracle cache that keep only the recomputed keys
or only the recomputed values over the fact line. Per cache: exact-match accuracy, and per receiver layer the
attention mass the question's last token puts on the asked fact's line and on the first token (the sink), mean over
heads and documents.

    python benchmarks/probes/fact_attention.py --docs 16 --length 512
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.evaluation.handoff import make_handoff_prompts  # noqa: E402
from heterofold_hub.evaluation.retrieval import exact_match, filler_texts  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.transfer.kvcache import build_cache, cache_layers  # noqa: E402
from heterofold_hub.transfer.pipeline import TransferResult, native_prefill  # noqa: E402
from heterofold_hub.transfer.recompute import receiver_offsets  # noqa: E402


def spliced(oracle: TransferResult, mapped: TransferResult, keep: str, windows) -> TransferResult:
    """The oracle cache with the mapped ``values`` (keep="keys") or mapped ``keys`` (keep="values") everywhere."""
    layers = []
    for (ok, ov), (mk, mv) in zip(cache_layers(oracle.cache), cache_layers(mapped.cache)):
        layers.append((ok, mv) if keep == "keys" else (mk, ov))
    cache = build_cache([(k.clone(), v.clone()) for k, v in layers], windows=windows,
                        tokens=oracle.input_ids.shape[1] - 1)
    return TransferResult(cache=cache, input_ids=oracle.input_ids, attention_mask=oracle.attention_mask)


@torch.no_grad()
def question_attention(model, result: TransferResult, question_ids: torch.Tensor, fact: torch.Tensor):
    """Per layer, the attention mass of the question's last token on ``fact`` columns ``[T]`` and on column 0
    (the sink), mean over heads; and the greedy answer. One row."""
    ids = torch.cat([result.input_ids[:, -1:], question_ids[None]], 1)
    mask = torch.cat([result.attention_mask, torch.ones_like(question_ids[None])], 1)
    positions = (mask.cumsum(-1) - 1)[:, -ids.shape[1]:]
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=result.cache,
                    output_attentions=True, logits_to_keep=1)
    finally:
        model.set_attn_implementation(previous)
    on_fact, on_sink = [], []
    cached = result.input_ids.shape[1] - 1
    for layer in out.attentions:  # [1, H, q, keys]; a sliding layer's keys are its window's last columns
        last = layer[0, :, -1].float()  # [H, keys]
        keys = last.shape[-1]
        columns = torch.arange(cached + ids.shape[1])[-keys:]
        on_fact.append(float(last[:, fact[columns.clamp(max=cached - 1)] & (columns < cached)].sum(-1).mean()))
        on_sink.append(float(last[:, columns == 0].sum(-1).mean()) if (columns == 0).any() else 0.0)
    return on_fact, on_sink


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    args = parser.parse_args()
    model = HeteroFoldModel.from_pretrained("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m", load_sender=True)
    receiver, tok = model.receiver, model.receiver.tokenizer
    prompts = make_handoff_prompts(filler_texts(read_texts("bundled:unseen")), receiver, args.length, args.docs, fmt="code")
    windows = receiver.spec.windows
    names = ("native", "transfer", "oracle", "oracle keys only", "oracle values only", "oracle+L2")
    rows = {name: {"hits": 0, "fact": [], "sink": []} for name in names}
    for p in prompts:
        prefill = model.prefill_sender([p.context])
        oracle = dict(select="oracle", spans=[[p.span]])
        make = {  # fresh caches each time: generate grows the cache it continues from
            "native": lambda: native_prefill(receiver, [p.context]),
            "transfer": lambda: model.transfer(prefill, [p.context]),
            "oracle": lambda: model.transfer(prefill, [p.context], **oracle),
            "oracle keys only": lambda: spliced(model.transfer(prefill, [p.context], **oracle),
                                                model.transfer(prefill, [p.context]), "keys", windows),
            "oracle values only": lambda: spliced(model.transfer(prefill, [p.context], **oracle),
                                                  model.transfer(prefill, [p.context]), "values", windows),
            "oracle+L2": lambda: model.transfer(prefill, [p.context], repair_layers=2, **oracle),
        }
        offsets = receiver_offsets(receiver, [p.context], make["native"]().input_ids.shape[1] - 1)[0]
        fact = (offsets[:, 0] < p.span[1]) & (offsets[:, 1] > p.span[0]) & (offsets[:, 1] > offsets[:, 0])
        question = torch.tensor(tok(p.question, add_special_tokens=False).input_ids)
        for name, cache in make.items():
            answer = model.generate(cache(), prompt=p.question, max_new_tokens=7, do_sample=False)
            rows[name]["hits"] += exact_match(tok.decode(answer[0], skip_special_tokens=True), p.answer)
            on_fact, on_sink = question_attention(receiver.model, cache(), question, fact)
            rows[name]["fact"].append(on_fact)
            rows[name]["sink"].append(on_sink)
    layer_types = receiver.spec.layer_types or ["full_attention"] * receiver.spec.num_layers
    result = {"length": args.length, "docs": args.docs, "layer_types": list(layer_types), "caches": {}}
    print(f"{'cache':20} acc   fact mass per layer (global layers marked *)")
    for name, row in rows.items():
        fact = torch.tensor(row["fact"]).mean(0).tolist()
        sink = torch.tensor(row["sink"]).mean(0).tolist()
        result["caches"][name] = {"accuracy": row["hits"] / args.docs, "fact_mass": fact, "sink_mass": sink}
        cells = " ".join(f"{v:.2f}{'*' if t == 'full_attention' else ''}" for v, t in zip(fact, layer_types))
        print(f"{name:20} {row['hits'] / args.docs:.2f}  {cells}")
    out = ROOT / "benchmarks" / "results" / "handoff" / f"probe-fact-attention-{args.length}.json"
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
