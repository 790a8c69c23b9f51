"""Property-based tests of the registry parser, on real files: any bytes, and mutations of the fixture registry
(byte flips, deleted spans, values swapped for other types, keys dropped or given twice, entries copied under
another case), either load into a registry that saves and loads back equal, or are refused with RegistryError
naming the file; never any other exception.

Each test counts its outcomes by ``RegistryError.reason`` and checks that the refusals it meant to provoke were
provoked, so a strategy that stopped reaching the parser would fail rather than pass on nothing. The example
budget is fixed and derandomized so CI is fast and repeatable.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heterofold_hub.hub.registry import Registry, RegistryError

FIXTURE = Path(__file__).parent / "data" / "registry" / "registry.json"
VALID = FIXTURE.read_bytes()
DATA = json.loads(VALID)
FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def load_or_refuse(folder: Path, raw: bytes) -> str:
    """"loaded" (after checking the round trip) or the refusal's reason; any other exception fails the test."""
    path = folder / "registry.json"
    path.write_bytes(raw)
    try:
        registry = Registry.load(path)
    except RegistryError as err:
        assert str(err).startswith(f"{path}: "), err  # every refusal names the file
        return err.reason
    saved = registry.save(folder / "saved.json")
    json.loads(saved.read_text(encoding="utf-8"), parse_constant=_not_json)  # standard JSON that any reader takes
    again = Registry.load(saved)
    assert again.to_dict() == registry.to_dict()
    assert again.save(folder / "again.json").read_bytes() == saved.read_bytes()  # saving is deterministic
    return "loaded"


def _not_json(literal: str):
    raise AssertionError(f"a loaded registry saved {literal}, which is not JSON")


def run(strategy, folder: Path) -> Counter:
    """Outcomes of ``strategy``'s examples, by reason."""
    outcomes = Counter()

    @FUZZ
    @given(raw=strategy)
    def check(raw):
        outcomes[load_or_refuse(folder, raw)] += 1

    check()
    return outcomes


# --- mutations of the valid fixture -----------------------------------------------------------------------------

def _paths(node, prefix=()):
    """Every key path in ``node``: where a value can be swapped or a key dropped."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield prefix + (key,)
        yield from _paths(child, prefix + (key,))


PATHS = list(_paths(DATA))
KEY_PATHS = [p for p in PATHS if isinstance(p[-1], str)]
METRIC_PATHS = [p for p in PATHS if p[-2:-1] == ("metrics",)]  # where a NaN would otherwise slip into find()
# json.dumps writes NaN and Infinity literals, as a careless writer would.
OTHER_TYPES = [None, True, 0, 1, 1.0, -2.5, "1", "", "v1.0.0", "HeteroFold/X", [], {}, ["a"], {"a": 1},
               float("nan"), float("inf"), 1e400]
# A line holding one scalar member ("key": value) of the indent=2 fixture: doubling it gives a duplicate key.
MEMBER_LINES = [m.span() for m in re.finditer(rb'^ *"[^"\n]+": [^\[{\n]+$', VALID, flags=re.M)]


def _at(data, path):
    for key in path[:-1]:
        data = data[key]
    return data


def _swap(path, value) -> bytes:
    data = copy.deepcopy(DATA)
    _at(data, path)[path[-1]] = value
    return json.dumps(data, indent=2).encode()


def _drop(path) -> bytes:
    data = copy.deepcopy(DATA)
    del _at(data, path)[path[-1]]
    return json.dumps(data, indent=2).encode()


def _flip(raw: bytes, flips) -> bytes:
    raw = bytearray(raw)
    for at, byte in flips:
        raw[at % len(raw)] = byte
    return bytes(raw)


def _delete(start: int, length: int) -> bytes:
    start %= len(VALID)
    return VALID[:start] + VALID[start + length:]


def _double_member(span) -> bytes:
    start, end = span
    line = VALID[start:end]
    return VALID[:start] + line.rstrip(b",") + b",\n" + line + VALID[end:]


def _copy_entry(index: int, rename) -> bytes:
    data = copy.deepcopy(DATA)
    entry = copy.deepcopy(data["adapters"][index])
    entry["repo_id"] = rename(entry["repo_id"])
    data["adapters"].append(entry)
    return json.dumps(data, indent=2).encode()


RENAMES = [str.upper, str.swapcase, lambda r: r, lambda r: r + "-copy"]  # case twins, an exact twin, a new repo
MUTANTS = st.one_of(
    st.builds(_flip, st.just(VALID), st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)),
                                              min_size=1, max_size=3)),
    st.builds(_delete, st.integers(0, len(VALID) - 1), st.integers(1, 64)),
    st.builds(_swap, st.sampled_from(PATHS), st.sampled_from(OTHER_TYPES)),
    st.builds(_swap, st.just(("schema_version",)), st.sampled_from(OTHER_TYPES)),
    st.builds(_swap, st.sampled_from(METRIC_PATHS), st.sampled_from(OTHER_TYPES)),
    st.builds(_drop, st.sampled_from(KEY_PATHS)),
    st.builds(_double_member, st.sampled_from(MEMBER_LINES)),
    st.builds(_copy_entry, st.integers(0, len(DATA["adapters"]) - 1), st.sampled_from(RENAMES)),
)


def test_the_fixture_loads_and_round_trips(tmp_path):
    assert load_or_refuse(tmp_path, VALID) == "loaded"
    assert len(MEMBER_LINES) > 50 and len(PATHS) > 100 and METRIC_PATHS  # the strategies have something to work on


def test_mutated_registries_load_and_round_trip_or_are_refused(tmp_path):
    outcomes = run(MUTANTS, tmp_path)
    provoked = {"loaded", "not-utf8", "invalid-json", "type", "non-finite", "duplicate-key", "duplicate-repo",
                "schema-version", "missing-key", "format"}
    assert provoked <= set(outcomes), outcomes


def test_any_bytes_load_or_are_refused(tmp_path):
    keys = st.sampled_from(["schema_version", "adapters", "repo_id", "x"])
    values = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                          max_leaves=12)
    junk = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                     values.map(lambda value: json.dumps(value).encode()))
    outcomes = run(junk, tmp_path)
    assert {"not-utf8", "invalid-json", "type", "missing-key"} <= set(outcomes), outcomes
