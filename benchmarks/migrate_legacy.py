"""Ran once (issue 26): the committed results behind README.md and docs/results.md, from their history-named files
(``benchmarks/results/{real,tiny,handoff}/...``, read at commit ``BASE`` from git, so this stays runnable after they
were removed) into ``benchmarks/results/NAME.json`` by experiment. Figures are copied, never recomputed. A stage
whose one source recorded its provenance keeps it (``recorded: true``, in the harness's field names); otherwise the
block's fields are null with ``recorded: false``. Either way ``migrated_from`` names each source file, the commit
that last wrote it (``git log --format=%H -1 -- FILE``) and its provenance exactly as recorded (or null).

    python -m benchmarks.migrate_legacy          # writes the files, then checks every figure against its source
"""

from __future__ import annotations

import json
import subprocess

from benchmarks.config import STAGES
from benchmarks.record import RESULTS
from heterofold_hub.evaluation.reports import merge_results
from heterofold_hub.io import write_json_atomic

BASE = "a7f23cf"  # the last commit with the history-named files
OLD = "benchmarks/results/"

# experiment -> stage -> sources. train: {package name: (held-out table, folder it was trained into)};
# score: {context: [files scored on the same windows, merged into one table]}; other stages: one file.
MIGRATIONS = {
    "real-s2g": {
        "train": {"heterofold": ("real/fidelity-s2g-512-wide5.json", "runs/real/s2g-wide5"),
                  "kv-ridge": ("real/fidelity-s2g-512-kv-ridge-wide5.json", "runs/real/s2g-kv-ridge-wide5")},
        "score": {"2048": ["real/fidelity-s2g-2048-wide5.json", "real/fidelity-s2g-2048-kv-ridge-wide5.json"]},
        "retrieval": "real/retrieval-s2g-wide5.json"},
    "real-g2s": {
        "train": {"heterofold": ("real/fidelity-g2s-512-wide.json", "runs/real/g2s-wide"),
                  "kv-ridge": ("real/fidelity-g2s-512-kv-ridge-wide.json", "runs/real/g2s-kv-ridge-wide")},
        "score": {"2048": ["real/fidelity-g2s-2048-wide.json"]}},
    "real-g2s-natural": {
        "train": {"heterofold": ("real/fidelity-g2s-512.json", "runs/real/g2s"),
                  "kv-ridge": ("real/fidelity-g2s-512-kv-ridge.json", "runs/real/g2s-kv-ridge"),
                  "dense-latent": ("real/fidelity-g2s-512-dense-latent.json", "runs/real/g2s-dense-latent")},
        "score": {"2048": ["real/fidelity-g2s-2048.json"]}},
    "real-g2s-prose": {"score": {"512": ["real/fidelity-g2s-512-prose.json"]}},
    "real-s2g-handoff": {"handoff": "handoff/s2g-512.json"},
    "real-s2g-handoff-speed": {"handoff-speed": "handoff/speed-s2g.json"},
    "real-bench": {"bench": "real/bench-real.json"},
    "real-bench-long-s2g": {"bench": "real/bench-s2g.json"},
    "real-bench-long-g2s": {"bench": "real/bench-g2s.json"},
    "tiny-l2q": {"score": {"512": ["tiny/fidelity-l2q-unseen.json"]}, "retrieval": "tiny/retrieval.json"},
    "tiny-q2l": {"score": {"512": ["tiny/fidelity-q2l-unseen.json"]}},
    "tiny-bench": {"bench": "bench.json"},
}
PLOTS = {"real/retrieval-s2g-wide5.png": "real-s2g-retrieval.png", "real/bench-real.png": "real-bench-bench.png",
         "real/bench-s2g.png": "real-bench-long-s2g-bench.png", "real/bench-g2s.png": "real-bench-long-g2s-bench.png",
         "tiny/retrieval.png": "tiny-l2q-retrieval.png", "bench.png": "tiny-bench-bench.png"}
UNRECORDED = {"date": None, "command": None, "git": {"commit": None, "dirty": None}, "versions": None, "threads": None,
              "adapters": None, "models": None}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def source(name: str) -> dict:
    return json.loads(git("show", f"{BASE}:{OLD}{name}"))


def recorded_provenance(old: dict):
    """What the file recorded: its own block, or bench's one per direction (a list), or None."""
    if "provenance" in old:
        return old["provenance"]
    found = [d["provenance"] for d in old.get("directions", []) if "provenance" in d]
    return found or None


def normalized(made) -> dict:
    """A recorded block in the harness's field names (handoff scripts used commit/dirty/library/adapter)."""
    if isinstance(made, list):  # bench both ways: one block per direction, the same command
        first = normalized(made[0])
        first["adapters"] = {f"{m['adapters'].get('heterofold', {}).get('sender')} -> "
                             f"{m['adapters'].get('heterofold', {}).get('receiver')}": m["adapters"] for m in made}
        return first
    if "git" in made:
        return {k: made.get(k) for k in ("date", "command", "git", "versions", "threads", "adapters")} | {"models": None}
    return {"date": made["date"], "command": made["command"], "git": {"commit": made["commit"], "dirty": made["dirty"]},
            "versions": made["library"], "threads": made["threads"], "adapters": {"heterofold": {"source": made["adapter"]}},
            "models": None}


def block(files: list[str]) -> dict:
    recorded = {f: recorded_provenance(source(f)) for f in files}
    origin = {OLD + f: {"committed_in": git("log", "--format=%H", "-1", BASE, "--", OLD + f).strip(),
                        "provenance": recorded[f]} for f in files}
    if len(files) == 1 and recorded[files[0]] is not None:
        return {"recorded": True, **normalized(recorded[files[0]]), "migrated_from": origin}
    return {"recorded": False, **UNRECORDED, "migrated_from": origin}


def without_provenance(old: dict) -> dict:
    old = {k: v for k, v in old.items() if k != "provenance"}
    if "directions" in old:
        old["directions"] = [{k: v for k, v in d.items() if k != "provenance"} for d in old["directions"]]
    return old


def stage(name: str, spec) -> tuple[dict, dict]:
    if name == "train":
        files = [held_out for held_out, _ in spec.values()]
        result = {pkg: {"package": folder, "weights_sha256": None, "heldout": source(held_out)}
                  for pkg, (held_out, folder) in spec.items()}
        return block(files), result
    if name == "score":
        files = [f for group in spec.values() for f in group]
        result = {}
        for context, group in spec.items():
            tables = [without_provenance(source(f)) for f in group]
            merged = merge_results(tables)
            merged["adapters"] = {k: v for t in tables for k, v in t.get("adapters", {}).items()}
            result[context] = merged
        return block(files), result
    old = without_provenance(source(spec))
    if name == "bench" and "directions" not in old:
        old = {"directions": [old]}  # one direction: the harness writes every bench as a list of directions
    return block([spec]), old


def check(experiment: str, stages: dict, written: dict) -> None:
    """Every source figure is in the new file unchanged."""
    for name, spec in stages.items():
        new = written["stages"][name]["result"]
        if name == "train":
            assert all(new[p]["heldout"] == source(f) for p, (f, _) in spec.items()), (experiment, name)
        elif name == "score":
            for context, group in spec.items():
                for f in group:
                    for method, row in source(f)["methods"].items():
                        if method not in ("native", "no-context") or f == group[0]:
                            assert new[context]["methods"][method] == row, (experiment, f, method)
        else:
            old = without_provenance(source(spec))
            assert (new if "directions" in old or name != "bench" else new["directions"][0]) == old, (experiment, name)


def main() -> None:
    for experiment, stages in MIGRATIONS.items():
        data = {"experiment": experiment, "stages": {}}
        for name in STAGES:
            if name in stages:
                provenance, result = stage(name, stages[name])
                data["stages"][name] = {"provenance": provenance, "result": result}
        write_json_atomic(RESULTS / f"{experiment}.json", data)
        check(experiment, stages, json.loads((RESULTS / f"{experiment}.json").read_text()))
        print(f"{experiment}: {', '.join(data['stages'])} (figures checked against {BASE})")


if __name__ == "__main__":
    main()
