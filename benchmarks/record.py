"""The results file of an experiment, ``benchmarks/results/NAME.json``::

    {"experiment": NAME, "stages": {STAGE: {"provenance": {...}, "result": {...}}}}

Each stage is one run of ``python -m benchmarks run NAME --stage STAGE`` and carries one provenance block, taken
before its models run: the library's block (date, exact command, git commit and dirty flag, library versions,
torch threads, adapters with ``repo@version`` and weights sha256) plus the models' ids and revisions. Stages are
written one at a time, atomically, under a lock, so running one stage never loses another's result.
"""

from __future__ import annotations

import json
from pathlib import Path

from heterofold_hub.io import locked, write_json_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def start_provenance(argv: list[str]) -> dict:
    """The block, first filled before anything is loaded: the commit read now is the code that runs."""
    from heterofold_hub.evaluation.provenance import provenance

    return {"recorded": True, **provenance(argv=argv), "models": {}}


def model_record(side) -> dict:
    """A model's id and revision: a GGUF's ``sha256:``, else the Hub commit it loaded at; None for a local folder,
    such as the bundled tiny models (``heterofold_hub/zoo/models/``), which the git commit identifies."""
    return {"id": side.name, "revision": side.revision}


def result_path(name: str, results: Path = RESULTS) -> Path:
    return results / f"{name}.json"


def read(name: str, results: Path = RESULTS) -> dict:
    path = result_path(name, results)
    return json.loads(path.read_text()) if path.is_file() else {"experiment": name, "stages": {}}


def write_stage(name: str, stage: str, provenance: dict, result: dict, results: Path = RESULTS) -> Path:
    path = result_path(name, results)
    with locked(path):
        data = read(name, results)
        data["stages"][stage] = {"provenance": provenance, "result": result}
        write_json_atomic(path, data)
    return path
