"""The calibration target kept small: the receiver's native next-token distribution as its ``k`` most likely tokens
plus one bucket for the rest of the vocabulary.

The full target needs the receiver's prefill of the whole window at every step, about half a step's time on the
real pair, so a run of fixed minutes sees each window about once. The kept form is computed on a window's first
visit and reused on every later one, so longer runs revisit their data at the student's cost alone. The loss is the
KL between the two distributions coarsened to those ``k + 1`` outcomes: at most the full KL, equal to it once the
``k`` tokens hold all of the teacher's mass (``k`` at least the vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TopKTeacher:
    """``log_probs`` ``[B, M, k]``: the teacher's log-probabilities of its ``k`` most likely next tokens (normalised
    over the whole vocabulary); ``ids`` ``[B, M, k]``: those tokens."""

    log_probs: torch.Tensor
    ids: torch.Tensor

    @classmethod
    def from_logits(cls, logits: torch.Tensor, k: int) -> "TopKTeacher":
        """From full logits ``[B, M, V]``; ``k`` above ``V`` keeps the whole vocabulary."""
        log_probs, ids = logits.float().log_softmax(-1).topk(min(k, logits.shape[-1]), dim=-1)
        return cls(log_probs, ids)


def log_rest(log_top: torch.Tensor) -> torch.Tensor:
    """``[B, M]``: log of the mass outside the kept tokens, from their log-probabilities ``[B, M, k]``; floored at
    the smallest normal float so an empty rest stays finite (its weight in the KL is then 0)."""
    kept = log_top.logsumexp(-1)
    return torch.clamp(-torch.expm1(kept), min=torch.finfo(torch.float32).tiny).log()


def kl_top_k(student: torch.Tensor, teacher: TopKTeacher, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over tokens of KL(teacher || student) over the teacher's kept tokens and one bucket for the rest;
    ``student`` logits ``[B, M, V]``, optional token ``weights`` ``[B, M]`` (a weighted mean)."""
    s_top = student.float().log_softmax(-1).gather(-1, teacher.ids)
    t_top = teacher.log_probs
    t_rest, s_rest = log_rest(t_top), log_rest(s_top)
    per_token = (t_top.exp() * (t_top - s_top)).sum(-1) + t_rest.exp() * (t_rest - s_rest)
    return token_mean(per_token, weights)


def token_mean(per_token: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The mean of a per-token loss ``[B, M]``, weighted by ``weights`` ``[B, M]`` when given."""
    if weights is None:
        return per_token.mean()
    weights = weights.to(per_token)
    return (per_token * weights).sum() / weights.sum()
