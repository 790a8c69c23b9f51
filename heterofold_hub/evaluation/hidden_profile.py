"""Hidden profile: an agent task whose answer needs a fact only the other agent holds (HiddenBench's shape, on facts).

The sender agent reads a document (facts + filler, the formats of :mod:`heterofold_hub.evaluation.handoff`). The
receiver agent has its own system prompt holding its notes (other facts), already cached, as a serving engine's
prefix cache would hold them. In its chat template, the receiver gets the document as a user turn and a question in
the same turn, and answers in its own turn (opened with the answer's first words, so a small model answers in a
fixed form). Even episodes ask about a fact of the sender's document, odd ones about one of the receiver's notes.

The conditions, each continuing the same cached prefix through ``HeteroFoldModel.append`` and ``generate``:

- ``no communication``: the question alone (the receiver answers from its notes);
- ``text``: the document handed over as text, prefilled by the receiver inside its template (text communication
  with prefix caching);
- ``kv pure``: the sender's cache of the document mapped (the pure transfer);
- ``kv recommended``: mapped, then the registry's recommended recompute, reading the question.

Per episode: exact match, the receiver's time to first token (from the message's arrival: hand-off or prefill,
the question and the first token) and the whole exchange (the sender's prefill of its document, which every
communicating condition pays, then the receiver's first token and the rest of its answer).
"""

from __future__ import annotations

import random
import re
import statistics
import time
from dataclasses import dataclass

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.handoff import PROSE_FACT, HandoffPrompt, mcnemar, wilson
from heterofold_hub.evaluation.retrieval import exact_match
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.segments import Mapped, Native
from heterofold_hub.transfer.templates import chat_segments
from heterofold_hub.zoo.retrieval import ADJECTIVES, NOUNS, fact_line

CONDITIONS = ("no communication", "text", "kv pure", "kv recommended")
SYSTEM = "You are one agent of a team. Answer with the exact value. Your own notes:\n{notes}"
QUESTIONS = {"code": ("What is the code of {name}?", "The code of {name} is "),
             "prose": ("What is the access code of {name}?", "The access code of {name} is ")}
NAME_RE = re.compile(r"of ([a-z]+-[a-z]+)")


@dataclass(frozen=True)
class Episode:
    """One exchange: ``document`` (the sender's), ``notes`` (the receiver's own facts), the ``question`` the
    receiver is asked and the ``answer_prefix`` its turn opens with; ``side``: whose fact is asked."""

    document: str
    notes: str
    question: str
    answer_prefix: str
    answer: str
    side: str  # "sender" or "receiver"
    format: str
    tokens: int  # receiver tokens of the document


def make_episode(rng: random.Random, prompt: HandoffPrompt, index: int, *, notes: int = 3) -> Episode:
    """An episode around a hand-off document: ``notes`` facts of names and values the document does not hold, in
    the document's format; the sender's asked fact on even ``index``, one of the notes on odd."""
    document = prompt.context.lstrip()  # templates trim a turn's leading whitespace; the sender reads what is sent
    names, values = [], []
    while len(names) < notes:
        name, value = f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}", str(rng.randint(10000, 99999))
        if name not in document and value not in document and name not in names and value not in values:
            names.append(name)
            values.append(value)
    write = fact_line if prompt.format == "code" else (lambda n, v: PROSE_FACT.format(name=n, value=v))
    held = "".join(write(n, v) for n, v in zip(names, values))
    if index % 2 == 0:
        side, name, answer = "sender", NAME_RE.search(prompt.question).group(1), prompt.answer
    else:
        side, pick = "receiver", rng.randrange(notes)
        name, answer = names[pick], values[pick]
    question, prefix = (q.format(name=name) for q in QUESTIONS[prompt.format])
    return Episode(document, held, question, prefix, answer, side, prompt.format, prompt.tokens)


def episode_segments(model, episode: Episode, chat_template: str | None) -> dict[str, list]:
    """The receiver's cached ``prefix`` (its system prompt and notes, up to the document) and, per condition, the
    segments appended to it; the answer prefix closes each."""
    system = SYSTEM.format(notes=episode.notes)
    after = "\n\n" + episode.question
    pieces = chat_segments(model.receiver, episode.document, system=system, chat_template=chat_template, after=after)
    kinds = [kind for kind, _ in pieces]
    if kinds != ["native", "content", "native"]:
        raise HeteroFoldError(f"The receiver's template split the turn into {kinds}; expected native, content, native.")
    head, tail = pieces[0][1], pieces[2][1] + episode.answer_prefix
    alone = chat_segments(model.receiver, episode.question, system=system, chat_template=chat_template)
    alone_text = "".join(text for _, text in alone) + episode.answer_prefix
    if not alone_text.startswith(head):
        raise HeteroFoldError("internal: the question-only turn does not share the document turn's cached prefix")
    return {"prefix": [Native(head, special_tokens=False)],
            "no communication": [Native(alone_text[len(head):])],
            "text": [Native(episode.document + tail)],
            "kv": [Native(tail)]}


@torch.no_grad()
def run_episode(model, episode: Episode, recommended: TransferConfig, *, chat_template: str | None, budget: int,
                extra: dict[str, TransferConfig] | None = None) -> dict[str, dict]:
    """Every condition of one episode: ``{condition: {"hit", "decoded", "ttft_s", "exchange_s"}}``; ``extra``: more
    kv conditions by name, each its setting, read with the question as ``kv recommended`` is."""
    parts = episode_segments(model, episode, chat_template)
    prefix = model.compose(parts["prefix"])  # cached before the exchange; no condition pays it
    began = time.perf_counter()
    prefill = model.prefill_sender(episode.document)  # the sender reads its document
    sender_s = time.perf_counter() - began
    calls = {
        "no communication": lambda: model.append(prefix, *parts["no communication"]),
        "text": lambda: model.append(prefix, *parts["text"]),
        "kv pure": lambda: model.append(prefix, Mapped(prefill, config=TransferConfig()), *parts["kv"]),
    }
    for name, config in {"kv recommended": recommended, **(extra or {})}.items():
        calls[name] = lambda config=config: model.append(prefix, Mapped(prefill, config=config), *parts["kv"],
                                                         query=episode.question)
    greedy = dict(do_sample=False, pad_token_id=model.receiver.tokenizer.pad_token_id or 0)
    out = {}
    for name, call in calls.items():
        began = time.perf_counter()
        result = call()
        model.generate(result, max_new_tokens=1, **greedy)
        ttft = time.perf_counter() - began
        began = time.perf_counter()
        new = model.generate(result, max_new_tokens=budget, **greedy)
        decode = time.perf_counter() - began
        decoded = model.receiver.tokenizer.decode(new[0], skip_special_tokens=True)
        out[name] = {"hit": int(exact_match(decoded, episode.answer)), "decoded": decoded, "ttft_s": ttft,
                     "exchange_s": (0.0 if name == "no communication" else sender_s) + ttft + decode}
    return out


def paired_ratio(hits: list[int], reference: list[int], *, resamples: int = 2000, seed: int = 0) -> dict:
    """``sum(hits) / sum(reference)`` over the same episodes, with a 95% paired bootstrap interval."""
    n = len(hits)
    if n != len(reference) or n == 0:
        raise HeteroFoldError(f"paired_ratio needs two hit lists of one non-zero length; got {n} and {len(reference)}")
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        rows = [rng.randrange(n) for _ in range(n)]
        ref = sum(reference[r] for r in rows)
        if ref:
            ratios.append(sum(hits[r] for r in rows) / ref)
    ratios.sort()
    point = sum(hits) / sum(reference) if sum(reference) else None
    if not ratios:
        return {"ratio": point, "interval": None}
    return {"ratio": point, "interval": (ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1])}


def summarise_runs(sides: list[str], runs: list[dict[str, dict]]) -> dict:
    """Per condition: exact match with its Wilson interval (all, and per side), McNemar's p and the paired ratio
    against text communication, and the median time to first token and whole exchange. ``sides[i]``: whose fact
    episode ``i`` asked about; ``runs[i]``: its :func:`run_episode`."""
    text_hits = [run["text"]["hit"] for run in runs]
    text_ttft = [run["text"]["ttft_s"] for run in runs]
    out = {}
    for name in runs[0]:
        hits = [run[name]["hit"] for run in runs]
        ttft = [run[name]["ttft_s"] for run in runs]
        row = {"n": len(hits), "correct": sum(hits), "exact_match": sum(hits) / len(hits),
               "interval": wilson(sum(hits), len(hits)), "hits": hits,
               "by_side": {side: {"n": len(h), "exact_match": sum(h) / len(h), "interval": wilson(sum(h), len(h))}
                           for side in ("sender", "receiver")
                           for h in [[run[name]["hit"] for run, s in zip(runs, sides) if s == side]] if h},
               "vs_text": {"mcnemar_p": mcnemar(text_hits, hits), **paired_ratio(hits, text_hits)},
               "ttft_s": statistics.median(ttft),
               "ttft_speedup_vs_text": statistics.median(t / s for t, s in zip(text_ttft, ttft)),
               "exchange_s": statistics.median(run[name]["exchange_s"] for run in runs),
               "examples": [run[name]["decoded"] for run in runs[:3]]}
        out[name] = row
    return out


def evaluate_hidden_profile(model, prompts: list[HandoffPrompt], recommended: TransferConfig, *,
                            chat_template: str | None, extra: dict[str, TransferConfig] | None = None, seed: int = 0,
                            log=None) -> dict:
    """The episodes built on ``prompts`` (one each), every condition run on each; returns :func:`summarise_runs`'s
    table, the episodes' sides and each episode's runs; ``extra``: more kv conditions (:func:`run_episode`). ``log``: called with a progress line every 8 episodes."""
    if not prompts:
        raise HeteroFoldError("No documents to build episodes on.")
    rng = random.Random(f"{seed}:hidden-profile")
    episodes = [make_episode(rng, p, i) for i, p in enumerate(prompts)]
    tok = model.receiver.tokenizer
    budget = 1 + max(len(tok(e.answer, add_special_tokens=False)["input_ids"]) for e in episodes)
    runs = []
    for i, episode in enumerate(episodes):
        runs.append(run_episode(model, episode, recommended, chat_template=chat_template, budget=budget, extra=extra))
        if log is not None and ((i + 1) % 8 == 0 or i + 1 == len(episodes)):
            done = {c: sum(r[c]["hit"] for r in runs) for c in runs[0]}
            log(f"{i + 1}/{len(episodes)} episodes; correct so far " + ", ".join(f"{c} {k}" for c, k in done.items()))
    sides = [e.side for e in episodes]
    return {"episodes": len(episodes), "sides": sides, "conditions": summarise_runs(sides, runs), "runs": runs}
