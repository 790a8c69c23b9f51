"""The generated tables of the results pages (``docs/results/``) other than fidelity and hand-off tables (those come from
``heterofold_hub.evaluation``'s own generators): retrieval into Gemma 3, the real pair's and the tiny pair's
timings, and the pivot first-leg probe. Every figure is read from a committed file under ``benchmarks/results/``
(an experiment's NAME.json, or a history run's file); ``python -m benchmarks report --check`` and
``tests/test_readme.py`` hold the pages to this output; :data:`PAGES` says which page shows which block.

    python docs/gen_results.py            # print the blocks
    python -m benchmarks report           # rewrite them (and README.md's), between their <!-- gen:NAME --> markers
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_agents import (conversation_markdown, hidden_profile_run_markdown, hidden_profile_markdown,  # noqa: E402
                        hidden_profile_sides_markdown)
from gen_tables import _load, stage  # noqa: E402

RESULTS_DIR = "docs/results"  # one page per topic, relative to the repository root
PAGES = {  # generated block -> the results page that shows it
    "retrieval-s2g": "retrieval.md", "speed-real": "speed.md", "speed-low-rank": "low-rank.md",
    "speed-low-rank-registered": "low-rank.md", "speed-low-rank-s2g": "low-rank.md", "speed-rank64-bf16": "low-rank.md",
    "bench-tiny": "tiny-pair.md", "leg-error": "pivot.md", "agents-hidden-profile": "agents.md",
    "agents-hidden-profile-sides": "agents.md", "agents-conversation": "agents.md",
    "agents-hidden-profile-keyscale": "agents.md", "agents-hidden-profile-fresh": "agents.md",
    "agents-hidden-profile-g2s-fresh": "agents.md", "map-diagnosis-s2g": "diagnosis.md",
    "map-diagnosis-g2s": "diagnosis.md", "calibration-levers-s2g": "levers.md",
    "calibration-levers-s2g-fidelity": "levers.md", "calibration-levers-g2s": "levers.md",
    "calibration-levers-g2s-fidelity": "levers.md", "calibration-levers-g2s-all": "levers.md",
    "calibration-levers-g2s-all-fidelity": "levers.md", "calibration-levers-s2g-all": "levers.md",
    "calibration-levers-s2g-all-fidelity": "levers.md", "calibration-levers-g2s-long": "levers.md",
    "calibration-levers-g2s-long-fidelity": "levers.md", "calibration-levers-s2g-long": "levers.md",
    "calibration-levers-s2g-long-fidelity": "levers.md", "calibration-levers-g2s-long-stdlib": "levers.md",
    "calibration-levers-g2s-long-stdlib-fidelity": "levers.md", "calibration-levers-g2s-long2": "levers.md",
    "calibration-levers-g2s-long2-fidelity": "levers.md", "calibration-levers-g2s-v140rc2": "levers.md",
    "calibration-levers-g2s-v140rc2-fidelity": "levers.md",
}

# (source, row in it, label shown): which committed retrieval result is which adapter. A source is as in
# gen_tables.DIRECTIONS: (experiment, stage), or a history run's file under benchmarks/results/.
RETRIEVAL_ROWS = [
    (("real-s2g", "retrieval"), "native", "native"),
    (("real-s2g", "retrieval"), "no-context", "no-context"),
    (("real-s2g", "retrieval"), "heterofold", "heterofold v1.3.0 (wide, 4 sources)"),
    ("real/retrieval-s2g-wide3.json", "heterofold (s2g-wide2)", "heterofold v1.2.0 (wide)"),
    ("real/retrieval-s2g-wide3.json", "heterofold", "heterofold wide + recall (not published)"),
    ("real/retrieval-s2g-wide4.json", "heterofold", "heterofold wide + recall + copy weight 3 (not published)"),
    ("real/retrieval-s2g.json", "heterofold", "heterofold v1.1.0 (wide)"),
    ("real/retrieval-s2g.json", "kv-ridge", "kv-ridge (stdlib)"),
    ("real/retrieval-s2g.json", "recolor", "recolor"),
    ("real/retrieval-s2g-mixed-train.json", "heterofold",
     "heterofold on bundled:train (mostly recall documents; not published)"),
]

LEG_ERROR_ROWS = [  # (file, first leg as the probe names it, label, pivot layers read)
    ("pivot/probe-leg-error-g2l.json", "hub/snapshots/heterofold/gemma3-270m-to-smollm2-135m/v1.1.0",
     "Gemma 3 -> SmolLM2, heterofold v1.1.0 (shipped)"),
    ("pivot/probe-leg-error-g2l.json", "runs/pivot/g2s-kv-ridge", "Gemma 3 -> SmolLM2, KV Ridge"),
    ("pivot/probe-leg-error-s2l.json", "hub/snapshots/heterofold/smollm2-135m-to-gemma3-270m/v1.3.0",
     "SmolLM2 -> Gemma 3, heterofold v1.3.0 (shipped)"),
    ("pivot/probe-leg-error-s2l.json", "runs/pivot/s2g-kv-ridge", "SmolLM2 -> Gemma 3, KV Ridge"),
]


def retrieval_markdown(rows=RETRIEVAL_ROWS) -> str:
    """Exact match per length (± binomial SE, and the share of native kept), and digits in place averaged over the
    lengths. All rows must come from runs on the same documents (checked: same lengths and document count)."""
    first = _load(rows[0][0])
    lengths = [str(n) for n in first["lengths"]]
    lines = ["| method | " + " | ".join(f"{n} tokens" for n in lengths) + " | digits in place |",
             "| --- |" + " ---: |" * (len(lengths) + 1)]
    for file, method, label in rows:
        result = _load(file)
        if [str(n) for n in result["lengths"]] != lengths or result["docs"] != first["docs"]:
            raise ValueError(f"{file} was not run on the same lengths and documents as {rows[0][0]}")
        per = result["methods"][method]
        reference = method in ("native", "no-context")
        cells = [f"{per[n]['accuracy']:.2f} ± {per[n]['accuracy_se']:.2f}" + ("" if reference else f" ({per[n]['kept']:.2f})")
                 for n in lengths]
        digits = sum(per[n]["digit_accuracy"] for n in lengths) / len(lengths)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {digits:.2f} |")
    return "\n".join(lines)


def real_speed_markdown(s2g=("real-bench-long-s2g", "bench"), g2s=("real-bench-long-g2s", "bench")) -> str:
    """Per context length: the heterofold transfer's speed-up over the receiver's prefill (the plan reused), its
    time, and the prefill's time, in both directions."""
    a, b = _load(s2g)["directions"][0], _load(g2s)["directions"][0]
    rows_b = {r["context_tokens"]: r for r in b["rows"]}
    lines = ["| receiver tokens | SmolLM2 -> Gemma 3 | Gemma 3 prefill | Gemma 3 -> SmolLM2 | SmolLM2 prefill |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    cell = lambda r: f"{r['prefill_s'] / r['transfer_s']['heterofold']:.1f}x ({r['transfer_s']['heterofold'] * 1e3:.0f} ms)"  # noqa: E731
    for r in a["rows"]:
        n = r["context_tokens"]
        o = rows_b.get(n)
        lines.append(f"| {n} | {cell(r)} | {r['prefill_s']:.2f} s | " +
                     (f"{cell(o)} | {o['prefill_s']:.2f} s |" if o else "- | - |"))
    return "\n".join(lines)


def low_rank_speed_markdown(file=("real-g2s-low-rank", "bench"), package="rank64", adapter="v1.1.0",
                            receiver="SmolLM2") -> str:
    """Per context length: the full map (the registry's ``adapter``) and its rank-``package`` factoring timed side by
    side in one run, end to end (warm plan + map) and map alone, against the receiver's prefill (and llama.cpp's,
    when the run timed it)."""
    rows = _load(file)["directions"][0]["rows"]
    low = f"rank {stage((file[0], 'compress'))['result'][package]['rank']}"  # as the experiment's compress stage made it
    llama = all(r.get("llamacpp_prefill_s") for r in rows)
    head = (f"| receiver tokens | {receiver} prefill | plan (warm) | map, {adapter} | map, {low} | end to end, {adapter} "
            f"| end to end, {low} | map only, {low} |" + (f" llama.cpp prefill | vs llama.cpp, {low} |" if llama else "")
            + f" peak, {low} (receiver layers) |")
    lines = [head, "|" + " ---: |" * (head.count("|") - 1)]
    for r in rows:
        t, speedup = r["transfer_s"], r["speedup"]
        cells = [str(r["context_tokens"]), f"{r['prefill_s']:.2f} s", f"{r['plan_s'] * 1e3:.1f} ms",
                 f"{t['heterofold'] * 1e3:.0f} ms", f"{t[package] * 1e3:.0f} ms",
                 f"{speedup['end_to_end']['heterofold']:.1f}x", f"**{speedup['end_to_end'][package]:.1f}x**",
                 f"{speedup['map_only'][package]:.1f}x"]
        if llama:
            cells += [f"{r['llamacpp_prefill_s']:.2f} s", f"{speedup['vs_llamacpp'][package]:.1f}x"]
        cells.append(f"{r['peak_extra_bytes'][package] / r['layer_bytes']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def map_dtype_speed_markdown(file, adapters: dict[str, str], receiver: str, map_dtype: str = "bfloat16") -> str:
    """Per context length: each of ``adapters`` (bench row -> label) end to end (warm plan + map) with float32 and
    ``map_dtype`` products, timed side by side in one run against the receiver's float32 prefill; the map time and
    peak extra memory of the last adapter's narrow row."""
    from heterofold_hub.commands.placement import map_dtype_row

    rows = _load(file)["directions"][0]["rows"]
    last, narrow = list(adapters)[-1], map_dtype_row(list(adapters)[-1], map_dtype)
    short = "bf16" if map_dtype == "bfloat16" else map_dtype
    head = (f"| receiver tokens | {receiver} prefill | plan (warm) | " +
            " | ".join(f"end to end, {label}: float32 / {short}" for label in adapters.values()) +
            f" | map, {adapters[last]}: float32 / {short} | peak, {adapters[last]} {short} (receiver layers) |")
    lines = [head, "|" + " ---: |" * (head.count("|") - 1)]
    for r in rows:
        e2e, t = r["speedup"]["end_to_end"], r["transfer_s"]
        cells = [str(r["context_tokens"]), f"{r['prefill_s']:.2f} s", f"{r['plan_s'] * 1e3:.1f} ms"]
        cells += [f"{e2e[name]:.1f}x / **{e2e[map_dtype_row(name, map_dtype)]:.1f}x**" for name in adapters]
        cells += [f"{t[last] * 1e3:.0f} / {t[narrow] * 1e3:.0f} ms", f"{r['peak_extra_bytes'][narrow] / r['layer_bytes']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_markdown(file=("tiny-bench", "bench")) -> str:
    """The tiny pair's bench table (``python -m benchmarks run tiny-bench --stage bench``), in milliseconds."""
    result = _load(file)
    methods = ["heterofold", "kv-ridge", "dense-latent"]
    lines = ["| direction | context | prefill | plan | copy | " + " | ".join(methods) +
             " | speed-up | cold | vs copy | peak (layers) |",
             "| --- |" + " ---: |" * (11)]
    for d in result["directions"]:
        name = f"{d['sender'].split('/')[-1]} -> {d['receiver'].split('/')[-1]}"
        for r in d["rows"]:
            t = r["transfer_s"]
            h = t["heterofold"]
            cells = [f"{r['prefill_s'] * 1e3:.1f}", f"{r['plan_s'] * 1e3:.1f}", f"{r['copy_s'] * 1e3:.2f}"]
            cells += [f"{t[m] * 1e3:.2f}" for m in methods]
            cells += [f"{r['prefill_s'] / h:.1f}x", f"{r['prefill_s'] / (r['plan_s'] + h):.1f}x",
                      f"{h / r['copy_s']:.0f}x", f"{r['peak_extra_bytes']['heterofold'] / r['layer_bytes']:.2f}"]
            lines.append(f"| {name} | {r['context_tokens']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def leg_error_markdown(rows=LEG_ERROR_ROWS) -> str:
    """Per first leg: the pivot layers the second leg reads, the first leg's error there and the second leg's
    output error (1-R2 as a share of the target's own variance: 0 exact, 1 no better than the mean), as ranges."""
    lines = ["| first leg (into the pivot) | pivot layers read | first leg 1-R2, keys / values | "
             "second leg's output 1-R2, keys / values |", "| --- | --- | ---: | ---: |"]
    span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
    for file, first, label in rows:
        found = [r for r in _load(file)["rows"] if r["first"] == first]
        a = [r for r in found if r["part"] == "first"]
        b = [r for r in found if r["part"] == "second"]
        layers = ", ".join(str(r["pivot_layer"]) for r in a)
        lines.append(f"| {label} | {layers} | {span([r['k'] for r in a])} / {span([r['v'] for r in a])} | "
                     f"{span([r['k'] for r in b])} / {span([r['v'] for r in b])} |")
    return "\n".join(lines)


def map_diagnosis_markdown(file: str) -> str:
    """The map-diagnosis probe (``benchmarks/probes/map_diagnosis.py``): per hybrid, recovered, what it gains over
    the pure map, KL, and a token class's share of the mapped rows."""
    result = _load(file)
    variants, shares = result["variants"], result["class_shares"]
    pure = variants["pure map"]["recovered"]
    lines = ["| made native | recovered | gained | KL | share of mapped rows |", "| --- | --- | --- | --- | --- |"]
    for name, row in variants.items():
        if name in ("native", "no-context"):
            continue
        share = f"{shares[name]:.3f}" if name in shares else ""
        lines.append(f"| {name} | {row['recovered']:.3f} ± {row['recovered_se']:.3f} | {row['recovered'] - pure:+.3f} | "
                     f"{row['kl']:.3f} | {share} |".replace("-0.000", "0.000"))
    return "\n".join(lines)


V13 = "heterofold/smollm2-135m-to-gemma3-270m@v1.3.0"
V11_G2S = "heterofold/gemma3-270m-to-smollm2-135m@v1.1.0"
V12_G2S = "heterofold/gemma3-270m-to-smollm2-135m@v1.2.0"
V13_G2S = "heterofold/gemma3-270m-to-smollm2-135m@v1.3.0"
V140RC1_G2S = "heterofold/gemma3-270m-to-smollm2-135m@v1.4.0-rc.1"
LEVER_ROWS = {  # adapter ref in the levers experiments -> what made it (rows in this order)
    "train:real-s2g-topk/topk": "top-k teacher (128), 1200 steps over 320 windows",
    "train:real-s2g-topk-wide800/topk-wide800": "top-k teacher (128), 500 steps over 800 windows",
    "train:real-s2g-topk-all/topk-all": "top-k teacher (128), 600 steps over all 1201 windows",
    V13: "v1.3.0: full teacher, 150 steps over 320 windows",
    "train:real-g2s-topk-all/topk-all": "v1.2.0: top-k teacher (128), 600 steps over all 1154 windows",
    "train:real-g2s-topk-wide640/topk-wide640": "top-k teacher (128), 400 steps over 640 windows",
    V11_G2S: "v1.1.0: full teacher, at most 250 steps (12 minutes) over 320 windows",
    "train:real-g2s-long/long": "v1.2.0 calibrated on: 300 steps over all 251 windows of 2048 tokens",
    V12_G2S: "v1.2.0: 600 steps over all 1154 windows of 512 tokens",
    "train:real-s2g-long/long": "the 1201-window package calibrated on: 300 steps over all 264 windows of 2048 tokens",
    "train:real-g2s-v140rc2/long2": "v1.4.0-rc.2: v1.4.0-rc.1 calibrated on: 300 steps over all 251 windows of 2048 tokens",
    V140RC1_G2S: "v1.4.0-rc.1: the standard-library package, retrained",
    "train:real-g2s-long2/long2": "the standard-library package calibrated on: 300 steps over all 251 windows of 2048 tokens",
    "train:real-g2s-long-stdlib/stdlib": "v1.3.0 calibrated on: 200 steps over 200 2048-token windows of the standard library",
    V13_G2S: "v1.3.0",
}


S2G_ALL = "train:real-s2g-topk-all/topk-all"
# the long-window package beside the one it went on from (v1.3.0, scored in the same run, is in the full tables)
LONG_S2G_ROWS = {ref: LEVER_ROWS[ref] for ref in ("train:real-s2g-long/long", S2G_ALL)}


def levers_markdown(code="real-s2g-levers", prose="real-s2g-levers-prose", rows=LEVER_ROWS, baseline=V13) -> str:
    """Each calibration lever's package beside the published version on the same windows: recovered (± SE) and
    the paired difference to ``baseline`` (± its own jackknife SE, windows with lower NLL), on unseen code at each
    scored length and on unseen prose."""
    tables = [(f"code, {context}", result) for context, result in stage((code, "score"))["result"].items()]
    tables += [(f"prose, {context}", result) for context, result in stage((prose, "score"))["result"].items()]
    header = "| package | " + " | ".join(f"{name} ({r['windows']} windows)" for name, r in tables) + " |"
    lines = [header, "| --- |" + " --- |" * len(tables)]
    for ref, label in rows.items():
        if ref not in tables[0][1]["adapters"].values():  # the other direction's
            continue
        cells = []
        for _, result in tables:
            by_ref = {r: name for name, r in result["adapters"].items()}
            row, base = by_ref[ref], by_ref[baseline]
            m = result["methods"][row]
            cell = f"{m['recovered']:.3f} ± {m['recovered_se']:.3f}, KL {m['kl']:.3f}"
            if ref != baseline:
                forward = result["paired"].get(f"{row} - {base}")
                d = forward or result["paired"][f"{base} - {row}"]
                sign = 1 if forward else -1
                better = d["windows_better"] if forward else d["windows"] - d["windows_better"]
                cell += (f"; paired {sign * d['recovered']:+.3f} ± {d['recovered_se']:.3f}, "
                         f"lower NLL on {better}/{d['windows']}")
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def levers_fidelity_markdown(experiments=("real-s2g-levers", "real-s2g-levers-prose"), rows=LEVER_ROWS) -> str:
    """The full fidelity table of each levers score (caption, references, every package by what made it)."""
    from heterofold_hub.evaluation.reports import fidelity_caption, fidelity_markdown

    parts = []
    for experiment in experiments:
        for result in stage((experiment, "score"))["result"].values():
            table = fidelity_markdown(result)
            for row, ref in result["adapters"].items():
                table = table.replace(f"| {row} |", f"| {rows[ref]} |")
            parts.append(f"{fidelity_caption(result)}\n\n{table}")
    return "\n\n".join(parts)


def blocks() -> dict[str, str]:
    return {"retrieval-s2g": retrieval_markdown(), "speed-real": real_speed_markdown(),
            "speed-low-rank": low_rank_speed_markdown(),
            "speed-low-rank-registered": low_rank_speed_markdown(("real-g2s-rank64", "bench")),
            "speed-low-rank-s2g": low_rank_speed_markdown(("real-s2g-low-rank", "bench"), adapter="v1.3.0",
                                                          receiver="Gemma 3"),
            "speed-rank64-bf16": map_dtype_speed_markdown(("real-g2s-rank64-bf16", "bench"),
                                                          {"heterofold": "v1.1.0", "v1.0.0": "rank 64"}, "SmolLM2"),
            "bench-tiny": bench_markdown(),
            "leg-error": leg_error_markdown(), "agents-hidden-profile": hidden_profile_markdown(),
            "agents-hidden-profile-sides": hidden_profile_sides_markdown(),
            "agents-hidden-profile-keyscale": hidden_profile_run_markdown(),
            "agents-hidden-profile-fresh": hidden_profile_run_markdown("real-s2g-hidden-profile-keyscale-fresh"),
            "agents-hidden-profile-g2s-fresh": hidden_profile_run_markdown("real-g2s-hidden-profile-fresh"),
            "map-diagnosis-s2g": map_diagnosis_markdown("real/probe-map-diagnosis-s2g-unseen-512.json"),
            "map-diagnosis-g2s": map_diagnosis_markdown("real/probe-map-diagnosis-g2s-unseen-512.json"),
            "agents-conversation": conversation_markdown(), "calibration-levers-s2g": levers_markdown(),
            "calibration-levers-s2g-fidelity": levers_fidelity_markdown(),
            "calibration-levers-g2s": levers_markdown("real-g2s-levers", "real-g2s-levers-prose", baseline=V11_G2S),
            "calibration-levers-g2s-fidelity": levers_fidelity_markdown(("real-g2s-levers", "real-g2s-levers-prose")),
            "calibration-levers-g2s-all": levers_markdown("real-g2s-levers-all", "real-g2s-levers-all-prose",
                                                          baseline=V11_G2S),
            "calibration-levers-g2s-all-fidelity": levers_fidelity_markdown(("real-g2s-levers-all",
                                                                             "real-g2s-levers-all-prose")),
            "calibration-levers-s2g-all": levers_markdown("real-s2g-levers-all", "real-s2g-levers-all-prose"),
            "calibration-levers-s2g-all-fidelity": levers_fidelity_markdown(("real-s2g-levers-all",
                                                                             "real-s2g-levers-all-prose")),
            "calibration-levers-g2s-long": levers_markdown("real-g2s-levers-long", "real-g2s-levers-long-prose",
                                                           baseline=V12_G2S),
            "calibration-levers-g2s-long-fidelity": levers_fidelity_markdown(("real-g2s-levers-long",
                                                                              "real-g2s-levers-long-prose")),
            "calibration-levers-s2g-long": levers_markdown("real-s2g-levers-long", "real-s2g-levers-long-prose",
                                                           rows=LONG_S2G_ROWS, baseline=S2G_ALL),
            "calibration-levers-s2g-long-fidelity": levers_fidelity_markdown(("real-s2g-levers-long",
                                                                              "real-s2g-levers-long-prose")),
            "calibration-levers-g2s-long-stdlib": levers_markdown("real-g2s-levers-long-stdlib",
                                                                  "real-g2s-levers-long-stdlib-prose", baseline=V13_G2S),
            "calibration-levers-g2s-long-stdlib-fidelity": levers_fidelity_markdown((
                "real-g2s-levers-long-stdlib", "real-g2s-levers-long-stdlib-prose")),
            "calibration-levers-g2s-long2": levers_markdown("real-g2s-levers-long2", "real-g2s-levers-long2-prose",
                                                            baseline=V13_G2S),
            "calibration-levers-g2s-long2-fidelity": levers_fidelity_markdown((
                "real-g2s-levers-long2", "real-g2s-levers-long2-prose")),
            "calibration-levers-g2s-v140rc2": levers_markdown("real-g2s-v140rc2", "real-g2s-v140rc2-prose",
                                                              baseline=V13_G2S),
            "calibration-levers-g2s-v140rc2-fidelity": levers_fidelity_markdown((
                "real-g2s-v140rc2", "real-g2s-v140rc2-prose"))}


if __name__ == "__main__":  # writing is `python -m benchmarks report`'s, for both pages at once
    for name, body in blocks().items():
        print(f"<!-- gen:{name} -->\n{body}\n<!-- /gen:{name} -->\n")
