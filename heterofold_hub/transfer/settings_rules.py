"""The rules a recompute setting must meet, in plain Python: the one statement of them that code which must not
import torch can share with the transfer path (reading ``registry.json``, whose ``recommended`` blocks hold such
settings, is part of ``hf-fold list`` and ``show``, which start without the model stack).

``SELECT_NAMES`` are the strategies of :data:`heterofold_hub.transfer.selection.SELECTORS`, in its order;
``PROMPT_SELECTS`` those that read the receiver's prompt (``query=``). ``tests/test_registry_recommended.py``
checks both against the selectors themselves.
"""

from __future__ import annotations

SELECT_NAMES = ("tail", "chunk-start", "content", "digits", "content-tail", "deviation", "keywords", "statement",
                "statement-tail", "query", "attention", "oracle")
PROMPT_SELECTS = frozenset({"keywords", "statement", "statement-tail", "query", "attention"})
MAX_KEY_SCALE = 4.0  # mapped_key_scale lies in (0, MAX_KEY_SCALE]


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def settings_problems(*, recompute=0.0, select="content", repair_layers=0, mapped_key_scale=1.0,
                      num_layers: int | None = None) -> list[str]:
    """What is wrong with a recompute setting, one phrase per bad value (``name=value: what is expected``); empty
    when it is valid. ``num_layers``: the receiver's layer count, when known, bounds ``repair_layers``."""
    problems = []
    if not _number(recompute) or not 0 <= recompute <= 1:
        problems.append(f"recompute={recompute!r}: expected a share of the context in [0, 1] (0: pure transfer, "
                        "1: native prefill), e.g. 0.05")
    if select not in SELECT_NAMES:
        problems.append(f"select={select!r}: expected one of {', '.join(SELECT_NAMES)}")
    if isinstance(repair_layers, bool) or not isinstance(repair_layers, int) or repair_layers < 0:
        problems.append(f"repair_layers={repair_layers!r}: expected a whole number of first layers (0: none)")
    elif num_layers is not None and repair_layers > num_layers:
        problems.append(f"repair_layers={repair_layers}: expected at most the receiver's {num_layers} layers "
                        f"(0 .. {num_layers})")
    if not _number(mapped_key_scale) or not 0 < mapped_key_scale <= MAX_KEY_SCALE:
        problems.append(f"mapped_key_scale={mapped_key_scale!r}: expected a factor in (0, {MAX_KEY_SCALE:g}] for the "
                        "mapped rows' keys (1: unchanged), e.g. 0.7")
    return problems


def check_recommended(recommended: dict, *, num_layers: int | None = None) -> list[str]:
    """What is wrong with a registry ``recommended`` block (``recompute``, ``select``, ``repair_layers`` and an
    optional ``mapped_key_scale``), by :func:`settings_problems`; empty when it is valid."""
    return settings_problems(recompute=recommended.get("recompute"), select=recommended.get("select"),
                             repair_layers=recommended.get("repair_layers"),
                             mapped_key_scale=recommended.get("mapped_key_scale", 1.0), num_layers=num_layers)
