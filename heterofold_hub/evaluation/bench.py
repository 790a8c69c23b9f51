"""Transfer vs native prefill, timed side by side in one run (``hf-fold bench``).

For each context length, on the same text:

- ``prefill_s``: the receiver's own prefill, a forward with cache from its token ids and logits for the last
  position only, as a serving engine prefills (what a transfer saves);
- ``plan_s``: tokenizing for both models, aligning, RoPE tables and the native-prefix K/V, on a warm pipeline (a
  user's second hand-off: the pair's constants are cached, see :class:`~heterofold_hub.transfer.plan.PlanCache`;
  it needs only the text, so it can run while the sender prefills); ``plan_cold_s``: the same on a new pipeline's
  first call, which computes those constants;
- ``transfer_s[method]``: the map, that method's transfer of the sender's cache with that plan into a receiver cache;
- with ``recompute`` settings, heterofold's hand-off with them is a variant, ``heterofold+recompute``
  (``recompute_of`` names its method), beside the pure transfer: ``recompute_s[variant]`` is the receiver
  recomputing part of the context after the map, derived: ``transfer(..., recompute=...)`` is timed as one call
  (``map_recompute_s``) and the plain map's median subtracted, so map + recompute is exactly what that call cost;
  ``sender_extra_s[variant]`` is what the selection asks of the sender beyond its prefill (``content``: the LM head
  over every position for surprisal), timed on the sender's own hidden states;
- ``end_to_end_s[name]``: the hand-off a user waits for, plan + map (+ recompute + sender extra for the variant);
  ``speedup`` compares prefill with it (``end_to_end``, the headline), with the cold hand-off (``cold``) and, for
  the methods, with the map alone (``map_only``);
- ``llamacpp_prefill_s`` (optional, a GGUF receiver with llama-cpp-python installed): llama.cpp prefilling the same
  text from the same GGUF file (:mod:`~heterofold_hub.evaluation.llamacpp`; ``llamacpp_tokens``: its token count),
  timed in the same rounds; ``speedup["vs_llamacpp"]`` is that prefill over the end-to-end hand-off;
- ``copy_s``: a plain copy of a receiver cache of that size, the memory-traffic floor;
- ``peak_extra_bytes[method]``: the most temporary memory one transfer held (beyond the cache it returns),
  measured in a separate untimed run; ``layer_bytes`` is one receiver layer's keys + values, for scale.

Each time is the median of ``repeats`` rounds after one warm-up; a round runs every measurement once, in turn.
The result's ``checks`` say whether the prefill it beats is a fair one (its LM head on the last position only).
"""

from __future__ import annotations

import random
import statistics
import time

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.llamacpp import LlamaCppPrefill, llamacpp_baseline
from heterofold_hub.evaluation.memory import peak_extra_bytes
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.transfer.plan import PlanCache, build_plan
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.selects import needs_surprisal
from heterofold_hub.transfer.sender import last_hidden_states, prefill_sender, surprisal_from_hidden

RECOMPUTED = "heterofold"  # the method timed with recompute settings: the registered adapter users get
WITH_RECOMPUTE = "heterofold+recompute"  # its hand-off with them, a variant beside the pure transfer (which stays)


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
def bench_row(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], text: str, repeats: int,
              recompute: TransferConfig | None = None, query: str | None = None,
              llamacpp: LlamaCppPrefill | None = None) -> dict:
    """One context length: seconds for prefill, plan (warm and cold), copy and each method's map of ``text``, and
    the hand-off's sum and speed-ups (:func:`hand_off`); with ``recompute`` (active settings), heterofold's hand-off
    with them too (``query``: the receiver's prompt, for the strategies that read one); with ``llamacpp``, its
    prefill of the text too."""
    # what the sender computed (not timed), once for every method and the recompute: the cache transfer expects
    surprisal = recompute is not None and needs_surprisal(recompute.select)
    sender_cache = prefill_sender(sender, text, surprisal=surprisal)
    ids = receiver.tokenizer(text, return_tensors="pt").input_ids.to(receiver.model.device)
    prefill = lambda: receiver.model(input_ids=ids, use_cache=True, **cache_only(receiver.model)).cache  # noqa: E731
    layers = [(layer.keys, layer.values) for layer in prefill().layers]
    pipelines = {name: TransferPipeline(adapter, sender, receiver) for name, adapter in adapters.items()}
    native = max(adapter.config.min_native for adapter in adapters.values())
    warm = PlanCache(sender, receiver)  # filled by the untimed warm-up call, as by a user's first hand-off
    plan_with = lambda cache: build_plan(sender, receiver, text, min_native=native, cache=cache,  # noqa: E731
                                         sender_tokens=sender_cache.tokens())  # as a transfer given the prefill plans
    plan = plan_with(warm)  # one plan serves every method
    transfers = {name: (lambda p=pipeline: p.transfer(sender_cache, plan=plan)) for name, pipeline in pipelines.items()}
    extra = recomputed_hand_off(sender, pipelines[RECOMPUTED], sender_cache, plan, recompute, query) if recompute else {}
    cpp_tokens = llamacpp.tokens(text) if llamacpp is not None else None
    if llamacpp is not None:
        extra["llama.cpp prefill"] = lambda: llamacpp.prefill(cpp_tokens)
    seconds = median_seconds({"prefill": prefill, "plan": lambda: plan_with(warm), "plan cold": lambda: plan_with(None),
                              "copy": lambda: [(k.clone(), v.clone()) for k, v in layers],
                              **{f"transfer {name}": transfer for name, transfer in transfers.items()}, **extra}, repeats)
    full = max(layers, key=lambda kv: kv[0].shape[2])  # a sliding-window layer (Gemma 3) keeps only its window
    return hand_off({
        "context_tokens": int(ids.shape[1]),
        "prefill_s": seconds["prefill"],
        "plan_s": seconds["plan"],
        "plan_cold_s": seconds["plan cold"],
        "copy_s": seconds["copy"],
        "transfer_s": {name: seconds[f"transfer {name}"] for name in transfers},
        **recompute_figures(seconds, recompute),
        **({"llamacpp_prefill_s": seconds["llama.cpp prefill"], "llamacpp_tokens": len(cpp_tokens)} if llamacpp else {}),
        "peak_extra_bytes": {name: peak_extra_bytes(transfer, receiver.model.device)[1]
                             for name, transfer in transfers.items()},
        "layer_bytes": 2 * full[0].nelement() * full[0].element_size(),
    })


def recomputed_hand_off(sender: Side, pipeline: TransferPipeline, prefill, plan, settings: TransferConfig,
                        query: str | None) -> dict:
    """The timed calls of a hand-off with recompute: ``transfer(..., recompute=...)`` as a user calls it, and the
    sender's surprisal pass when the selection reads it, on ``prefill`` (the sender's SenderPrefill, not timed)."""
    timed = {"hand-off recompute": lambda: pipeline.transfer(prefill, plan=plan, config=settings,
                                                            query=query)}
    if needs_surprisal(settings.select):
        device = sender.model.device
        hidden, ids, mask = last_hidden_states(sender, prefill), prefill.input_ids.to(device), prefill.attention_mask.to(device)
        timed["sender surprisal"] = lambda: surprisal_from_hidden(sender.model, hidden, ids, mask)
    return timed


def recompute_figures(seconds: dict, settings: TransferConfig | None) -> dict:
    """The row's recompute fields from ``median_seconds``' figures (empty dicts without recompute settings)."""
    if not settings:
        return {"recompute": None, "recompute_s": {}, "map_recompute_s": {}, "sender_extra_s": {}}
    both = seconds["hand-off recompute"]
    return {"recompute": settings.to_dict(), "recompute_of": {WITH_RECOMPUTE: RECOMPUTED},
            "map_recompute_s": {WITH_RECOMPUTE: both},
            "recompute_s": {WITH_RECOMPUTE: both - seconds[f"transfer {RECOMPUTED}"]},
            "sender_extra_s": {WITH_RECOMPUTE: seconds["sender surprisal"]} if "sender surprisal" in seconds else {}}


def hand_off(row: dict) -> dict:
    """``row`` with ``end_to_end_s`` (plan + map + recompute + sender extra, per method) and ``speedup``: prefill
    over that sum (``end_to_end``), over the cold plan's sum (``cold``) and over the map alone (``map_only``)."""
    maps, recompute, extra = row["transfer_s"], row.get("recompute_s", {}), row.get("sender_extra_s", {})
    variants = {name: maps[of] for name, of in row.get("recompute_of", {}).items()}  # a method's map, recompute added
    rest = {name: seconds + recompute.get(name, 0.0) + extra.get(name, 0.0)
            for name, seconds in {**maps, **variants}.items()}
    row["end_to_end_s"] = {name: row["plan_s"] + seconds for name, seconds in rest.items()}
    row["speedup"] = {
        "end_to_end": {name: row["prefill_s"] / seconds for name, seconds in row["end_to_end_s"].items()},
        "cold": {name: row["prefill_s"] / (row["plan_cold_s"] + seconds) for name, seconds in rest.items()},
        "map_only": {name: row["prefill_s"] / seconds for name, seconds in maps.items()},  # variants: their method's
    }
    if "llamacpp_prefill_s" in row:
        row["speedup"]["vs_llamacpp"] = {name: row["llamacpp_prefill_s"] / seconds
                                         for name, seconds in row["end_to_end_s"].items()}
    return row


def prefill_keeps_one_logit(model, ids: torch.Tensor) -> bool:
    """Whether ``model``'s prefill of ``ids`` ``[1, T]`` (T >= 2) computes its LM head on the last position only, as
    a serving engine's does. A forward without ``logits_to_keep``, or one that ignores it, pays the head over every
    position (over a 262k vocabulary as much as several layers): a slower baseline that inflates every speed-up."""
    with torch.no_grad():
        out = model(input_ids=ids.to(model.device), use_cache=True, **cache_only(model))
    return out.logits.shape[1] == 1


def run_bench(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], texts: list[str],
              contexts: list[int], *, repeats: int = 5, progress=None, recompute: TransferConfig | None = None,
              query: str | None = None) -> dict:
    """``{"sender", "receiver", "checks", "rows": [bench_row per context length], ...}``; ``recompute`` (active
    settings) also times heterofold's hand-off with them (``query``: the receiver's prompt, when they read one);
    ``checks.prefill_keeps_one_logit`` False (with a ``warnings`` entry) flags a receiver whose prefill computes logits
    for every position. A GGUF receiver is also prefilled by llama.cpp when llama-cpp-python is installed: the result's
    ``llamacpp`` records its version, build and threads; otherwise ``llamacpp_absent`` says why in one line."""
    recompute = recompute if recompute is not None and recompute.active else None
    warnings = []
    probe = encode(receiver.tokenizer, text_of_length(texts, receiver, 8))[0][None]
    fair = prefill_keeps_one_logit(receiver.model, probe)
    if not fair:
        warnings.append(f"{receiver.name}'s forward ignores logits_to_keep: its prefill computes the LM head over "
                        "every position, so every speed-up here is against a slower prefill than a serving engine's.")
    llamacpp, why_not = llamacpp_baseline(receiver, contexts)
    try:
        rows, skipped = bench_rows(sender, receiver, adapters, texts, contexts, repeats, progress, recompute, query,
                                   llamacpp)
        baseline = {"llamacpp": llamacpp.record()} if llamacpp is not None else {"llamacpp_absent": why_not}
    finally:
        if llamacpp is not None:
            llamacpp.close()
    device = receiver.model.device
    return {"sender": sender.name, "receiver": receiver.name, "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": str(receiver.model.dtype).removeprefix("torch."), "repeats": repeats,
            "recompute": None if recompute is None else recompute.to_dict(), "query": query,
            "checks": {"prefill_keeps_one_logit": fair, "warnings": warnings}, **baseline, "rows": rows,
            "skipped": skipped}


def bench_rows(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], texts: list[str], contexts: list[int],
               repeats: int, progress, recompute: TransferConfig | None, query: str | None,
               llamacpp: LlamaCppPrefill | None) -> tuple[list[dict], list[dict]]:
    """:func:`bench_row` for each context length the sender can hold, and those it cannot (skipped, with why)."""
    rows, skipped = [], []
    for tokens in contexts:
        text = text_of_length(texts, receiver, tokens)
        needed = len(encode(sender.tokenizer, text)[0])
        if needed > sender.spec.max_positions:  # the sender could not have prefilled it: nothing to transfer
            skipped.append({"context_tokens": tokens, "reason": f"{sender.name} needs {needed} tokens for this text, "
                            f"more than its {sender.spec.max_positions} positions"})
        else:
            rows.append(bench_row(sender, receiver, adapters, text, repeats, recompute, query, llamacpp))
        if progress is not None:
            progress()
    return rows, skipped
