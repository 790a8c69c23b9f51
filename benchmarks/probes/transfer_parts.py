"""Where a transfer's time goes: the whole fast path beside its parts, timed alone on the same shapes, in one run.

    .venv/bin/python benchmarks/probes/transfer_parts.py [--direction g2s|s2g] [--tokens 2048] [--repeats 7]
                                                         [--map-dtype bfloat16]

Parts (medians over ``repeats`` rounds, each round running every part once, in turn):
- ``matmuls``: one ``addmm`` per receiver layer, keys and values, of the adapter's shapes ([Tr, in] x [in, out]);
- ``gathers``: the sources of each group of receiver layers that share them, gathered (keys un-rotated), as the
  fast path does with the C kernel;
- ``output turns``: the receiver's RoPE applied to every layer's mapped keys;
- with ``--map-dtype bfloat16`` (the products in bf16, the cache float32, as ``from_pretrained(map_dtype=)`` runs
  them): the matmuls run on bf16 inputs and weights, the gathers round their results to bf16 as they write them, and
  ``widen and turns`` (instead of ``output turns``) widens every layer's bf16 products into float32 rows, turning the
  keys on the way, as the fast path does with the C kernels.
The remainder is what the transfer spends elsewhere (native-prefix rows, cache assembly, Python).
"""

import argparse

import torch

from heterofold_hub import HeteroFoldModel
from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.bench import median_seconds, text_of_length
from heterofold_hub.transfer import kernels
from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.transfer.plan import build_plan

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=("g2s", "s2g"), default="g2s")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--map-dtype", choices=("bfloat16",), default=None)
    args = parser.parse_args()
    ids = (GEMMA, SMOL) if args.direction == "g2s" else (SMOL, GEMMA)
    narrow = args.map_dtype and getattr(torch, args.map_dtype)
    model = HeteroFoldModel.from_pretrained(*ids, load_sender=True, map_dtype=narrow)
    sender, receiver, adapter = model.sender, model.receiver, model.adapter
    text = text_of_length(read_texts("bundled:unseen"), receiver, args.tokens)
    with torch.no_grad():
        inputs = sender.tokenizer(text, return_tensors="pt")
        cache = sender.model(**inputs, use_cache=True, cache=full_cache()).cache
    plan = build_plan(sender, receiver, text, min_native=adapter.config.min_native)
    layers = [(l.keys, l.values) for l in cache.layers]
    c, n = adapter.config, plan.sender_rows.shape[0]
    maps = [adapter.affine_maps(r) for r in range(len(c.layer_sources))]
    x = torch.randn(n, c.in_features)
    outs = torch.empty(n, c.out_features)
    x_narrow = x.to(narrow) if narrow else x  # the products' operands, as the map kind runs them
    outs_narrow = outs.to(narrow) if narrow else outs
    receiver_heads = (c.receiver_spec["kv_heads"], c.receiver_spec["head_dim"])
    groups = sorted({tuple(s) for s in c.layer_sources})
    k = kernels.load()
    rows = plan.sender_rows.flatten()
    unrotate = plan.turns("unrotate", torch.float32)
    rotate = plan.turns("rotate", torch.float32)
    width = c.sender_spec["kv_heads"] * c.sender_spec["head_dim"]
    block = torch.empty(n, c.sender_spec["kv_heads"], c.sender_spec["head_dim"], dtype=narrow or torch.float32)

    def matmuls():
        for (wk, bk), (wv, bv) in maps:
            torch.addmm(bk, x_narrow, wk, out=outs_narrow)
            torch.addmm(bv, x_narrow, wv, out=outs_narrow)

    def gathers():
        for sources in groups:
            for s in sources:
                keys, values = (t.reshape(-1, c.sender_spec["head_dim"]) for t in layers[s])
                turn = unrotate[s].at(slice(0, n)) if unrotate[s] is not None else None
                k.gather_turn(keys, rows, block, turn)
                k.gather_turn(values, rows, block, None)

    def output_turns():
        y = outs.view(n, *receiver_heads)
        for r in range(len(c.layer_sources)):
            if rotate[r] is not None:
                k.turn(y, rotate[r].at(slice(0, n)))

    def widen_and_turns():
        y, products = outs.view(n, *receiver_heads), outs_narrow.view(n, *receiver_heads)
        for r in range(len(c.layer_sources)):
            k.widen_turn(products, y, rotate[r].at(slice(0, n)) if rotate[r] is not None else None)  # keys
            k.widen_turn(products, y)  # values

    transfer = lambda: model.pipeline.transfer(cache, plan=plan)  # noqa: E731
    calls = {"transfer": transfer, "matmuls": matmuls, "gathers": gathers}
    calls.update({"widen and turns": widen_and_turns} if narrow else {"output turns": output_turns})
    seconds = median_seconds(calls, args.repeats)
    parts = sum(s for name, s in seconds.items() if name != "transfer")
    products = f", products in {args.map_dtype}" if narrow else ""
    print(f"{args.direction} at {args.tokens} receiver tokens ({n} rows, {len(c.layer_sources)} receiver layers, "
          f"{len(groups)} source groups, in {c.in_features} -> out {c.out_features}{products}), "
          f"{torch.get_num_threads()} threads:")
    for name, s in seconds.items():
        print(f"  {name:15s} {s * 1e3:7.1f} ms")
    print(f"  {'remainder':15s} {(seconds['transfer'] - parts) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
