"""Float32 matmuls through oneDNN's bf16 path: what they do to the receiver's prefill and to the hand-off, in one run.

    .venv/bin/python benchmarks/probes/matmul_precision.py [--direction g2s|s2g] [--tokens 2048] [--repeats 5]
        [--adapter DIR] [--json OUT]

``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` allows oneDNN to run float32 matmuls in bf16 on CPUs with
bf16 units (AVX512-BF16, AMX). The map is matmuls and gathers; the prefill is almost all matmuls. Both are timed
under ``"none"`` (the default) and ``"bf16"``, interleaved in the same rounds (the median of ``repeats`` after a
warm-up), so the question the probe answers is whether the setting moves the ratio a user gets, not only the map.
It also prints how far each output moves (the receiver's last logits and the mapped cache, relative L2), and
whether bf16 arithmetic was used at all: one matmul under the setting against the same matmul done explicitly in
bf16. A bf16 matmul moves its output by about 3e-3; float32 summed in another order, by about 1e-7.
"""

import argparse
import json
import platform

import torch

from heterofold_hub import HeteroFoldModel
from heterofold_hub.base_models.loading import cache_only
from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.bench import median_seconds, text_of_length

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
PRECISIONS = ("none", "bf16")


def under(precision: str, fn):
    """``fn`` run with oneDNN's float32 matmul precision set to ``precision``, the default restored after."""
    def run():
        before = torch.backends.mkldnn.matmul.fp32_precision
        torch.backends.mkldnn.matmul.fp32_precision = precision
        try:
            return fn()
        finally:
            torch.backends.mkldnn.matmul.fp32_precision = before
    return run


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / a.norm())


def arithmetic_check(rows: int = 512, features: int = 640, out: int = 2048) -> dict[str, float]:
    """Relative L2 error against float32 of one random ``[rows, features] @ [features, out]`` matmul under
    ``fp32_precision="bf16"`` and done explicitly in bf16: if the first is far below the second, the setting
    did not use bf16 arithmetic, whatever its timings did."""
    generator = torch.Generator().manual_seed(0)
    a, w = torch.randn(rows, features, generator=generator), torch.randn(features, out, generator=generator)
    exact = under("none", lambda: a @ w)()
    return {"under_setting": relative(exact, under("bf16", lambda: a @ w)()),
            "explicit_bf16": relative(exact, (a.bfloat16() @ w.bfloat16()).float())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--direction", choices=("g2s", "s2g"), default="g2s")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--adapter", default=None, help="an adapter package (default: the registry's for the pair)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ids = (GEMMA, SMOL) if args.direction == "g2s" else (SMOL, GEMMA)
    model = HeteroFoldModel.from_pretrained(*ids, adapter=args.adapter, load_sender=True)
    receiver = model.receiver
    text = text_of_length(read_texts("bundled:unseen"), receiver, args.tokens)
    sender_cache = model.prefill_sender(text)
    input_ids = receiver.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        prefill = lambda: receiver.model(input_ids=input_ids, use_cache=True, **cache_only(receiver.model))  # noqa: E731
        hand_off = lambda: model.transfer(sender_cache, text, recompute=0)  # noqa: E731 plan + map, as users call it
        outputs = {p: (under(p, prefill)().logits[0, -1], under(p, hand_off)().cache) for p in PRECISIONS}
        seconds = median_seconds({f"{what} {p}": under(p, fn) for p in PRECISIONS
                                  for what, fn in (("prefill", prefill), ("hand-off", hand_off))}, args.repeats)
    (logits, cache), (logits_bf16, cache_bf16) = (outputs[p] for p in PRECISIONS)
    cache_error = max(relative(a, b) for la, lb in zip(cache.layers, cache_bf16.layers)
                      for a, b in ((la.keys, lb.keys), (la.values, lb.values)))
    result = {"direction": args.direction, "tokens": int(input_ids.shape[1]), "threads": torch.get_num_threads(),
              "adapter": model.adapter.config.method if args.adapter is None else args.adapter,
              "cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "seconds": seconds,
              "ratio": {p: seconds[f"prefill {p}"] / seconds[f"hand-off {p}"] for p in PRECISIONS},
              "logits_relative_error": relative(logits, logits_bf16), "cache_relative_error": cache_error,
              "matmul_relative_error": arithmetic_check()}
    for p in PRECISIONS:
        print(f"fp32_precision={p}: prefill {seconds[f'prefill {p}']:.3f} s, hand-off (plan + map) "
              f"{seconds[f'hand-off {p}'] * 1e3:.1f} ms, ratio {result['ratio'][p]:.1f}x")
    print(f"bf16 against none: prefill {seconds['prefill none'] / seconds['prefill bf16']:.2f}x faster, hand-off "
          f"{seconds['hand-off none'] / seconds['hand-off bf16']:.2f}x faster; last logits move "
          f"{result['logits_relative_error']:.1e}, the mapped cache {cache_error:.1e} (relative L2)")
    check = result["matmul_relative_error"]
    used = check["under_setting"] > check["explicit_bf16"] / 10
    print(f"one matmul moves {check['under_setting']:.1e} under the setting and {check['explicit_bf16']:.1e} in "
          f"explicit bf16: the setting {'used' if used else 'did not use'} bf16 arithmetic")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
