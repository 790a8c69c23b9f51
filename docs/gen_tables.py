"""The README's generated blocks: the "what to expect" table of each direction of the real pair, and the adapters
available. Every figure is read from a committed file (an experiment's ``benchmarks/results/NAME.json``,
``registry.json``), never typed; ``python -m benchmarks report --check`` and ``tests/test_readme.py`` hold the
README to this output.

    python docs/gen_tables.py            # print the blocks
    python -m benchmarks report          # rewrite them (and docs/results/*.md's), between their <!-- gen:NAME --> markers
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gen_catalogue, beside this file

ROOT = Path(__file__).resolve().parent.parent
# The README's links are absolute, so that they work on a package index's page too: the repository's address
# (pyproject.toml's [project.urls] Repository, the project's future home; heterofold_hub.paths.FILES_URL is the same)
# + /blob/main/ + the file's path in the repository.
FILES_URL = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"] + "/blob/main/"
RESULTS = ROOT / "benchmarks" / "results"

# Which result shows what, per direction. Names only: every figure comes from these files. A source is
# (experiment, stage[, key]): benchmarks/results/EXPERIMENT.json's stage result (a train stage's key: that package's
# held-out table; a score stage's key: the context length). A plain string is a file under benchmarks/results/ the
# harness did not write (a history run kept as it was).
DIRECTIONS = {
    "s2g": {
        "title": "SmolLM2-135M -> Gemma 3 270M",
        "adapter": "heterofold/smollm2-135m-to-gemma3-270m v1.3.0",
        "fidelity": {512: (("real-s2g", "train", "heterofold"), ("real-s2g", "train", "kv-ridge")),
                     2048: (("real-s2g", "score", "2048"), ("real-s2g", "score", "2048"))},
        "retrieval": [(("real-s2g-handoff", "handoff"), "code", "statement@0.05"),
                      (("real-s2g-handoff-2048-statement", "handoff"), "code", "statement@0.05"),
                      (("real-s2g-handoff-keyscale", "handoff"), "code", "statement@0.05 k0.6"),
                      (("real-s2g-handoff-keyscale", "handoff"), "prose", "statement@0.05 k0.6")],
        # fidelity (hf-fold eval --json) with the key scale of the retrieval rows that name one
        "key_scale": "handoff/fidelity-s2g-512-k06.json",
        "speed": (("real-s2g-handoff-speed", "handoff-speed"), "statement@0.05"),
        # facts and fidelity together: one recompute setting with bf16 products, its retrieval runs (every format
        # and length), fidelity both ways (hf-fold eval --json) and its timing beside the prefill
        "knee": {"setting": "statement-tail@0.12", "map_dtype": "bfloat16",
                 "retrieval": [("real-s2g-handoff-knee12-bf16-512", "handoff"),
                               ("real-s2g-handoff-knee12-bf16-1024", "handoff"),
                               ("real-s2g-handoff-knee12-bf16-prose-1024", "handoff"),
                               ("real-s2g-handoff-knee12-bf16-2048", "handoff")],
                 "fidelity": [f"handoff/fidelity-{d}-{n}-tail12-bf16.json" for d in ("s2g", "g2s") for n in (512, 2048)],
                 "speed": ("real-s2g-handoff-knee-bf16", "handoff-speed")},
        "both_baselines": ("real-bench", "bench"),
    },
    "g2s": {
        "title": "Gemma 3 270M -> SmolLM2-135M",
        "adapter": "heterofold/gemma3-270m-to-smollm2-135m v1.1.0",
        "fidelity": {512: (("real-g2s", "train", "heterofold"), ("real-g2s", "train", "kv-ridge")),
                     2048: (("real-g2s", "score", "2048"), ("real-g2s-natural", "score", "2048"))},
        "retrieval": [(("real-g2s-handoff", "handoff"), "code", "statement@0.05"),
                      (("real-g2s-handoff", "handoff"), "prose", "statement@0.05"),
                      (("real-g2s-handoff-1024", "handoff"), "code", "statement@0.05"),
                      (("real-g2s-handoff-1024", "handoff"), "prose", "statement@0.05"),
                      (("real-g2s-handoff-2048", "handoff"), "code", "statement@0.05"),
                      (("real-g2s-handoff-keyscale", "handoff"), "code", "statement@0.05 k0.6"),
                      (("real-g2s-handoff-keyscale-1024", "handoff"), "code", "statement@0.05 k0.6"),
                      (("real-g2s-handoff-keyscale-2048", "handoff"), "code", "statement@0.05 k0.6")],
        "key_scale": "handoff/fidelity-g2s-512-k06.json",
        "speed": (("real-g2s-handoff-speed", "handoff-speed"), "statement@0.05"),
        "bench": (("real-bench-long-g2s", "bench"), 2048),
        # (experiment, package ref, bench row): a faster option, scored and timed beside the adapter in one experiment
        "faster": ("real-g2s-rank64", "compress:rank64", "rank64"),
        # (experiment, bench row of the package, its score row): the faster option again with bf16 products
        "faster_bf16": ("real-g2s-rank64-bf16", "v1.0.0", "low-rank"),
        "prose": ("real-g2s-prose", "score", "512"),
        "both_baselines": ("real-bench", "bench"),
    },
}


def _file(src) -> str:
    """The results file a source names, relative to benchmarks/results/."""
    return src if isinstance(src, str) else f"{src[0]}.json"


def stage(src) -> dict:
    """The stage entry ``{"provenance", "result"}`` a source names (a history file: its JSON as the result)."""
    data = json.loads((RESULTS / _file(src)).read_text())
    if isinstance(src, str):
        return {"provenance": data.get("provenance"), "result": data}
    return data["stages"][src[1]]


def _load(src) -> dict:
    """The result a source names: a train package's held-out table, a score context's table, a stage's result
    (one bench direction: that direction's)."""
    result = stage(src)["result"]
    if isinstance(src, str):
        return result
    if src[1] == "train":
        return result[src[2]]["heldout"]
    if len(src) > 2:
        return result[src[2]]
    return result


def _link(src, prefix: str) -> str:
    name = _file(src)
    return f"[{Path(name).name}]({prefix}benchmarks/results/{name})"


def _links(sources, prefix: str) -> str:
    return ", ".join(dict.fromkeys(_link(s, prefix) for s in sources))


def _row(result: dict, method: str) -> dict:
    return result["methods"][method]


FORMAT_LABELS = {"code": "facts in code comments", "prose": "facts in prose"}


def expect_markdown(direction: str, prefix: str = "") -> str:
    """The "what to expect" table of one direction. ``prefix`` makes the source links relative to the page that
    shows it ("" from the repository root)."""
    spec = DIRECTIONS[direction]
    lines = [f"**{spec['title']}** (`{spec['adapter']}`)", "",
             "| what | figure | source |", "| --- | --- | --- |"]
    for length, (own_file, baseline_file) in spec["fidelity"].items():
        own, base = _load(own_file), _load(baseline_file)
        r, b = _row(own, "heterofold"), _row(base, "kv-ridge")
        lines.append(
            f"| context benefit kept, unseen code, {length} tokens ({own['windows']} windows) | "
            f"**{r['recovered']:.3f} ± {r['recovered_se']:.3f}** (KL {r['kl']:.3f}; KV Ridge "
            f"{b['recovered']:.3f} ± {b['recovered_se']:.3f}) | {_links((own_file, baseline_file), prefix)} |")
    for file, fmt, setting in spec.get("retrieval") or []:
        result = _load(file)
        length = str(result["lengths"][0])
        rows = result["formats"][fmt][length]
        acc = lambda name: f"{rows[name]['accuracy']:.2f} ± {rows[name]['accuracy_se']:.2f}"  # noqa: E731
        base, _, scale = setting.partition(" k")  # "statement@0.05 k0.6": the keys left mapped scaled by 0.6
        how, cost, sources = f"`{base}`", "", (file,)
        if scale:
            fidelity = spec["key_scale"]
            scaled, plain = _row(_load(fidelity), "heterofold"), _row(_load(spec["fidelity"][512][0]), "heterofold")
            how += f" with `mapped_key_scale={scale}`"
            cost = (f"; the same factor lowers the context benefit kept at 512 tokens to {scaled['recovered']:.3f} "
                    f"(unscaled {plain['recovered']:.3f}): for questions about the context, not for continuing it")
            sources += (fidelity,)
        lines.append(
            f"| exact-fact retrieval, {FORMAT_LABELS[fmt]}, {length} tokens ({result['docs']} documents) | "
            f"native {acc('native')}; "
            f"pure transfer {acc('transfer')}; recompute {how} {acc(setting)} ({rows[setting]['kept']:.2f} of "
            f"native, {rows[setting]['recomputed_share']:.1%} of the context recomputed){cost} | "
            f"{_links(sources, prefix)} |")
    if spec.get("speed"):
        file, setting = spec["speed"]
        result = _load(file)
        cells = []
        for n, row in result["lengths"].items():
            s = row["settings"]
            cells.append(f"{n} tokens: {s['transfer']['speedup']:.1f}x pure transfer, {s[setting]['speedup']:.1f}x "
                         f"with `{setting}`")
        lines.append(f"| end-to-end speed-up over the receiver's own prefill (plan + map + recompute, batch "
                     f"{result['batch']}, {stage(file)['provenance']['threads']} CPU threads) | {'; '.join(cells)} | "
                     f"{_link(file, prefix)} |")
    if spec.get("bench"):
        file, length = spec["bench"]
        result = _load(file)["directions"][0]
        cells = []
        for row in result["rows"]:
            if row["context_tokens"] < length:
                continue
            t = row["transfer_s"]["heterofold"]
            cells.append(f"{row['context_tokens']} tokens: {row['prefill_s'] / (row['plan_s'] + t):.1f}x "
                         f"(map alone {row['prefill_s'] / t:.1f}x)")
        lines.append(f"| end-to-end speed-up over the receiver's own prefill (plan + map, {result['threads']} CPU "
                     f"threads, {result['dtype']}) | {'; '.join(cells)} | {_link(file, prefix)} |")
    if spec.get("knee"):
        lines.append(_knee_row(spec["knee"], prefix))
    if spec.get("faster"):
        lines.append(_faster_row(*spec["faster"], prefix))
    if spec.get("faster_bf16"):
        lines.append(_bf16_row(*spec["faster_bf16"], prefix))
    if spec.get("both_baselines"):
        file = spec["both_baselines"]
        result = next(d for d in _load(file)["directions"] if d["sender"] == _load(spec["fidelity"][512][0])["sender"])
        cells = [f"{row['context_tokens']} tokens: {row['speedup']['end_to_end']['heterofold']:.1f}x / "
                 f"{row['speedup']['vs_llamacpp']['heterofold']:.1f}x" for row in result["rows"]]
        lines.append(f"| end-to-end speed-up (plan + map) over transformers' / llama.cpp's prefill of the same GGUF "
                     f"({result['threads']} CPU threads; transformers in {result['dtype']}, llama.cpp on the GGUF's own quantization; "
                     f"one run) | {'; '.join(cells)} | "
                     f"{_link(file, prefix)} |")
    lines.append(f"| known limits | {_limits(direction)} | {_limits_sources(direction, prefix)} |")
    return "\n".join(lines)


def _knee_row(knee: dict, prefix: str) -> str:
    """One recompute setting with the adapter's products in ``map_dtype``, for facts and fidelity together: its
    share of native retrieval over every measured cell, the context benefit it keeps in both directions, and its
    end-to-end speed-up at the longest length timed."""
    from heterofold_hub.commands.placement import map_dtype_row

    setting, dtype = knee["setting"], knee["map_dtype"]
    runs = [_load(src) for src in knee["retrieval"]]
    cells = [(fmt, int(n), run["docs"], rows[setting]["kept"]) for run in runs
             for fmt, by_length in run["formats"].items() for n, rows in by_length.items()]
    kept, formats = [c[3] for c in cells], " and ".join(sorted({c[0] for c in cells}))
    tokens, docs = sorted({c[1] for c in cells}), "/".join(map(str, sorted({c[2] for c in cells})))
    fidelity = [_load(src) for src in knee["fidelity"]]
    recovered = [_row(r, map_dtype_row("heterofold", dtype))["recovered"] for r in fidelity]
    n, row = max(_load(knee["speed"])["lengths"].items(), key=lambda item: int(item[0]))
    speed = row["settings"][map_dtype_row(setting, dtype)]["speedup"]
    lengths = sorted({r["context_tokens"] for r in fidelity})
    return (f"| facts and fidelity together: recompute `{setting}` with the products in {dtype} "
            f"(`map_dtype`; receiver float32) | exact-fact retrieval {min(kept):.2f}-{max(kept):.2f} of native over "
            f"{len(kept)} cells ({formats} facts, {tokens[0]}-{tokens[-1]} tokens, {docs} documents each); context benefit kept "
            f"{min(recovered):.3f}-{max(recovered):.3f} (both directions, {' and '.join(map(str, lengths))} tokens); "
            f"**{speed:.1f}x** end to end at {n} tokens | "
            f"{_links((knee['speed'], *knee['retrieval'], *knee['fidelity']), prefix)} |")


def _faster_row(experiment: str, ref: str, bench_row: str, prefix: str) -> str:
    """The adapter's maps factored to a low rank (``hf-fold compress``): what it keeps beside the adapter and KV
    Ridge on the same windows, and its end-to-end speed-up beside the adapter's in the same bench run."""
    score, bench = _load((experiment, "score")), _load((experiment, "bench"))["directions"][0]
    made = stage((experiment, "compress"))["result"][ref.split(":", 1)[1]]
    from heterofold_hub.evaluation.provenance import registered_version

    rank, published = made["rank"], registered_version(made["weights_sha256"], ROOT / "registry.json")
    kept = []
    for length, table in score.items():
        row = next(name for name, source in table["adapters"].items() if source == ref)
        r, b = _row(table, row), _row(table, "kv-ridge")
        kept.append(f"{length} tokens {r['recovered']:.3f} ± {r['recovered_se']:.3f} (KL {r['kl']:.3f}; this "
                    f"adapter {_row(table, 'heterofold')['recovered']:.3f}, KV Ridge {b['recovered']:.3f})")
    speed = [f"{row['context_tokens']} tokens: **{row['speedup']['end_to_end'][bench_row]:.1f}x** "
             f"({row['speedup']['end_to_end']['heterofold']:.1f}x unfactored)"
             for row in bench["rows"] if row["context_tokens"] in (512, 2048, 8192)]
    where = f"registered as `{published}`" if published else "not registered"
    return (f"| faster, at a quality cost: the maps factored to rank {rank} (`hf-fold compress --rank {rank}`, "
            f"{where}) | context benefit kept, unseen code: {'; '.join(kept)}. End to end (plan + map, same run): "
            f"{'; '.join(speed)} | {_link((experiment, 'bench'), prefix)} |")


def _bf16_row(experiment: str, bench_row: str, score_row: str, prefix: str) -> str:
    """A package with its products in bf16 (``map_dtype``): what it keeps beside KV Ridge, and its end-to-end
    speed-up beside this adapter's, both with bf16 products, in the same bench run."""
    from heterofold_hub.commands.placement import map_dtype_row

    narrow = lambda name: map_dtype_row(name, "bfloat16")  # noqa: E731
    score, bench = _load((experiment, "score")), _load((experiment, "bench"))["directions"][0]
    kept = [f"{length} tokens {_row(t, narrow(score_row))['recovered']:.3f} (KL {_row(t, narrow(score_row))['kl']:.3f}; "
            f"float32 {_row(t, score_row)['recovered']:.3f}, KV Ridge {_row(t, 'kv-ridge')['recovered']:.3f})"
            for length, t in score.items()]
    speed = [f"{row['context_tokens']} tokens: **{row['speedup']['end_to_end'][narrow(bench_row)]:.1f}x** "
             f"({row['speedup']['end_to_end'][narrow('heterofold')]:.1f}x unfactored in bf16)"
             for row in bench["rows"] if row["context_tokens"] in (512, 2048, 8192)]
    cpu = stage((experiment, "bench"))["provenance"].get("cpu")  # recorded since 8fdcb1f
    where = f", {cpu['model']} with {', '.join(cpu['bf16_flags']) or 'no bf16 flags'}" if cpu else ""
    return (f"| fastest, on a CPU that multiplies bf16 natively: that package with its products in bf16 "
            f"(`map_dtype=torch.bfloat16`; receiver float32) | context benefit kept, unseen code: {'; '.join(kept)}. "
            f"End to end (plan + map, same run{where}): {'; '.join(speed)} | "
            f"{_link((experiment, 'bench'), prefix)} |")


def _limits(direction: str) -> str:
    spec = DIRECTIONS[direction]
    file, fmt, setting = spec["retrieval"][0]
    rows = _load(file)["formats"][fmt][str(_load(file)["lengths"][0])]
    gist = (f"a pure transfer keeps the gist, not exact facts: {rows['transfer']['accuracy']:.2f} exact match where "
            f"native prefill answers {rows['native']['accuracy']:.2f}, so ask for recompute when facts matter "
            "(`statement` reads the question: at transfer time, or deferred to `generate(prompt=)`)")
    if direction == "s2g":
        return f"{gist}; valid only for these exact weights and tokenizers"
    prose = _load(spec["prose"])
    r = _row(prose, "heterofold")
    code = [f"{_load(f)['formats'][fm][str(_load(f)['lengths'][0])][setting]['kept']:.2f} of native at "
            f"{_load(f)['lengths'][0]} tokens" for f, fm, named in spec["retrieval"] if fm == "code" and named == setting]
    return (f"{gist}, and even then facts in code comments come back only in part (`{setting}` keeps "
            f"{', '.join(code)}); less context benefit kept on prose ({r['recovered']:.3f} ± {r['recovered_se']:.3f} "
            f"on {prose['windows']} windows of package READMEs); valid only for these exact weights and tokenizers")


def _limits_sources(direction: str, prefix: str) -> str:
    spec = DIRECTIONS[direction]
    sources = [spec["retrieval"][0][0]] + ([spec["prose"]] if "prose" in spec else [])
    return _links(tuple(sources), prefix)


def adapters_markdown(root: Path = ROOT) -> str:
    """One row per registered adapter repository (the catalogue's own table, with code names for links)."""
    from gen_catalogue import adapters_table, load_versions, registry

    entries = registry(root)["adapters"]
    loaded = {e["repo_id"]: load_versions(e, root) for e in entries}
    return "\n".join(adapters_table(entries, loaded, lambda repo_id: f"`{repo_id}`"))


def blocks() -> dict[str, str]:
    """The README's generated blocks by marker name."""
    return {"expect-s2g": expect_markdown("s2g", FILES_URL), "expect-g2s": expect_markdown("g2s", FILES_URL),
            "adapters": adapters_markdown()}


def write_blocks(path: Path, generated: dict[str, str]) -> None:
    """Rewrite each generated block of a Markdown file between its <!-- gen:NAME --> and <!-- /gen:NAME --> lines."""
    text = path.read_text()
    for name, body in generated.items():
        pattern = re.compile(rf"(<!-- gen:{name} -->\n)(?:.*?\n)?(<!-- /gen:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{path.name} lacks the <!-- gen:{name} --> ... <!-- /gen:{name} --> markers")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    path.write_text(text)


def generated_block(text: str, name: str) -> str:
    """What a Markdown file holds between its <!-- gen:NAME --> markers."""
    return text.split(f"<!-- gen:{name} -->\n", 1)[1].split(f"\n<!-- /gen:{name} -->", 1)[0]


if __name__ == "__main__":  # writing is `python -m benchmarks report`'s, for both pages at once
    for name, body in blocks().items():
        print(f"<!-- gen:{name} -->\n{body}\n<!-- /gen:{name} -->\n")
