"""Conversation: two agents of different families alternate turns over a shared document, each turn handed to the
other agent incrementally. Does the mapping error accumulate over turns?

Agent A (the first pair's sender) opens; agent B (its receiver) answers; and so on. Each agent keeps its own
caches in its own chat template: the shared document (A gets it as the user's message, B as its system prompt), its
own turns read natively, and the other agent's turns either read natively (``native``: text communication with
prefix caching, the reference) or mapped from the other agent's prefill of the turn (one cache per setting,
appended turn by turn with ``append``: earlier rows are never mapped again). The turns are consecutive passages of
one text, so each turn is evidence for the next.

After turn k reaches its listener, the listener's next turn (k + 1) is scored teacher-forced on each of its caches:
NLL and KL(native || mapped) per token, and ``recovered = (NLL_without - NLL_mapped) / (NLL_without - NLL_native)``
where ``without`` is the native cache with turn k left out, pooled over conversations with jackknife errors (as
:mod:`heterofold_hub.evaluation.fidelity`). Beside each setting runs its control, the native history with only
turn k mapped: where the setting falls below its control, earlier mapped turns cost the listener (accumulation);
where both fall together, the turn itself got harder to map (a longer history, another passage). Times per turn:
the listener's hand-off (``append`` of the mapped turn) against its prefill of the turn (``append`` of it as native
text), and the speaker's prefill of its turn alone, which a mapped turn needs today (the speaker's in-context cache
of its own turn is not a ``SenderPrefill``).
"""

from __future__ import annotations

import random
import time

import torch

from heterofold_hub.base_models.loading import encode
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.fidelity import summarise, token_measures
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.kvcache import view_of
from heterofold_hub.transfer.segments import Mapped, Native
from heterofold_hub.transfer.selects import needs_query, needs_surprisal
from heterofold_hub.transfer.templates import turn_pieces


def split_turns(tokenizer, text: str, *, document_tokens: int, turn_tokens: int, turns: int) -> tuple[str, list[str]]:
    """``text`` cut at token boundaries of ``tokenizer`` into a document and ``turns`` passages, each stripped."""
    ids, offsets = encode(tokenizer, text, add_special_tokens=False)
    cuts = [document_tokens + i * turn_tokens for i in range(turns + 1)]
    if cuts[-1] > len(ids):
        raise HeteroFoldError(f"The text has {len(ids)} tokens; this conversation needs {cuts[-1]}.")
    chars = [0] + [int(offsets[c, 0]) for c in cuts]
    parts = [text[a:b].strip() for a, b in zip(chars, chars[1:])]
    return parts[0], parts[1:]


def conversation_texts(texts: list[str], tokenizer, *, count: int, needed_tokens: int, seed: int) -> list[str]:
    """``count`` texts of at least ``needed_tokens`` tokens: consecutive source texts joined, from seeded starts."""
    rng = random.Random(f"{seed}:conversation")
    order = list(range(len(texts)))
    rng.shuffle(order)
    chosen = []
    for start in order:
        joined, i = "", start
        while len(tokenizer(joined, add_special_tokens=False)["input_ids"]) < needed_tokens + 16 and i < len(texts):
            joined, i = (joined + "\n\n" + texts[i]).strip(), i + 1
        if len(tokenizer(joined, add_special_tokens=False)["input_ids"]) >= needed_tokens + 16:
            chosen.append(joined)
        if len(chosen) == count:
            return chosen
    raise HeteroFoldError(f"Only {len(chosen)} texts of {needed_tokens} tokens could be made from the source.")


@torch.no_grad()
def continuation_logits(model, result, ids: torch.Tensor) -> torch.Tensor:
    """The receiver's logits ``[len(ids), V]`` for each of ``ids`` ``[T]`` read after ``result`` (teacher forced)."""
    start = result.input_ids.shape[1] - 1
    inputs = torch.cat([result.input_ids[0, -1:], ids[:-1]])[None]
    out = model(input_ids=inputs, position_ids=torch.arange(start, start + len(ids))[None],
                cache=view_of(result.cache), use_cache=True)
    return out.logits[0].float()


def last_only_name(setting: str) -> str:
    """The name of ``setting``'s control: every earlier turn read natively, only the last one mapped."""
    return f"{setting}, last turn only"


class Agent:
    """One agent's caches: ``native`` (everything read natively), one per setting (the other's turns mapped), and
    per setting the control of the last hand-off (``last_only``: the native history, only that turn mapped)."""

    def __init__(self, model, pieces: list[tuple[str, str]], settings: dict[str, TransferConfig]):
        self.model, self.pieces, self.settings = model, pieces, settings
        head, content = pieces[0]
        first = [Native(head + content, special_tokens=False)]
        self.native = model.compose(first)
        self.mapped = {name: self.native for name in settings}  # the shared document is read natively by both
        self.before = None  # the native cache before the last turn handed over (the "without" reference)
        # the control for accumulation: the native history with only the last turn mapped (kept for scoring only)
        self.last_only: dict = {}

    def own_turn(self, index: int) -> None:
        head, content = self.pieces[index]
        segments = [Native(head), Native(content)]
        self.native = self.model.append(self.native, *segments)
        self.mapped = {name: self.model.append(cache, *segments) for name, cache in self.mapped.items()}

    def hear(self, index: int, via, prefill) -> dict:
        """The other agent's turn ``index``: read natively, and mapped under each setting. Returns the seconds of
        each (``native_s`` and ``NAME_s``)."""
        head, content = self.pieces[index]
        self.before = self.native
        began = time.perf_counter()
        self.native = self.model.append(self.native, Native(head), Native(content))
        seconds = {"native_s": time.perf_counter() - began}
        for name, config in self.settings.items():
            began = time.perf_counter()
            self.mapped[name] = self.model.append(self.mapped[name], Native(head),
                                                  Mapped(prefill, via=via, config=config))
            seconds[f"{name}_s"] = time.perf_counter() - began
            self.last_only[last_only_name(name)] = self.model.append(self.before, Native(head),
                                                                     Mapped(prefill, via=via, config=config))
        return seconds

    def score_next(self, index: int, score_tokens: int) -> dict[str, dict[str, torch.Tensor]]:
        """Turn ``index`` (this agent's next) scored teacher-forced on each cache: ``{cache: token_measures}``."""
        tok = self.model.receiver.tokenizer
        head, content = self.pieces[index]
        head_ids = encode(tok, head, add_special_tokens=False)[0]
        content_ids = encode(tok, content, add_special_tokens=False)[0][:score_tokens]
        ids = torch.cat([head_ids, content_ids])
        model = self.model.receiver.model
        logits = {name: continuation_logits(model, cache, ids)[len(head_ids):][None]
                  for name, cache in [("native", self.native), ("without", self.before), *self.mapped.items(),
                                      *self.last_only.items()]}
        targets = content_ids[None]
        return {name: token_measures(value, logits["native"], targets) for name, value in logits.items()}


def run_conversation(a_to_b, b_to_a, text: str, settings: dict[str, TransferConfig], *, document_tokens: int,
                     turn_tokens: int, turns: int, score_tokens: int, templates: dict) -> list[dict]:
    """One conversation: per turn, who spoke, the listener's history (tokens), the seconds of each hand-off and
    the measures of the listener's next turn on each of its caches."""
    a_model, b_model = b_to_a, a_to_b  # each agent's caches are built by the model whose receiver it is
    tok_a = a_model.receiver.tokenizer
    document, passages = split_turns(tok_a, text, document_tokens=document_tokens, turn_tokens=turn_tokens,
                                     turns=turns + 1)
    roles_a = ["user"] + ["assistant" if k % 2 == 0 else "user" for k in range(turns + 1)]
    roles_b = ["system"] + ["user" if k % 2 == 0 else "assistant" for k in range(turns + 1)]
    pieces = {side: turn_pieces(model.receiver.tokenizer, [{"role": r, "content": c}
                                                            for r, c in zip(roles, [document, *passages])],
                                templates.get(side))
              for side, model, roles in (("a", a_model, roles_a), ("b", b_model, roles_b))}
    agents = {"a": Agent(a_model, pieces["a"], settings), "b": Agent(b_model, pieces["b"], settings)}
    surprisal = any(needs_surprisal(c.select) for c in settings.values())
    rows = []
    for k in range(1, turns + 1):  # turn k is message k (message 0 is the document)
        speaker, listener = ("a", "b") if k % 2 == 1 else ("b", "a")
        pair = a_to_b if speaker == "a" else b_to_a  # sender: the speaker, receiver: the listener
        began = time.perf_counter()
        prefill = pair.prefill_sender(passages[k - 1], surprisal=surprisal)
        sender_s = time.perf_counter() - began
        agents[speaker].own_turn(k)
        history = agents[listener].native.input_ids.shape[1]
        seconds = agents[listener].hear(k, pair, prefill)
        measures = agents[listener].score_next(k + 1, score_tokens)
        rows.append({"turn": k, "speaker": speaker, "listener": listener, "history_tokens": history,
                     "sender_prefill_s": sender_s, **seconds,
                     "measures": {name: {key: float(v[0]) for key, v in m.items()} for name, m in measures.items()}})
    return rows


def evaluate_conversation(a_to_b, b_to_a, texts: list[str], settings: dict[str, TransferConfig], *,
                          conversations: int, document_tokens: int, turn_tokens: int, turns: int, score_tokens: int,
                          templates: dict, seed: int = 0, log=None) -> dict:
    """Per turn, over ``conversations``: each setting's recovered, KL and top-1 (with errors), the hand-off and
    prefill seconds and the listener's history length (each the upper median over conversations)."""
    if a_to_b.sender.name != b_to_a.receiver.name or a_to_b.receiver.name != b_to_a.sender.name:
        raise HeteroFoldError(f"The two pairs must be one pair both ways; got {a_to_b.sender.name} -> "
                              f"{a_to_b.receiver.name} and {b_to_a.sender.name} -> {b_to_a.receiver.name}.")
    for name, config in settings.items():
        if needs_query(config.select):
            raise HeteroFoldError(f"setting {name!r}: select={config.select_name!r} reads the receiver's question, "
                                  "which a conversation turn does not have; choose a select that reads none.")
    needed = document_tokens + (turns + 1) * turn_tokens
    chosen = conversation_texts(texts, b_to_a.receiver.tokenizer, count=conversations, needed_tokens=needed,
                                seed=seed)
    runs = []
    for i, text in enumerate(chosen):
        runs.append(run_conversation(a_to_b, b_to_a, text, settings, document_tokens=document_tokens,
                                     turn_tokens=turn_tokens, turns=turns, score_tokens=score_tokens,
                                     templates=templates))
        if log is not None:
            last = runs[-1][-1]
            log(f"conversation {i + 1}/{len(chosen)}: turn {last['turn']} history {last['history_tokens']} tokens")
    per_turn = []
    for k in range(turns):
        rows = [run[k] for run in runs]
        measures = {name: {key: torch.tensor([r["measures"][name][key] for r in rows]) for key in ("nll", "kl", "top1")}
                    for name in rows[0]["measures"]}
        measures["no-context"] = measures.pop("without")
        summary = summarise(measures)
        timing = {key: sorted(r[key] for r in rows)[len(rows) // 2]
                  for key in rows[0] if key.endswith("_s")}
        per_turn.append({"turn": k + 1, "listener": rows[0]["listener"],
                         "history_tokens": sorted(r["history_tokens"] for r in rows)[len(rows) // 2],
                         "settings": {name: summary[name] for name in settings}, "native": summary["native"],
                         "last_turn_only": {name: summary[last_only_name(name)] for name in settings},
                         "median_s": timing})
    return {"conversations": len(runs), "turns": turns, "document_tokens": document_tokens,
            "turn_tokens": turn_tokens, "score_tokens": score_tokens,
            "settings": {name: c.to_dict() for name, c in settings.items()}, "per_turn": per_turn, "runs": runs}
