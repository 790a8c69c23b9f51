"""(context, continuation) windows cut from text: what every fit and measure runs on, in receiver tokens.

A window is cut in *receiver* tokens, so every window of a run has the same receiver length and no
receiver padding is needed. The receiver reads ``[prefix] + context + continuation``; with a
transferred cache it reads ``context[-1] + continuation[:-1]`` as its query and predicts the
continuation, so native, transferred and no-context runs score the same targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heterofold_hub.base_models.loading import Side, encode
from heterofold_hub.errors import HeteroFoldError


@dataclass
class Window:
    """``context`` is the text the sender reads; receiver ids/offsets ``[Tc]``/``[Tc, 2]`` are relative to it."""

    context: str
    receiver_context: torch.Tensor
    receiver_offsets: torch.Tensor
    continuation: torch.Tensor
    source: str = ""


def make_windows(
    texts: list[str],
    receiver: Side,
    *,
    context_tokens: int,
    continuation_tokens: int,
    max_windows: int,
) -> list[Window]:
    """Up to ``max_windows`` non-overlapping windows, cut from the *end* of each text backwards (questions
    and answers sit at the end) and taken round-robin across texts so that no text dominates.

    Deterministic: same texts and sizes, same windows.
    """
    span = context_tokens + continuation_tokens
    if span + len(receiver.prefix_ids()) > receiver.spec.max_positions:
        raise HeteroFoldError(
            f"{context_tokens} context + {continuation_tokens} continuation tokens exceed the "
            f"{receiver.spec.max_positions} positions of {receiver.name!r}. Pass smaller --context-tokens."
        )
    encoded = [(i, text, *encode(receiver.tokenizer, text, add_special_tokens=False)) for i, text in enumerate(texts)]
    encoded = [e for e in encoded if len(e[2]) >= span]
    if not encoded:
        raise HeteroFoldError(
            f"No text holds {span} receiver tokens ({context_tokens} context + {continuation_tokens} "
            "continuation). Use longer texts or pass smaller --context-tokens/--continuation-tokens."
        )
    windows: list[Window] = []
    for k in range(max(len(ids) for _, _, ids, _ in encoded) // span):
        for text_index, text, ids, offsets in encoded:
            start = len(ids) - (k + 1) * span
            if start < 0:
                continue
            ctx = slice(start, start + context_tokens)
            first_char, last_char = int(offsets[ctx][0, 0]), int(offsets[ctx][-1, 1])
            windows.append(
                Window(
                    context=text[first_char:last_char],
                    receiver_context=ids[ctx],
                    receiver_offsets=offsets[ctx] - first_char,
                    continuation=ids[start + context_tokens : start + span],
                    source=f"text {text_index}, tokens {start}..{start + span}",
                )
            )
            if len(windows) == max_windows:
                return windows
    return windows
