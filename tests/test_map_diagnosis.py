"""The map-diagnosis probe's parts (benchmarks/probes/map_diagnosis.py): which rows belong to which token class, and a
hybrid cache that takes exactly the asked part from the native one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from heterofold_hub.transfer.alignment import TokenAlignment

PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "map_diagnosis.py"
spec = importlib.util.spec_from_file_location("map_diagnosis", PROBE)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_token_classes_follow_the_sender_index_over_mapped_rows_only():
    # row 0: one pad, the native prefix (position 0), then receiver tokens drawing on sender columns 1, 2, 2, 5, 6
    alignment = TokenAlignment(sender_index=torch.tensor([[0, 0, 1, 2, 2, 5, 6]]),
                               receiver_ids=torch.zeros(1, 7, dtype=torch.long),
                               attention_mask=torch.tensor([[0, 1, 1, 1, 1, 1, 1]]), native_prefix=1)
    classes = {k: v[0].tolist() for k, v in probe.token_classes(alignment).items()}
    mapped = [False, False, True, True, True, True, True]
    assert alignment.mapped_mask[0].tolist() == mapped
    assert classes["splits a sender token"] == [False, False, False, False, True, False, False]
    assert classes["spans sender tokens"] == [False, False, False, False, False, True, False]
    assert classes["one to one"] == [False, False, True, True, False, False, True]
    assert classes["first 16"] == mapped  # fewer than 16 mapped rows: all of them


def test_a_hybrid_takes_exactly_the_asked_part_from_native():
    mapped = [(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)) for _ in range(3)]
    native = [(torch.ones(1, 2, 3, 4), torch.full((1, 2, 3, 4), 2.0)) for _ in range(3)]
    one = probe.replaced(mapped, native, layers={1})
    assert [float(k.sum()) for k, _ in one] == [0, 24, 0] and [float(v.sum()) for _, v in one] == [0, 48, 0]
    keys = probe.replaced(mapped, native, part="k")
    assert all(float(k.sum()) == 24 and float(v.sum()) == 0 for k, v in keys)
    rows = probe.replaced(mapped, native, rows=torch.tensor([[False, True, False]]))
    assert all(k[0, :, 1].eq(1).all() and k[0, :, [0, 2]].eq(0).all() and v[0, :, 1].eq(2).all() for k, v in rows)
