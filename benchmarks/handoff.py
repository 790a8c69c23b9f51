"""The hand-off's two measurements, run by the harness's ``handoff`` and ``handoff-speed`` stages
(``python -m benchmarks run NAME --stage handoff``): exact-fact retrieval over recompute settings with the receiver
reading its own question, and the end-to-end time of the user's call beside native prefill.

A grid names the settings: ``"content:0.02,0.05;query+2:0.1;oracle;statement~0.7:0.05"`` (select:fractions, +N
repairs the first N layers too, ~S scales the keys left mapped by S); the pure transfer always comes first.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.table import Table

from heterofold_hub.data.texts import read_texts
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.handoff import Setting, evaluate_handoff, make_handoff_prompts, wilson
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts
from heterofold_hub.modeling import HeteroFoldModel


def parse_grid(grid: str, repairs: list[int]) -> list[Setting]:
    """``"content:0.02,0.05;query+2:0.1;oracle;statement~0.7/deferred:0.05"`` -> settings, each with every
    ``repairs`` count; the pure transfer first. ``~S``: the keys left mapped scaled by S; ``/deferred``: the
    transfer is made without the prompt, the recompute when the receiver reads it."""
    settings = [Setting(TransferConfig(repair_layers=r)) for r in repairs]
    for part in filter(None, (p.strip() for p in grid.split(";"))):
        select, _, fractions = part.partition(":")
        select, _, deferred = select.partition("/")
        if deferred not in ("", "deferred"):
            raise HeteroFoldError(f"grid entry {part!r}: '/{deferred}' is not an option; the one is '/deferred'.")
        select, _, scale = select.partition("~")  # "statement~0.7:0.05" scales the keys left mapped by 0.7
        select, _, repair = select.partition("+")  # "content+2:0.05" repairs the first 2 layers too
        for fraction in ([None] if select == "oracle" else [float(f) for f in fractions.split(",")]):
            settings += [Setting(TransferConfig(recompute=fraction or 0.0, select=select, repair_layers=r,
                                                mapped_key_scale=float(scale) if scale else 1.0),
                                 deferred=bool(deferred))
                         for r in ([int(repair)] if repair else repairs)]
    return list(dict.fromkeys(settings))


def table(result: dict, fmt: str) -> Table:
    lengths = result["lengths"]
    t = Table(title=f"{result['sender']} -> {result['receiver']}, {fmt} format, {result['docs']} docs per length: "
                    "exact match (share of native), recomputed share")
    t.add_column("setting")
    for n in lengths:
        t.add_column(f"{n} tok", justify="right")
    for name in result["formats"][fmt][str(lengths[0])]:
        cells = []
        for n in lengths:
            row = result["formats"][fmt][str(n)][name]
            kept = "—" if row["kept"] is None else f"{row['kept']:.2f}"
            cells.append(f"{row['accuracy']:.2f} ({kept}) r={row['recomputed_share']:.3f}")
        t.add_row(name, *cells)
    return t


def measure_handoff(model: HeteroFoldModel, settings: list[Setting], *, lengths: list[int], docs: int,
                    formats: list[str], data: str, batch_size: int) -> dict:
    """Exact match per (format, length, setting), every setting's hits per document (so settings compare paired)."""
    fillers = filler_texts(read_texts(data))
    exclude = known_facts(read_texts("bundled:wide"))
    result = {"sender": model.sender.name, "receiver": model.receiver.name, "lengths": lengths, "docs": docs,
              "data": data, "settings": [s.record() for s in settings], "formats": {}}
    for fmt in formats:
        result["formats"][fmt] = {}
        for n in lengths:
            prompts = make_handoff_prompts(fillers, model.receiver, n, docs, fmt=fmt, exclude=exclude)
            rows = evaluate_handoff(model.sender, model.receiver, model.pipeline, prompts, settings,
                                    batch_size=batch_size, progress=sys.stderr.isatty(),
                                    log=lambda line: print(f"{time.strftime('%H:%M:%S')} {fmt} {n}: {line}",
                                                           file=sys.stderr, flush=True))
            for row in rows.values():
                row["interval"] = wilson(row["correct"], row["n"])
            result["formats"][fmt][str(n)] = rows
        Console(stderr=True).print(table(result, fmt))
    return result


def time_handoff(model: HeteroFoldModel, settings: list[Setting], *, lengths: list[int], repeats: int,
                 map_dtype: str | None = None) -> dict:
    """End-to-end hand-off time with selective recompute beside the receiver's native prefill, in one run.

    Every figure is what a user's call pays: ``model.transfer(prefill, text, ...)`` (plan + map + selection +
    recompute), against ``native_prefill`` of the same text; batch 1, the median of ``repeats`` interleaved rounds
    after a warm-up (:func:`~heterofold_hub.evaluation.bench.median_seconds`). Also the map alone into the receiver's
    own cache and into a working cache that keeps every position of the sliding layers (what a recompute reads).
    ``map_dtype`` (``"bfloat16"``): each setting is timed again with the adapter's products in that dtype (a copy of
    the adapter; receiver and cache unchanged), named ``"SETTING (bfloat16 maps)"``, in the same rounds."""
    from heterofold_hub.commands.placement import map_dtype_row, with_map_dtype
    from heterofold_hub.evaluation.bench import median_seconds
    from heterofold_hub.transfer.fast import map_cache, map_every_position
    from heterofold_hub.transfer.pipeline import TransferPipeline, native_prefill

    pipelines = {None: model.pipeline}  # map dtype (None: the adapter's own) -> pipeline
    if map_dtype is not None:
        own = model.pipeline
        narrow = with_map_dtype({"a": own.adapter}, ["a"], map_dtype)[map_dtype_row("a", map_dtype)]
        pipelines[map_dtype] = TransferPipeline(narrow, own.sender, own.receiver, source=own.source)
    named = {(s, products): s.name if products is None else map_dtype_row(s.name, products)
             for s in settings for products in pipelines}  # each setting beside its narrow twin
    fillers = filler_texts(read_texts("bundled:unseen"))
    result = {"sender": model.sender.name, "receiver": model.receiver.name, "batch": 1, "repeats": repeats,
              "map_dtype": map_dtype, "lengths": {}}
    for n in lengths:
        p = make_handoff_prompts(fillers, model.receiver, n, 1, fmt="code")[0]
        prefill = model.prefill_sender([p.context], surprisal=True)
        plan = model.pipeline.plan([p.context], prefill=prefill)
        layers = prefill.layers
        dtype = model.receiver.model.dtype
        calls = {"native_prefill_s": lambda: native_prefill(model.receiver, [p.context]),
                 "plan_s": lambda: model.pipeline.plan([p.context], prefill=prefill),  # as the user's call plans
                 "map_s": lambda: map_cache(model.adapter, plan, layers, dtype=dtype),
                 "map_every_position_s": lambda: map_every_position(model.adapter, plan, layers, dtype=dtype)}
        for (s, products), name in named.items():  # what the user's calls pay: plan + map + selection + recompute
            calls[name] = (lambda s=s, pipe=pipelines[products]:
                           s.transfer(pipe, prefill, [p.context], [p.question], [[p.span]]))
        seconds = median_seconds(calls, repeats)  # side by side, rounds interleaved
        row = {name: seconds[name] for name in ("native_prefill_s", "plan_s", "map_s", "map_every_position_s")}
        row["settings"] = {name: {"end_to_end_s": seconds[name], "speedup": row["native_prefill_s"] / seconds[name],
                                  "recomputed_share": (calls[name]().recompute or {}).get("share", 0.0)}
                           for name in named.values()}
        result["lengths"][str(p.tokens)] = row
    return result
