"""The adapter catalogue and adapter history pages, generated from ``registry.json`` and the published packages in
the embedded hub (``hub/repos/<repo>``: each version's model card, rendered from ``cards/adapter_card.md.j2`` when
it was pushed, its ``adapter_config.json`` and ``metrics.json``). Nothing on these pages is typed by hand.

The MkDocs hook (``docs/hooks.py``) adds these pages to the site at build time; ``python docs/gen_catalogue.py OUT``
writes them to a folder instead, to read them without building.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = "catalogue"  # the site folder of the catalogue pages
GEMMA_TERMS = "https://ai.google.dev/gemma/terms"


@dataclass
class Version:
    """One published version: its registry entry and the files of its hub commit."""

    entry: dict
    config: dict
    metrics: dict
    card: str
    time: str  # the hub commit's author date, ISO 8601
    reference: object = None  # heterofold_hub's Fidelity on the registry's reference split, when measured there

    @property
    def date(self) -> str:
        return self.time[:10]

    @property
    def name(self) -> str:
        return self.entry["version"]

    @property
    def prerelease(self) -> bool:
        from heterofold_hub.hub.base import is_prerelease

        return is_prerelease(self.name)


def resolved(entry: dict) -> dict:
    """The registry record of the version a user resolves from ``entry`` by default: its newest release (a
    pre-release, ``v1.4.0-rc.1``, resolves only when pinned); the newest version when there are only pre-releases."""
    from heterofold_hub.hub.base import is_prerelease, version_key

    releases = [v for v in entry["versions"] if not is_prerelease(v["version"])]
    return max(releases or entry["versions"], key=lambda v: version_key(v["version"]))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True).stdout


def hub_repo(repo_id: str, root: Path = ROOT) -> Path:
    return root / "hub" / "repos" / repo_id


def load_versions(entry: dict, root: Path = ROOT) -> list[Version]:
    """The versions of a registry entry, oldest first, each read from the commit the registry records for it, with
    its figures on the reference split as the library's resolver reads them (``VersionEntry.fidelity``)."""
    from heterofold_hub.hub.registry import Registry

    parsed = next(e for e in Registry.load(root / "registry.json").entries() if e.repo_id == entry["repo_id"])
    repo = hub_repo(entry["repo_id"], root)
    out = []
    for v in entry["versions"]:
        commit = v["commit"]
        out.append(Version(entry=v,
                           config=json.loads(_git(repo, "show", f"{commit}:adapter_config.json")),
                           metrics=json.loads(_git(repo, "show", f"{commit}:metrics.json")),
                           card=_git(repo, "show", f"{commit}:README.md"),
                           time=_git(repo, "log", "-1", "--format=%aI", commit).strip(),
                           reference=next(p for p in parsed.versions if p.version == v["version"]).fidelity()))
    return out


def on_reference(v: Version) -> str:
    """The version's recovered on the registry's reference split (``bundled:unseen``), ± its standard error."""
    if v.reference is None:
        return "not measured"
    se = v.reference.figures.get("recovered_se")
    return f"{v.reference.recovered:.3f}" + (f" ± {se:.3f}" if se is not None else "")


RESULTS = ROOT / "benchmarks" / "results"

# Where each registered pair's KV Ridge was measured on the reference split at 512 tokens: a committed results file
# (relative to benchmarks/results/) and, for an experiment's NAME.json, its stage and the table in it (a train
# stage's package, a score stage's context length). Names only: the figure is read from the file.
KV_RIDGE = {
    ("gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1"): ("real-g2s.json", "train", "kv-ridge"),
    ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"): ("real-s2g.json", "train", "kv-ridge"),
    ("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code"): ("tiny-l2q.json", "score", "512"),
    ("heterofold/tiny-qwen-code", "heterofold/tiny-llama-code"): ("tiny-q2l.json", "score", "512"),
    ("heterofold/tiny-llama-code", "gguf/smollm2-135m-instruct-q4_1"): ("pivot/fidelity-l2s-kv-ridge.json",),
    ("gguf/smollm2-135m-instruct-q4_1", "heterofold/tiny-llama-code"): ("pivot/fidelity-s2l-kv-ridge.json",),
}
SPEED_TOKENS = 2048  # the context length the adapters table quotes speed at (the nearest measured)


def test_pair(entry: dict) -> bool:
    """Whether a side of the pair is one of the tiny models the project trained (they test plumbing, not quality)."""
    from heterofold_hub.zoo import DEMO_MODELS

    return any(entry[side]["id"] in DEMO_MODELS for side in ("sender", "receiver"))


def kv_ridge(entry: dict) -> tuple[float, str] | None:
    """The pair's KV Ridge recovered on the reference split at 512 tokens, and the file it comes from."""
    source = KV_RIDGE.get((entry["sender"]["id"], entry["receiver"]["id"]))
    if source is None:
        return None
    data = json.loads((RESULTS / source[0]).read_text())
    if len(source) > 1:
        data = data["stages"][source[1]]["result"][source[2]]
        data = data["heldout"] if source[1] == "train" else data
    return data["methods"]["kv-ridge"]["recovered"], source[0]


def recommended(entry: dict) -> tuple[str, dict] | None:
    """The default version's recommended setting as results name it (``TransferConfig.label``) and that
    evaluation's results, or None when the version recommends none."""
    found = [e for e in resolved(entry).get("evaluations", []) if e.get("recommended")]
    if not found:
        return None
    from heterofold_hub.transfer.config import TransferConfig

    return TransferConfig.from_dict(found[-1]["recommended"]).label, found[-1]["results"]


def facts_cell(entry: dict) -> str:
    """Exact-fact retrieval with the recommended setting, as a share of the receiver's own prefill's answers, over
    the cells its evaluation measured."""
    found = recommended(entry)
    if found is None:
        return "no setting recommended"
    name, results = found
    kept = [value for key, value in results.items() if key.startswith("kept_")]
    if not kept:
        return f"`{name}`: not measured"
    return f"`{name}`: {min(kept):.2f}-{max(kept):.2f} of native ({len(kept)} cells)"


class Timing(NamedTuple):
    """One committed timing of an adapter's weights: its run's ``date``, the results ``file``, ``kind`` (``handoff``:
    the user's call, plan + map + recompute, per setting; ``bench``: plan + map), ``speedups`` ({tokens: {setting:
    speed-up}}) and the ``cpu`` model its run recorded (None for runs made before provenance recorded it): speed-ups
    of different CPUs do not compare, so a page that shows one names its CPU."""

    date: str
    file: str
    kind: str
    speedups: dict[int, dict[str, float]]
    cpu: str | None


def _speed_rows(weights: str):
    """Every committed :class:`Timing` of the adapter with these weights (float32 products): a hand-off timing
    (``handoff-speed``, each setting) or a bench row."""
    for path in sorted(RESULTS.glob("*.json")):
        for stage, entry in json.loads(path.read_text())["stages"].items():
            prov, result = entry["provenance"], entry["result"]
            cpu = (prov.get("cpu") or {}).get("model")
            if stage == "handoff-speed":
                used = (prov.get("adapters") or {}).get("heterofold", {})
                if used.get("weights_sha256") == weights and not used.get("map_dtype"):
                    yield Timing(prov["date"], path.name, "handoff", {
                        int(n): {s: row["speedup"] for s, row in by.items() if "bfloat16" not in s}
                        for n, by in ((n, r["settings"]) for n, r in result["lengths"].items())}, cpu)
            elif stage == "bench":
                for direction in result["directions"]:
                    rows = (prov.get("adapters") or {}).get(f"{direction['sender']} -> {direction['receiver']}", {})
                    for name, used in rows.items():
                        if used.get("weights_sha256") == weights and not used.get("map_dtype"):
                            yield Timing(prov["date"], path.name, "bench", {
                                r["context_tokens"]: {"transfer": r["prefill_s"] / (r["plan_s"] + r["transfer_s"][name])}
                                for r in direction["rows"]}, cpu)


def newest_timing(entry: dict, setting: str | None = None, *, handoff_only: bool = False) -> Timing | None:
    """The newest committed :class:`Timing` of the default version's weights: a hand-off
    timing of ``setting`` (default: the recommended one) first, so a run timing other settings, such as a recompute
    sweep, does not hide it; then any hand-off timing; then a bench row (``handoff_only``: no bench row). None when
    there is none."""
    weights = resolved(entry)["files"].get("adapter.safetensors")
    if setting is None:
        setting = (recommended(entry) or (None,))[0]
    rows = [r for r in _speed_rows(weights) if r.kind == "handoff" or not handoff_only]

    def rank(row: Timing):
        times_setting = setting is not None and all(setting in speeds for speeds in row.speedups.values())
        return row.kind == "handoff" and times_setting, row.kind == "handoff", row.date

    return max(rows, key=rank, default=None)


def speed_cell(entry: dict, link=lambda name: name) -> str:
    """The default version's end-to-end speed-up over the receiver's own prefill, at the measured length nearest
    :data:`SPEED_TOKENS`: pure transfer, and with the recommended setting when that was timed. From
    :func:`newest_timing`; ``link(file)`` names the source."""
    found = newest_timing(entry)
    if found is None:
        return "not measured"
    tokens = min(found.speedups, key=lambda n: abs(n - SPEED_TOKENS))
    speeds = found.speedups[tokens]
    cell = f"{speeds['transfer']:.1f}x pure"
    setting = recommended(entry)
    if setting and setting[0] in speeds:
        cell += f", {speeds[setting[0]]:.1f}x `{setting[0]}`"
    return f"{cell} ({tokens} tokens{on_cpu(found.cpu)}; {link(found.file)})"


def on_cpu(cpu: str | None) -> str:
    """``, on CPU`` where the run recorded its CPU model; else ''."""
    return f", on {cpu}" if cpu else ""


def recovered_cell(entry: dict, newest: "Version") -> str:
    """The default version's recovered on the reference split, beside the pair's KV Ridge; flagged when below it."""
    figure = on_reference(newest)
    if entry["method"] == "kv-ridge":
        return f"{figure} (is KV Ridge)"
    ridge = kv_ridge(entry)
    if ridge is None or newest.reference is None:
        return f"{figure} (KV Ridge not measured)"
    if newest.reference.recovered < ridge[0]:
        return f"{figure} **below KV Ridge** ({ridge[0]:.3f})"
    return f"{figure} (KV Ridge {ridge[0]:.3f})"


def adapters_table(entries: list[dict], loaded: dict[str, list["Version"]], link, file_link=lambda name: name) -> list[str]:
    """One row per adapter repository (its name says its pair), the real pairs first: method, default version, its recovered on the
    reference split (the figure the resolver ranks and gates on) beside the pair's KV Ridge, exact facts with its
    recommended setting, and its end-to-end speed-up where measured. ``link(repo_id)``: how the repo is named in the
    row (a page link, or code); ``file_link(name)``: how a results file is named."""
    from heterofold_hub.hub.registry_schema import REFERENCE_SPLIT

    lines = [f"| adapter | method | default (others) | recovered on `{REFERENCE_SPLIT}` | facts, recommended setting | "
             "end to end, default |", "| --- | --- | --- | --- | --- | --- |"]
    for entry in sorted(entries, key=test_pair):
        versions = loaded[entry["repo_id"]]
        newest = next(v for v in versions if v.name == resolved(entry)["version"])
        method = entry["method"] + (" (**test pair**: a tiny model)" if test_pair(entry) else "")
        others = ", ".join(v.name for v in versions if v is not newest and not v.prerelease)
        candidates = ", ".join(v.name for v in versions if v.prerelease)  # used only when pinned
        listed = "; ".join(part for part in (others, candidates and f"pre-release {candidates}") if part)
        older = f" ({listed})" if listed else ""
        lines.append(f"| {link(entry['repo_id'])} | {method} | {newest.name}{older} | "
                     f"{recovered_cell(entry, newest)} | {facts_cell(entry)} | {speed_cell(entry, file_link)} |")
    return lines


TABLE_NOTE = ("Real pairs first; a **test pair** has one of the project's tiny models on a side (they test plumbing, "
              "not quality). The *default* version is the newest release, the one `from_pretrained` resolves (a "
              "pre-release is used only when pinned). *Recovered* is its figure on the registry's reference split, "
              "beside KV Ridge measured on the same split for that pair, and marked **below KV Ridge** where it falls "
              "under. "
              "*Facts* is exact-fact retrieval with the setting the registry recommends for that version, as a share "
              "of the receiver's own prefill's answers over the cells measured. *End to end* is the speed-up over the "
              "receiver's own prefill (plan + map, and with the recommended setting where timed), from the newest "
              "committed timing of exactly that version's weights.")


def registry(root: Path = ROOT) -> dict:
    return json.loads((root / "registry.json").read_text())


def page_name(repo_id: str) -> str:
    """The catalogue page of a repository, relative to the docs folder."""
    return f"{CATALOGUE}/{repo_id.replace('/', '--')}.md"


def gemma_derived(entry: dict) -> bool:
    return any("gemma" in entry[side]["id"].lower() for side in ("sender", "receiver"))


def measured_on(v: Version) -> str:
    """Where a version's recorded figures come from: its held-out split (as its card and the registry state it) and
    the windows its metrics.json scored."""
    from heterofold_hub.hub.cards import published_split

    split = published_split(v.config, v.metrics)
    m = v.metrics
    where = f"`{split}`" if split else "a split its package does not record"
    return f"{where}, {m['windows']} windows of {m['context_tokens']} tokens"


def trained_on(v: Version) -> str:
    args = v.config.get("training_args") or {}
    if args.get("via") or v.config.get("method") == "composed":
        return f"composed via `{args.get('via')}`"
    data, windows = args.get("data"), v.config.get("training_windows")
    if not data:
        return "not recorded"
    own = f"`{data}`" + (f", {windows} windows" if windows else "")
    if args.get("context_tokens", 512) != 512:
        own += f" of {args['context_tokens']} tokens"
    continued = (v.config.get("extra") or {}).get("continued_from")
    if continued:  # --init adapter: the windows above came on top of the package it went on from
        # a chain continued twice records its data once per link: each source is named once
        own += f", continued from a package trained on `{', '.join(dict.fromkeys(continued['data']))}`"
        own += f", {continued['training_windows']} windows" if continued.get("training_windows") else ""
    return own


def _short(value: str | None) -> str | None:
    """A ``sha256:<hex>`` identity cut to 16 hex digits, for display."""
    return value[:len("sha256:") + 16] + "…" if value and value.startswith("sha256:") else value


def _code(value) -> str:
    return f"`{value}`" if value else "not recorded"


def _own_row(v: Version, method: str) -> dict:
    rows = v.metrics["methods"]
    return rows.get(method) or next(r for name, r in rows.items() if name not in ("native", "no-context"))


def _demote(card: str) -> str:
    """A model card's body for embedding in a page: front matter and title dropped, headings one level down."""
    body = card.split("\n---\n", 1)[1] if card.startswith("---\n") else card
    body = re.sub(r"^# .*\n", "", body.lstrip(), count=1)
    return re.sub(r"^(#{2,5}) ", lambda m: "#" + m.group(1) + " ", body, flags=re.M).strip()


def repo_page(entry: dict, versions: list[Version]) -> str:
    repo_id, newest = entry["repo_id"], next(v for v in versions if v.name == resolved(entry)["version"])
    s, r = entry["sender"], entry["receiver"]
    lines = [f"# {repo_id}", "", entry["summary"], "",
             "| | sender | receiver |", "| --- | --- | --- |",
             f"| model | `{s['id']}` | `{r['id']}` |",
             f"| architecture | {s['spec']['model_type']}, {s['spec']['num_layers']} layers, {s['spec']['kv_heads']} KV "
             f"heads x {s['spec']['head_dim']} | {r['spec']['model_type']}, {r['spec']['num_layers']} layers, "
             f"{r['spec']['kv_heads']} KV heads x {r['spec']['head_dim']} |",
             f"| revision | {_code(_short(s['revision']))} | {_code(_short(r['revision']))} |",
             f"| tokenizer | {_code(_short(s['tokenizer']))} | {_code(_short(r['tokenizer']))} |", "",
             "Hashes are shortened here; `registry.json` and the model card below hold them in full.", "",
             f"Method: `{entry['method']}`. Hub: `{entry['hub']}`. Default version: **{newest.name}**, the newest "
             "release (what `HeteroFoldModel.from_pretrained` resolves for this pair unless you pin another; a "
             "pre-release, `vX.Y.Z-rc.N`, is used only when pinned).", "",
             "## Versions", "",
             "Newest first. *On the reference split*: recovered re-measured for every version on the same windows of "
             "`bundled:unseen` (an evaluation recorded in `registry.json`; the figure the resolver compares). The other "
             "figures are each version's own `metrics.json`: recovered (mean ± standard error over its windows), KL "
             "to native prefill (nats/token) and top-1 agreement, on the split named; figures measured on different "
             "splits are not comparable.", "",
             "| version | published (hub commit) | trained on | on the reference split | measured on | recovered | KL "
             "| top-1 |", "| --- | --- | --- | ---: | --- | ---: | ---: | ---: |"]
    for v in reversed(versions):
        row = _own_row(v, entry["method"])
        name = f"{v.name} (pre-release)" if v.prerelease else v.name
        lines.append(f"| {name} | {v.date} (`{v.entry['commit'][:7]}`) | {trained_on(v)} | {on_reference(v)} | "
                     f"{measured_on(v)} | {row['recovered']:.3f} ± {row['recovered_se']:.3f} | {row['kl']:.3f} | "
                     f"{row['top1']:.3f} |")
    local = repo_id.split("/")[-1]
    lines += ["", "## How to load it", "",
              "In Python (the registry resolves the pair, checks tokenizers and dims, and loads the frozen receiver):",
              "", "```python", "from heterofold_hub import HeteroFoldModel", "",
              "model = HeteroFoldModel.from_pretrained(",
              f'    "{s["id"]}",',
              f'    "{r["id"]}",',
              f'    adapter="{repo_id}",',
              f'    revision="{newest.name}",', ")", "```", "",
              "From the command line:", "", "```bash",
              f"hf-fold show {repo_id}",
              f"hf-fold pull {repo_id}@{newest.name} --out {local}",
              f"hf-fold eval --sender {s['id']} \\", f"  --receiver {r['id']} --adapter {local}", "```", ""]
    if gemma_derived(entry):
        lines += ["## Terms", "",
                  f"Fitted on Gemma 3 weights, so the [Gemma Terms of Use]({GEMMA_TERMS}) apply to this adapter "
                  "(see `NOTICE`).", ""]
    lines += [f"## Model card ({newest.name})", "",
              f"The card published with {newest.name}, as `hf-fold show` prints it.", "", _demote(newest.card), ""]
    return "\n".join(lines)


def index_page(entries: list[dict], loaded: dict[str, list[Version]]) -> str:
    lines = ["# Adapter catalogue", "",
             "Every adapter repository in `registry.json`, generated at build time from the registry, the published "
             "packages in the embedded hub (`hub/repos/`) and the committed results. " + TABLE_NOTE, ""]
    lines += adapters_table(entries, loaded, lambda repo_id: f"[{repo_id}]({Path(page_name(repo_id)).name})",
                            lambda name: f"[{name}](../assets/results/{name})")
    lines += ["", "See also the [adapter history](history.md), every version in publication order."]
    return "\n".join(lines) + "\n"


def history_page(entries: list[dict], loaded: dict[str, list[Version]]) -> str:
    items = [(v.time, entry, v) for entry in entries for v in loaded[entry["repo_id"]]]
    items.sort(key=lambda item: (item[0], item[1]["repo_id"], item[2].name), reverse=True)
    lines = ["# Adapter history", "",
             "Every published adapter version, newest first, from `registry.json` and the hub commit it records. "
             "The library's own changes are in the [changelog](../changelog.md).", "",
             "| date | adapter | version | hub commit | trained on | on `bundled:unseen` | as published (measured on) |",
             "| --- | --- | --- | --- | --- | ---: | --- |"]
    for _, entry, v in items:
        row = _own_row(v, entry["method"])
        link = Path(page_name(entry["repo_id"])).name
        lines.append(f"| {v.date} | [{entry['repo_id']}]({link}) | {v.name} | `{v.entry['commit'][:7]}` | "
                     f"{trained_on(v)} | {on_reference(v)} | {row['recovered']:.3f} ({measured_on(v)}) |")
    return "\n".join(lines) + "\n"


def pages(root: Path = ROOT) -> dict[str, str]:
    """Every generated page, by its path relative to the docs folder."""
    entries = registry(root)["adapters"]
    loaded = {e["repo_id"]: load_versions(e, root) for e in entries}
    out = {f"{CATALOGUE}/index.md": index_page(entries, loaded), f"{CATALOGUE}/history.md": history_page(entries, loaded)}
    for entry in entries:
        out[page_name(entry["repo_id"])] = repo_page(entry, loaded[entry["repo_id"]])
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "catalogue-preview")
    for name, text in pages().items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
