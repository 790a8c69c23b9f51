"""``hf-fold push / pull / list / show / search``: publish adapter packages and browse ``registry.json``."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from heterofold_hub.commands import conventions
from heterofold_hub.commands.tables import Column, clip, print_table
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.hub.base import is_prerelease, no_release, split_ref
from heterofold_hub.hub.registry import AdapterEntry, Registry, VersionEntry, newest_release_of, open_registry


def find_entry(registry: Registry, repo_id: str) -> AdapterEntry:
    from heterofold_hub.hub.base import unknown_repo_hint

    entry = next((e for e in registry.entries() if e.repo_id == repo_id), None)
    if entry is None:
        hint = unknown_repo_hint(repo_id, [e.repo_id for e in registry.entries()])
        raise HeteroFoldError(f"{repo_id!r} is not in the registry {registry.path}; {hint}.")
    return entry


def pick_versions(entry: AdapterEntry, version: str | None) -> list[VersionEntry]:
    """All versions of ``entry`` when ``version`` is None, else just that one (an error if it is missing)."""
    picked = [v for v in entry.versions if version in (None, v.version)]
    if not picked:
        raise HeteroFoldError(f"{entry.repo_id} has no version {version}; "
                              f"published: {', '.join(v.version for v in entry.versions)}.")
    return picked


def resolved_version(entry: AdapterEntry, version: str | None) -> VersionEntry:
    """The pinned ``version``, else the one a user resolves by default: the newest release (an error naming the
    pre-releases when there are only those)."""
    if version is not None:
        return pick_versions(entry, version)[0]
    chosen = newest_release_of(entry)
    if chosen is None:
        raise no_release(entry.repo_id, [v.version for v in entry.versions])
    return chosen


def run_push(package: Path, *, repo_id: str, version: str, hub: str, hub_dir: Path | None, token: str | None,
             registry_path: Path | None, license: str | None, console: Console = conventions.messages) -> None:
    """Publish ``package``; what was published is a message (``console``: stderr), push has no data to print."""
    from heterofold_hub.hub import get_hub
    from heterofold_hub.hub.publishing import push_package
    from heterofold_hub.progress import status

    registry = open_registry(registry_path, must_exist=False)  # a first push creates it
    with status(f"publishing {repo_id} {version}", console):
        published = push_package(package, repo_id=repo_id, version=version, hub=get_hub(hub, hub_dir=hub_dir, token=token),
                                 registry=registry, license=license)
    if published.reused:
        console.print(f"{published.repo_id} {published.version} was already in the hub with exactly these files "
                      f"(commit {published.commit[:12]}; an earlier push stopped before registering it): nothing "
                      f"uploaded, registered it in {registry.path}", highlight=False)
    else:
        console.print(f"published {published.repo_id} {published.version} (commit {published.commit[:12]}) to "
                      f"{published.url_or_path}; registered in {registry.path}", highlight=False)
    if published.evaluations_from:
        console.print(f"{published.version} took the evaluations of {published.evaluations_from} (its recommended "
                      "setting included): it was published with the same weights, config and metrics", highlight=False)


def run_pull(ref: str, *, out: Path | None, registry_path: Path | None, hub_dir: Path | None, token: str | None,
             local_files_only: bool, console: Console) -> Path:
    """Fetch (and copy to ``out``) a registered version; prints ``REPO VERSION: FOLDER`` on ``console`` (data)."""
    from heterofold_hub.hub.fetching import fetch

    conventions.check_outputs(conventions.output_problem("--out", out, folder=True, empty=True))
    registry = open_registry(registry_path, must_exist=True)
    repo_id, version = split_ref(ref)
    entry = find_entry(registry, repo_id)
    chosen = resolved_version(entry, version)
    folder = fetch(registry, entry, chosen, hub_dir=hub_dir, token=token, local_files_only=local_files_only)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name in chosen.files:
            shutil.copyfile(folder / name, out / name)  # copyfile follows the HF cache's symlinks
        folder = out
    console.print(f"{repo_id} {chosen.version}: {folder}", highlight=False, soft_wrap=True)
    return folder


# list and search: the latest version's figures on the registry's reference split where it was measured there, else
# its published figures, and which they are. Narrow terminals give up hub, sender and receiver first.
LISTED = [Column("repo"), Column("method", 5), Column("sender", 7), Column("receiver", 6), Column("latest", 1),
          Column("recovered", 2, justify="right"), Column("KL", 3, justify="right"), Column("hub", 8),
          Column("measured on", 4, wrap=True)]


def listed_row(e: AdapterEntry) -> list[str]:
    """One row of :data:`LISTED` for ``e``."""
    from heterofold_hub.hub.registry_schema import REFERENCE_SPLIT

    latest = newest_release_of(e) or e.versions[-1]  # what a user resolves (if only pre-releases: the newest)
    measured = latest.fidelity(REFERENCE_SPLIT) or latest.published()
    figures = measured.figures
    return [e.repo_id, e.method, e.sender.id, e.receiver.id, version_label(latest.version),
            f"{figures['recovered']:.3f}", f"{figures.get('kl', float('nan')):.4f}", e.hub, measured.describe()]


def print_entries(entries: list[AdapterEntry], title: str, console: Console, *, as_json: bool) -> None:
    """Entries as JSON (``--json``: the registry's own records), else as a table (:func:`print_table`: piped, a
    header row and one tab-separated line each)."""
    import json

    if as_json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print_table(console, LISTED, [listed_row(e) for e in entries], title=title if console.is_terminal else "")


def run_list(*, sender: str | None, receiver: str | None, family: str | None, method: str | None,
             registry_path: Path | None, console: Console, as_json: bool = False) -> list[AdapterEntry]:
    registry = open_registry(registry_path, must_exist=True)
    if not registry.path.exists():  # only the default may be missing: say so, an empty list would look like no adapters
        conventions.warn(f"No registry file at {registry.path} (the default; none was installed): nothing to list. "
                         "Pass --registry PATH or set HF_FOLD_REGISTRY to a registry.json.")
    entries = [e for e in registry.pairs_for(receiver_id=receiver, sender_id=sender)
               if (method is None or e.method == method)
               and (family is None or family in (e.sender.spec["model_type"], e.receiver.spec["model_type"]))]
    print_entries(entries, f"{len(entries)} adapter(s) in {registry.path}", console, as_json=as_json)
    return entries


def run_search(text: str, *, registry_path: Path | None, console: Console, as_json: bool = False) -> list[AdapterEntry]:
    registry = open_registry(registry_path, must_exist=True)
    needle = text.lower()
    entries = [e for e in registry.entries() if needle in " ".join(
        (e.repo_id, e.method, e.sender.id, e.receiver.id, e.summary, e.sender.spec["model_type"],
         e.receiver.spec["model_type"])).lower()]
    print_entries(entries, f"{len(entries)} adapter(s) matching {text!r}", console, as_json=as_json)
    return entries


VERSIONS = [Column("version"), Column("commit", 6), Column("recovered", 1, justify="right"),
            Column("KL", 2, justify="right"), Column("top-1", 4, justify="right"), Column("NLL", 5, justify="right"),
            Column("measured on", 3, wrap=True), Column("files", 7, wrap=True)]
EVALUATIONS = [Column("version"), Column("task", 1), Column("data", 2, wrap=True), Column("date", 5),
               Column("results", 3, wrap=True), Column("recommended", 4, wrap=True)]


def version_label(version: str) -> str:
    """A version as listed: a pre-release says that it resolves only when pinned."""
    return f"{version} (pre-release: pin it)" if is_prerelease(version) else version


def version_row(v: VersionEntry) -> list[str]:
    published = v.published()  # what the card says too: one record of where the figures were measured
    m = published.figures
    return [version_label(v.version), v.commit[:12], f"{m['recovered']:.3f}", f"{m.get('kl', float('nan')):.4f}",
            f"{m.get('top1', float('nan')):.3f}", f"{m.get('nll', float('nan')):.3f}", published.describe(),
            ", ".join(sorted(v.files))]


def evaluation_row(version: str, e) -> list[str]:
    results = ", ".join(f"{k} {v:.3g}" for k, v in e.results.items())
    recommended = "none" if e.recommended is None else (
        f"recompute {e.recommended['recompute']:g} by {e.recommended['select']}"
        + (" (reads the prompt)" if _reads_prompt(e.recommended["select"]) else "")
        + (f" + first {e.recommended['repair_layers']} layers" if e.recommended["repair_layers"] else "")
        + (f", keys left mapped x{scale:g}" if (scale := e.recommended.get("mapped_key_scale", 1)) != 1 else ""))
    data = e.data + (f", {e.windows} x {e.context_tokens} tokens" if e.windows and e.context_tokens else "")
    return [version, e.task, data, e.date, results, recommended]


def run_show(ref: str, *, registry_path: Path | None, hub_dir: Path | None, token: str | None, card: bool,
             console: Console, as_json: bool = False) -> AdapterEntry:
    """One entry: its pair, versions and later evaluations as tables (:func:`print_table`), then its model card
    (piped: the card's Markdown as written, and the whole tokenizer fingerprints)."""
    registry = open_registry(registry_path, must_exist=True)
    repo_id, version = split_ref(ref)
    entry = find_entry(registry, repo_id)
    versions = pick_versions(entry, version)
    if as_json:  # the registry record, with only the versions asked for
        import json

        print(json.dumps({**entry.to_dict(), "versions": [v.to_dict() for v in versions]}, indent=2))
        return entry
    piped = not console.is_terminal
    say = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=piped)  # noqa: E731
    say(f"{entry.repo_id} ({clip(entry.method)}, hub: {entry.hub})\n{clip(entry.summary)}")
    for role, end in (("sender", entry.sender), ("receiver", entry.receiver)):
        tokenizer = end.tokenizer if piped else end.tokenizer[:23] + "..."
        say(f"{role}: {end.id} (revision {clip(end.revision or 'not recorded')}, tokenizer {tokenizer}, "
            f"{clip(end.spec['model_type'])}, {end.spec['num_layers']} layers x {end.spec['kv_heads']} kv heads x "
            f"{end.spec['head_dim']})")
    print_table(console, VERSIONS, [version_row(v) for v in versions], title="versions, as published")
    evaluations = [(v.version, e) for v in versions for e in v.evaluations]
    if evaluations:  # measured after publishing; the version's files and metrics above are as published
        print_table(console, EVALUATIONS, [evaluation_row(version, e) for version, e in evaluations],
                    title="evaluations added after publishing")
    if card:  # the pinned version's model card, else the one a user resolves (downloaded and hash-checked like a pull)
        from heterofold_hub.hub.fetching import fetch

        shown = (newest_release_of(entry) if version is None else None) or versions[-1]
        folder = fetch(registry, entry, shown, hub_dir=hub_dir, token=token)
        text = (folder / "README.md").read_text(encoding="utf-8").split("\n---\n", 1)[-1]
        if piped:
            say(text.rstrip("\n"))
        else:
            from rich.markdown import Markdown

            console.print(Markdown(text))
    return entry


def _reads_prompt(select: str) -> bool:
    """Whether a recommended ``select`` reads the receiver's prompt (torch-free)."""
    from heterofold_hub.transfer.selects import needs_query

    return needs_query(select)


PATHS = [Column("pivot"), Column("sender -> pivot", 1, wrap=True), Column("pivot -> receiver", 1, wrap=True),
         Column("estimate", 2, justify="right")]


def run_show_pair(sender: str, receiver: str, *, pivot: str | None, registry_path: Path | None, console: Console,
                  as_json: bool = False) -> dict:
    """What resolves for a pair, by model id: its direct adapters, and with ``pivot`` ("auto" or an id) the
    registered paths through a pivot, best estimate first (the product of the legs' recorded recovered)."""
    from heterofold_hub.hub.registry import PairEnd

    registry = open_registry(registry_path, must_exist=True)
    direct = [e for e in registry.entries() if (e.sender.id, e.receiver.id) == (sender, receiver)]
    paths = []
    if pivot is not None:  # which methods compose is known to their classes, so only a pivot loads the model stack
        from heterofold_hub.methods.affine import affine_methods

        paths = registry.paths(PairEnd(sender), PairEnd(receiver), pivot=None if pivot == "auto" else pivot,
                               methods=affine_methods())
    from heterofold_hub.hub.registry import recovered_on
    from heterofold_hub.hub.registry_schema import REFERENCE_SPLIT

    legs = lambda e, v: {"repo_id": e.repo_id, "version": v.version, "method": e.method,
                         "recovered": recovered_on(v, REFERENCE_SPLIT)}
    found = {"sender": sender, "receiver": receiver, "direct": [e.repo_id for e in direct], "data": REFERENCE_SPLIT,
             "paths": [{"pivot": p.pivot, "first": legs(p.first, p.first_version),
                        "second": legs(p.second, p.second_version), "estimate": p.estimate} for p in paths]}
    if as_json:
        import json

        print(json.dumps(found, indent=2))
        return found
    console.print(f"[bold]{escape(sender)} -> {escape(receiver)}[/]", highlight=False)
    console.print("direct: " + (", ".join(found["direct"]) or "none registered"), markup=False, highlight=False)
    if pivot is not None:
        figure = lambda x: "not measured" if x is None else f"{x:.3f}"  # noqa: E731
        rows = [[p["pivot"], *(f"{leg['repo_id']} {leg['version']} ({figure(leg['recovered'])})"
                               for leg in (p["first"], p["second"])), figure(p["estimate"])] for p in found["paths"]]
        print_table(console, PATHS, rows, title=f"paths through {'any pivot' if pivot == 'auto' else pivot} (best first)",
                    caption="least-squares (kv-ridge) first legs first, then by estimate: the product of the two legs' "
                            f"recovered on {REFERENCE_SPLIT}, a ranking prior, not a measurement")
    taken = ("the direct adapter" if direct else f"the path via {paths[0].pivot}" if paths else None)
    if taken:
        console.print(f"from_pretrained resolves {taken}", highlight=False)
    else:
        hint = "no registered path either" if pivot else "try --pivot auto for paths through a pivot model"
        console.print(f"nothing resolves directly ({hint}): hf-fold train --sender {sender} --receiver {receiver}",
                      highlight=False)
    return found
