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


def adapters_table(entries: list[dict], loaded: dict[str, list["Version"]], link) -> list[str]:
    """One row per adapter repository: pair, method, versions, the newest version's recovered on the reference split
    (the figure the resolver ranks and gates on) and its published figure with the split that measured it.
    ``link(repo_id)``: how the repo is named in the row (a page link, or code)."""
    from heterofold_hub.hub.registry_schema import REFERENCE_SPLIT

    lines = [f"| adapter | sender -> receiver | method | versions | newest: recovered on {REFERENCE_SPLIT} | "
             "as published (measured on) |", "| --- | --- | --- | --- | ---: | --- |"]
    for entry in entries:
        versions = loaded[entry["repo_id"]]
        newest = versions[-1]
        row = _own_row(newest, entry["method"])
        lines.append(f"| {link(entry['repo_id'])} | `{entry['sender']['id']}` -> `{entry['receiver']['id']}` | "
                     f"{entry['method']} | {', '.join(v.name for v in versions)} | {on_reference(newest)} | "
                     f"{row['recovered']:.3f} ({measured_on(newest)}) |")
    return lines


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
    return f"`{data}`" + (f", {windows} windows" if windows else "")


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
    repo_id, newest = entry["repo_id"], versions[-1]
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
             f"Method: `{entry['method']}`. Hub: `{entry['hub']}`. Newest version: **{newest.name}** (what "
             "`HeteroFoldModel.from_pretrained` resolves for this pair unless you pin another).", "",
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
        lines.append(f"| {v.name} | {v.date} (`{v.entry['commit'][:7]}`) | {trained_on(v)} | {on_reference(v)} | "
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
             "Every adapter repository in `registry.json`, generated at build time from the registry and the "
             "published packages in the embedded hub (`hub/repos/`). *Recovered* is the newest version's figure on the "
             "registry's reference split, beside the figure it was published with.", ""]
    lines += adapters_table(entries, loaded, lambda repo_id: f"[{repo_id}]({Path(page_name(repo_id)).name})")
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
