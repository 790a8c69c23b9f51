"""Batches of token rows of different lengths: padding them into one ``[B, T]`` tensor, and the positions a model
reads for a padded batch. Every padded batch and every position id of the transfer path comes from here, so the
receiver's cache, a recompute and ``generate`` number tokens alike."""

from __future__ import annotations

from collections.abc import Sequence

import torch

SIDES = ("left", "right")


def padded(rows: Sequence[Sequence[int] | torch.Tensor], pad_id: int, *, side: str,
           device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` (token ids, one sequence per row) as ids ``[B, T]`` (``T`` the longest row, long, ``pad_id`` where a
    row has no token) and mask ``[B, T]`` (long, 1 for real tokens).

    ``side="left"``: each row's tokens fill its last columns, so all rows end together (what ``generate`` and a
    receiver cache expect: the next token follows the last column). ``side="right"``: each row starts at column 0
    (a sender cache, so a token's column is its position)."""
    if side not in SIDES:
        raise ValueError(f"side={side!r}; choose one of {', '.join(SIDES)}.")
    width = max((len(row) for row in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = torch.as_tensor(row, dtype=torch.long), 1
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: each column's position among its row's real tokens (``mask`` ``[B, T]``, 1 or True for a real
    token), counted from 0 at the row's first one; columns before it read 0. For a left-padded mask these are the
    position ids ``generate`` gives, so a cache built with them continues as ``generate`` expects."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)
