"""Transfer vs native prefill, timed side by side in one run (``hf-fold bench``).

For each context length, on the same text:

- ``prefill_s``: the receiver's own prefill, a forward with cache from its token ids and logits for the last
  position only, as a serving engine prefills (what a transfer saves);
- ``plan_s``: tokenizing for both models, aligning and the native-prefix forward, once per context
  (:meth:`TransferPipeline.plan`; it needs only the text, so it can run while the sender prefills);
- ``transfer_s[method]``: mapping the sender's cache with that plan into a receiver cache;
- ``copy_s``: a plain copy of a receiver cache of that size, the memory-traffic floor;
- ``peak_extra_bytes[method]``: the most temporary memory one transfer held (beyond the cache it returns),
  measured in a separate untimed run; ``layer_bytes`` is one receiver layer's keys + values, for scale.

Each time is the median of ``repeats`` rounds after one warm-up; a round runs every measurement once, in turn.
"""

from __future__ import annotations

import random
import statistics
import time

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.evaluation.memory import peak_extra_bytes
from heterofold_hub.methods.base import PairAdapter
from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.transfer.plan import build_plan


def median_seconds(fns: dict, repeats: int) -> dict[str, float]:
    """Median wall time of each of ``fns`` (name -> callable) over ``repeats`` rounds, after one untimed
    warm-up call each. Every round runs each function once, so all of them see the same state of a shared
    machine and their ratios hold even when its speed drifts; the order is shuffled each round (seeded), so
    none always runs on caches another has just warmed. CUDA work is waited for, so asynchronous launches are not
    mistaken for finished work."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    times = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    order, shuffle = list(fns), random.Random(0).shuffle
    for _ in range(repeats):
        shuffle(order)
        for name in order:
            fn = fns[name]
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def text_of_length(texts: list[str], receiver: Side, tokens: int) -> str:
    """A prefix of the joined ``texts`` that the receiver tokenizes into exactly ``tokens`` tokens (incl. its
    special prefix), cut at a token boundary so that both tokenizers see the same characters."""
    chosen, chars = [], 0
    for text in texts:  # enough text for the longest context (a token is rarely over 8 characters)
        chosen.append(text)
        chars += len(text) + 1
        if chars > 8 * tokens:
            break
    joined = "\n".join(chosen)
    ids, offsets = encode(receiver.tokenizer, joined)
    if len(ids) < tokens:
        raise HeteroFoldError(f"The benchmark text holds {len(ids)} receiver tokens, fewer than --contexts {tokens}. "
                              "Pass shorter contexts or more text.")
    text = joined[: int(offsets[tokens - 1][1])]
    while len(encode(receiver.tokenizer, text)[0]) > tokens:  # a merge across the cut can add a token
        text = text[:-1]
    return text


@torch.no_grad()
def bench_row(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], text: str, repeats: int) -> dict:
    """One context length: seconds for prefill, plan, copy and each method's transfer of ``text``."""
    s_inputs = sender.tokenizer(text, return_tensors="pt").to(sender.model.device)
    sender_cache = sender.model(**s_inputs, use_cache=True, cache=full_cache()).cache  # what the sender computed: not timed
    ids = receiver.tokenizer(text, return_tensors="pt").input_ids.to(receiver.model.device)
    prefill = lambda: receiver.model(input_ids=ids, use_cache=True, **cache_only(receiver.model)).cache  # noqa: E731
    layers = [(layer.keys, layer.values) for layer in prefill().layers]
    pipelines = {name: TransferPipeline(adapter, sender, receiver) for name, adapter in adapters.items()}
    native = max(adapter.config.min_native for adapter in adapters.values())
    make_plan = lambda: build_plan(sender, receiver, text, min_native=native)  # noqa: E731  one plan serves every method
    plan = make_plan()
    transfers = {name: (lambda p=pipeline: p.transfer(sender_cache, plan=plan)) for name, pipeline in pipelines.items()}
    seconds = median_seconds({"prefill": prefill, "plan": make_plan,
                              "copy": lambda: [(k.clone(), v.clone()) for k, v in layers],
                              **{f"transfer {name}": transfer for name, transfer in transfers.items()}}, repeats)
    full = max(layers, key=lambda kv: kv[0].shape[2])  # a sliding-window layer (Gemma 3) keeps only its window
    return {
        "context_tokens": int(ids.shape[1]),
        "prefill_s": seconds["prefill"],
        "plan_s": seconds["plan"],
        "copy_s": seconds["copy"],
        "transfer_s": {name: seconds[f"transfer {name}"] for name in transfers},
        "peak_extra_bytes": {name: peak_extra_bytes(transfer, receiver.model.device)[1]
                             for name, transfer in transfers.items()},
        "layer_bytes": 2 * full[0].nelement() * full[0].element_size(),
    }


def run_bench(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], texts: list[str],
              contexts: list[int], *, repeats: int = 5, progress=None) -> dict:
    """``{"sender", "receiver", "rows": [bench_row per context length]}``."""
    rows, skipped = [], []
    for tokens in contexts:
        text = text_of_length(texts, receiver, tokens)
        needed = len(encode(sender.tokenizer, text)[0])
        if needed > sender.spec.max_positions:  # the sender could not have prefilled it: nothing to transfer
            skipped.append({"context_tokens": tokens, "reason": f"{sender.name} needs {needed} tokens for this text, "
                            f"more than its {sender.spec.max_positions} positions"})
        else:
            rows.append(bench_row(sender, receiver, adapters, text, repeats))
        if progress is not None:
            progress()
    device = receiver.model.device
    return {"sender": sender.name, "receiver": receiver.name, "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": str(receiver.model.dtype).removeprefix("torch."), "repeats": repeats, "rows": rows,
            "skipped": skipped}
