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

from gen_catalogue import SPEED_TOKENS  # noqa: E402

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
        "adapter": "heterofold/smollm2-135m-to-gemma3-270m v1.4.0",
        "fidelity": {512: (("real-s2g-levers-long", "score", "512"), ("real-s2g", "train", "kv-ridge")),
                     2048: (("real-s2g-levers-long", "score", "2048"), ("real-s2g", "score", "2048"))},
        # (source, format): the hand-off runs of every cell the recommended setting was chosen on
        "retrieval": [(("real-s2g-v140-handoff", "handoff"), "code"), (("real-s2g-v140-handoff", "handoff"), "prose")],
        "setting": "statement@0.05 k0.7",  # shown when the registry recommends none
        "both_baselines": ("real-bench", "bench"),
        # the other settings: facts and fidelity together, one recompute setting with bf16 products (its retrieval
        # runs, fidelity both ways with hf-fold eval --json, and its timing beside the prefill)
        "more": {"title": "Facts and fidelity together", "page": "knee.md#at-the-knee-in-bf16-statement-tail-at-12",
                 "knee": {"setting": "statement-tail@0.12", "map_dtype": "bfloat16",
                          "retrieval": [("real-s2g-handoff-knee12-bf16-512", "handoff"),
                                        ("real-s2g-handoff-knee12-bf16-1024", "handoff"),
                                        ("real-s2g-handoff-knee12-bf16-prose-1024", "handoff"),
                                        ("real-s2g-handoff-knee12-bf16-2048", "handoff")],
                          "fidelity": [f"handoff/fidelity-{d}-{n}-tail12-bf16.json" for d in ("s2g", "g2s")
                                       for n in (512, 2048)],
                          "speed": ("real-s2g-handoff-knee-bf16", "handoff-speed")}},
    },
    "g2s": {
        "title": "Gemma 3 270M -> SmolLM2-135M",
        "adapter": "heterofold/gemma3-270m-to-smollm2-135m v1.4.0",
        # v1.4.0 is v1.4.0-rc.2's package promoted: its runs name the candidate
        "fidelity": {512: (("real-g2s-v140rc2", "score", "512"), ("real-g2s", "train", "kv-ridge")),
                     2048: (("real-g2s-v140rc2", "score", "2048"), ("real-g2s-natural", "score", "2048"))},
        "retrieval": [((f"real-g2s-v140rc2-handoff{run}", "handoff"), fmt) for fmt in ("code", "prose")
                      for run in ("", "-1024", f"-2048-{fmt}")],
        "setting": "statement@0.05 k0.7",  # shown when the registry recommends none
        "both_baselines": ("real-bench", "bench"),
        # the faster option: (experiment, bench row of the package, its score row), its products in bf16
        "more": {"title": "Low rank and bf16 together", "page": "low-rank.md#low-rank-and-bf16-together",
                 "faster_bf16": ("real-g2s-rank64-bf16", "v1.0.0", "low-rank")},
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


FORMAT_LABELS = {"code": "code", "prose": "prose"}


def _entry(spec: dict) -> dict:
    """The registry entry of the adapter a direction shows. Its figures come from runs chosen for one version, so the
    version ``spec`` names must be the one users resolve: after a promotion the block fails here until its runs are
    updated, instead of showing the old version's figures under the new default's recommended setting and speed."""
    from gen_catalogue import registry, resolved

    repo_id, version = spec["adapter"].split()
    entry = next(e for e in registry()["adapters"] if e["repo_id"] == repo_id)
    default = resolved(entry)["version"]
    if version != default:
        raise ValueError(f"docs/gen_tables.py shows {repo_id} {version}, but the registry resolves {default}: point "
                         f"DIRECTIONS' runs for this pair at {default}'s results and name it there.")
    return entry


def expect_markdown(direction: str, prefix: str = "") -> str:
    """The "what to expect" table of one direction, four rows: the context benefit kept, exact facts with the
    recommended setting, the end-to-end speed-up, and where the other trade-offs are measured. ``prefix`` makes the
    links relative to the page that shows it ("" from the repository root)."""
    spec = DIRECTIONS[direction]
    lines = [f"**{spec['title']}** (`{spec['adapter']}`)", "",
             "| what | figure | source |", "| --- | --- | --- |"]
    lines.append(_fidelity_row(spec, prefix))
    lines.append(_facts_row(spec, prefix))
    lines.append(_speed_row(spec, prefix))
    lines.append(_more_row(spec, prefix))
    return "\n".join(lines)


def _fidelity_row(spec: dict, prefix: str) -> str:
    cells, ridge, sources = [], [], []
    for length, (own_file, baseline_file) in spec["fidelity"].items():
        own, base = _load(own_file), _load(baseline_file)
        r = _row(own, "heterofold")
        cells.append(f"**{r['recovered']:.3f} ± {r['recovered_se']:.3f}** at {length} tokens ({own['windows']} "
                     f"windows; KL {r['kl']:.3f})")
        ridge.append(f"{_row(base, 'kv-ridge')['recovered']:.3f}")
        sources += [own_file, baseline_file]
    return (f"| context benefit kept (`recovered`), unseen code | {'; '.join(cells)}. KV Ridge on the same windows: "
            f"{' and '.join(ridge)} | {_links(tuple(sources), prefix)} |")


def _facts_row(spec: dict, prefix: str) -> str:
    """Exact-fact retrieval with the setting the registry recommends for this version (or, when it recommends none,
    the setting the direction's runs measured), as a share of the receiver's own prefill's answers, per cell."""
    from gen_catalogue import recommended

    found = recommended(_entry(spec))
    setting = found[0] if found else spec["setting"]
    label = (f"facts with the recommended setting `{setting}`" if found else
             f"facts with `{setting}` (this version recommends no setting: without `recompute` it runs the pure "
             "transfer)")
    cells, shares, pure, native, sources = {}, [], [], [], []
    for file, fmt in spec["retrieval"]:
        result = _load(file)
        for length in result["lengths"]:
            rows = result["formats"][fmt][str(length)]
            cells.setdefault(fmt, []).append(f"{rows[setting]['kept']:.2f} at {length}")
            shares.append(rows[setting]["recomputed_share"])
            pure.append(rows["transfer"]["accuracy"])
            native.append(rows["native"]["accuracy"])
        sources.append(file)
    per_format = "; ".join(f"{FORMAT_LABELS[fmt]} {', '.join(c)} tokens" for fmt, c in cells.items())
    return (f"| {label} | share of native prefill's exact answers: {per_format} ({min(shares):.1%}-{max(shares):.1%} "
            f"of the context recomputed; 96 documents a cell). Native answers {min(native):.2f}-{max(native):.2f}; "
            f"the pure transfer {max(pure):.2f} at most | {_links(tuple(sources), prefix)} |")


def _speed_row(spec: dict, prefix: str) -> str:
    """The newest committed hand-off timing of this version's recommended setting (plan + map + recompute, against the
    receiver's own prefill), and llama.cpp's prefill of the same GGUF at the longest length benched."""
    from gen_catalogue import newest_timing, on_cpu, recommended

    entry = _entry(spec)
    found = recommended(entry)
    setting = found[0] if found else spec["setting"]
    timing = newest_timing(entry, setting, handoff_only=True)
    source = (timing.file.removesuffix(".json"), "handoff-speed")
    result = _load(source)
    cells = [f"{n} tokens: **{speeds['transfer']:.1f}x** pure transfer, **{speeds[setting]:.1f}x** with `{setting}`"
             f"{_bf16_twins(result['lengths'][str(n)]['settings'], setting)}"
             for n, speeds in sorted(timing.speedups.items())]
    bench = next(d for d in _load(spec["both_baselines"])["directions"] if d["sender"] == entry["sender"]["id"])
    longest = max(bench["rows"], key=lambda r: r["context_tokens"])
    return (f"| end-to-end speed-up over the receiver's own prefill (batch {result['batch']}, "
            f"{stage(source)['provenance']['threads']} CPU threads{on_cpu(timing.cpu)}) | "
            f"{'; '.join(cells)}. Over llama.cpp's prefill of the same GGUF (pure transfer): "
            f"{longest['speedup']['vs_llamacpp']['heterofold']:.1f}x at {longest['context_tokens']} tokens | "
            f"{_links((source, spec['both_baselines']), prefix)} |")


def _bf16_twins(settings: dict, setting: str) -> str:
    """`` (bf16 products: Nx, Mx)``: the pure transfer's and ``setting``'s speed-ups with the map's products in bf16,
    where the same run timed them beside float32 (``settings``: one length's rows of a hand-off timing); else ''."""
    from heterofold_hub.commands.placement import map_dtype_row

    twins = [settings.get(map_dtype_row(name, "bfloat16")) for name in ("transfer", setting)]
    if not all(twins):
        return ""
    return f" (bf16 products: {twins[0]['speedup']:.1f}x, {twins[1]['speedup']:.1f}x)"


def _more_row(spec: dict, prefix: str) -> str:
    """Where the other trade-offs are measured, with the one each direction is best known for."""
    more = spec["more"]
    page = f"[{more['title']}]({prefix}docs/results/{more['page']})"
    if "knee" in more:
        return f"| other settings | {_knee_cell(more['knee'])}: {page} | {_links(_knee_sources(more['knee']), prefix)} |"
    experiment, bench_row, score_row = more["faster_bf16"]
    return (f"| other settings | {_bf16_cell(experiment, bench_row, score_row)}: {page} | "
            f"{_link((experiment, 'bench'), prefix)} |")


def _version_name(adapter_record: dict) -> str:
    """``repo@version`` of the registered version a results file's adapter record names (by its weights' hash)."""
    from heterofold_hub.evaluation.provenance import registered_version

    return registered_version(adapter_record["weights_sha256"], ROOT / "registry.json") or "an unregistered package"


def _knee_sources(knee: dict) -> tuple:
    return (knee["speed"], *knee["retrieval"], *knee["fidelity"])


def _knee_cell(knee: dict) -> str:
    """One recompute setting with the adapter's products in ``map_dtype``, for facts and fidelity together: the
    adapter version it was measured with (a newer one may head the table), the context benefit it keeps in both
    directions, its share of native retrieval over every measured cell, and its end-to-end speed-up at the longest
    length timed."""
    from heterofold_hub.commands.placement import map_dtype_row

    setting, dtype = knee["setting"], knee["map_dtype"]
    runs = [_load(src) for src in knee["retrieval"]]
    kept = [rows[setting]["kept"] for run in runs for by_length in run["formats"].values() for rows in by_length.values()]
    recovered = [_row(_load(src), map_dtype_row("heterofold", dtype))["recovered"] for src in knee["fidelity"]]
    n, row = max(_load(knee["speed"])["lengths"].items(), key=lambda item: int(item[0]))
    speed = row["settings"][map_dtype_row(setting, dtype)]["speedup"]
    name = _version_name(stage(knee["speed"])["provenance"]["adapters"]["heterofold"])
    return (f"facts and fidelity together, measured with `{name}`: `{setting}` with the map's products in {dtype} "
            f"keeps {min(recovered):.3f}-{max(recovered):.3f} of the context benefit and "
            f"{min(kept):.2f}-{max(kept):.2f} of native's facts ({len(kept)} cells), **{speed:.1f}x** end to end at "
            f"{n} tokens")


def _bf16_cell(experiment: str, bench_row: str, score_row: str) -> str:
    """A package with its products in bf16 (``map_dtype``): what it keeps, and its end-to-end speed-up at the
    benched length nearest the adapters table's."""
    from heterofold_hub.commands.placement import map_dtype_row

    narrow = lambda name: map_dtype_row(name, "bfloat16")  # noqa: E731
    score, bench = _load((experiment, "score")), _load((experiment, "bench"))["directions"][0]
    kept = [f"{_row(t, narrow(score_row))['recovered']:.3f} at {length} tokens" for length, t in score.items()]
    row = min(bench["rows"], key=lambda r: abs(r["context_tokens"] - SPEED_TOKENS))
    name = _version_name(
        stage((experiment, "bench"))["provenance"]["adapters"][f"{bench['sender']} -> {bench['receiver']}"][bench_row])
    return (f"faster: `{name}` with its products in bf16 keeps {' and '.join(kept)}, **"
            f"{row['speedup']['end_to_end'][narrow(bench_row)]:.1f}x** end to end at {row['context_tokens']} tokens "
            f"(on a CPU that multiplies bf16 natively)")


def adapters_markdown(root: Path = ROOT) -> str:
    """One row per registered adapter repository (the catalogue's own table, with code names for links)."""
    from gen_catalogue import adapters_table, load_versions, registry

    entries = registry(root)["adapters"]
    loaded = {e["repo_id"]: load_versions(e, root) for e in entries}
    return "\n".join(adapters_table(entries, loaded, lambda repo_id: f"`{repo_id}`",
                                    lambda name: f"[{name}]({FILES_URL}benchmarks/results/{name})"))


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
