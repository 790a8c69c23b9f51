"""Facts across a hand-off: retrieval with the receiver reading its own question, over recompute settings.

The sender prefills a document (facts + filler, no question); the receiver gets the mapped cache, optionally
recomputes some positions natively (:mod:`heterofold_hub.transfer.recompute`), then reads the question itself
(``generate(prompt=...)``) and answers greedily. ``native`` is the receiver's own prefill of the same document,
then the same question; exact match as in :mod:`heterofold_hub.evaluation.retrieval`.

Two document formats, so a strategy that only finds ``# the code of`` lines is caught:

- ``code``: the facts open the document as code comments (``# the code of amber-falcon is 73914``), the
  question is ``# recall: the code of amber-falcon is `` (the format of every earlier retrieval figure);
- ``prose``: each fact is a sentence placed at a random line of the filler (anywhere in the document), the
  question is ``Question: what is the access code of amber-falcon?\\nAnswer: the access code of amber-falcon is ``.

All settings of a batch of documents reuse one sender prefill and one native cache; settings are compared on the
same documents (paired: :func:`mcnemar`).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

from heterofold_hub.progress import progress_bar
from heterofold_hub.base_models.loading import Side
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation.retrieval import (RECALL_MARK, _filler_chunk, digit_accuracy, exact_match, fact_line,
                                                 make_prompt)
from heterofold_hub.transfer.pipeline import TransferPipeline, TransferResult, native_prefill
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.selects import needs_surprisal
from heterofold_hub.transfer.sender import prefill_sender
from heterofold_hub.zoo.retrieval import ADJECTIVES, NOUNS

FORMATS = ("code", "prose")
PROSE_FACT = "For the record, the access code of {name} is {value}.\n"
PROSE_QUESTION = "Question: what is the access code of {name}?\nAnswer: the access code of {name} is "


@dataclass(frozen=True)
class HandoffPrompt:
    """One document and its question: ``context`` (what the sender prefills), ``question`` (what the receiver
    reads), ``answer`` and ``span``, the character range of the asked fact's statement in ``context``."""

    context: str
    question: str
    answer: str
    span: tuple[int, int]
    format: str
    tokens: int  # receiver tokens of context + question


def code_prompt(rng: random.Random, fillers: list[str], receiver: Side, target: int, exclude=frozenset()) -> HandoffPrompt:
    """The code format: :func:`~heterofold_hub.evaluation.retrieval.make_prompt` split before its question."""
    p = make_prompt(rng, fillers, receiver, target, exclude=exclude)
    context = p.prompt[: len(p.prompt) - len(p.question)]
    line = fact_line(p.name, p.answer)
    start = context.index(line)
    return HandoffPrompt(context, p.question, p.answer, (start, start + len(line) - 1), "code", p.tokens)


def prose_prompt(rng: random.Random, fillers: list[str], receiver: Side, target: int) -> HandoffPrompt:
    """The prose format: 4 to 6 fact sentences at random lines of the filler; the asked one anywhere."""
    count = lambda text: len(receiver.tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])  # noqa: E731
    for _ in range(50):
        names = list(dict.fromkeys(f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}" for _ in range(rng.randint(4, 6))))
        values = [str(rng.randint(10000, 99999)) for _ in names]
        asked, places = rng.randrange(len(names)), sorted(rng.random() for _ in names)
        chunk_seed = rng.getrandbits(64)

        def build(chars: int):
            filler = _filler_chunk(random.Random(chunk_seed), fillers, chars) if chars else ""
            starts = [0] + [i + 1 for i, c in enumerate(filler) if c == "\n"]
            cuts = [starts[min(int(p * len(starts)), len(starts) - 1)] for p in places]
            parts, last, span = [], 0, None
            for i, cut in enumerate(cuts):
                parts.append(filler[last:cut])
                offset = sum(map(len, parts))
                sentence = PROSE_FACT.format(name=names[i], value=values[i])
                if i == asked:
                    span = (offset, offset + len(sentence) - 1)
                parts.append(sentence)
                last = cut
            parts.append(filler[last:])
            text = "".join(parts)
            return (text if text.endswith("\n") else text + "\n"), span

        question = PROSE_QUESTION.format(name=names[asked])
        low, high = 0, 16 * target
        while count(build(high)[0] + question) < target:
            high *= 2
        while low < high:  # most filler characters whose document + question stays within target tokens
            mid = (low + high + 1) // 2
            if count(build(mid)[0] + question) <= target:
                low = mid
            else:
                high = mid - 1
        context, span = build(low)
        if context.count(values[asked]) == 1 and all(context.count(n) == 1 for n in names):
            return HandoffPrompt(context, question, values[asked], span, "prose", count(context + question))
    raise HeteroFoldError(f"Could not build a clean prose retrieval document of {target} tokens in 50 tries.")


def make_handoff_prompts(fillers: list[str], receiver: Side, length: int, docs: int, *, fmt: str, seed: int = 0,
                         exclude=frozenset()) -> list[HandoffPrompt]:
    if fmt not in FORMATS:
        raise HeteroFoldError(f"format={fmt!r}; choose one of {', '.join(FORMATS)}.")
    rng = random.Random(f"{seed}:handoff:{fmt}:{length}")
    if fmt == "code":
        return [code_prompt(rng, fillers, receiver, length, exclude) for _ in range(docs)]
    return [prose_prompt(rng, fillers, receiver, length) for _ in range(docs)]


@dataclass(frozen=True)
class Setting:
    """One hand-off setting of a grid: its :class:`~heterofold_hub.transfer.config.TransferConfig`, and
    ``deferred``: the transfer is made without the prompt, and the recompute when the receiver reads it
    (:class:`~heterofold_hub.transfer.pipeline.DeferredRecompute`)."""

    config: TransferConfig
    deferred: bool = False

    @property
    def name(self) -> str:
        """``transfer``, ``oracle`` or ``select@share``, then ``+L<repaired layers>``, `` k<key scale>``,
        `` deferred`` where they apply (the names results and plots use)."""
        return self.config.label + (" deferred" if self.deferred else "")

    def record(self) -> dict:
        return {**self.config.to_dict(), "deferred": self.deferred}

    def transfer(self, pipeline: TransferPipeline, prefill, texts: list[str], questions: list[str],
                 spans: list[list[tuple[int, int]]] | None = None) -> TransferResult:
        """The receiver cache this setting gives, ready for the receiver to read ``questions`` (a deferred
        recompute applied to them, as ``generate(prompt=...)`` would)."""
        result = pipeline.transfer(prefill, texts, config=self.config, query=None if self.deferred else questions,
                                   spans=spans)
        return result.deferred.apply(questions) if result.deferred is not None else result


@torch.no_grad()
def evaluate_handoff(sender: Side, receiver: Side, pipeline: TransferPipeline, prompts: list[HandoffPrompt],
                     settings: list[Setting], *, batch_size: int = 8, progress: bool = True, log=None) -> dict:
    """Per setting (plus ``native`` and ``no-context``): decoded answers, exact-match hits, recomputed share and the
    transfer's seconds per batch (plan + map + selection + recompute, a deferred recompute's included; not
    generation). ``log``: a callable given a
    line per batch (for runs without a terminal)."""
    tok = receiver.tokenizer
    budget = 1 + max(len(tok(p.answer, add_special_tokens=False)["input_ids"]) for p in prompts)
    decode = dict(max_new_tokens=budget, do_sample=False, pad_token_id=tok.pad_token_id or 0)
    names = ["native", "no-context", *(s.name for s in settings)]
    rows = {name: {"decoded": [], "hits": [], "share": [], "seconds": []} for name in names}
    surprisal = any(needs_surprisal(s.config.select) for s in settings)
    with progress_bar(progress, transient=False) as bar:
        task = bar.add_task(f"hand-off {prompts[0].format} {prompts[0].tokens} tok", total=len(prompts))
        for start in range(0, len(prompts), batch_size):
            group = prompts[start : start + batch_size]
            texts, questions = [p.context for p in group], [p.question for p in group]
            prefill = prefill_sender(sender, texts, surprisal=surprisal)
            results = {"native": native_prefill(receiver, texts),
                       "no-context": native_prefill(receiver, questions)}  # the question alone
            seconds = {}
            for s in settings:
                began = time.perf_counter()
                results[s.name] = s.transfer(pipeline, prefill, texts, questions, [[p.span] for p in group])
                seconds[s.name] = time.perf_counter() - began
            if log is not None:
                log(f"batch {start // batch_size + 1}: prefills ready, transfers took "
                    + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()))
            for name, result in results.items():
                prompt = None if name == "no-context" else questions
                new = TransferPipeline.continue_from(receiver.model, result, prompt=prompt, tokenizer=tok, **decode)
                text = tok.batch_decode(new, skip_special_tokens=True)
                row = rows[name]
                row["decoded"] += text
                row["hits"] += [exact_match(t, p.answer) for t, p in zip(text, group)]
                row["share"].append((result.recompute or {}).get("share", 1.0 if name == "native" else 0.0))
                row["seconds"].append(seconds.get(name))
                results[name] = None  # generate grew the cache; let it go
            bar.advance(task, len(group))
    answers = [p.answer for p in prompts]
    out = {}
    for name, row in rows.items():
        hits, n = row["hits"], len(row["hits"])
        acc = sum(hits) / n
        out[name] = {"accuracy": acc, "accuracy_se": math.sqrt(acc * (1 - acc) / n), "n": n, "correct": sum(hits),
                     "digit_accuracy": sum(digit_accuracy(t, a) for t, a in zip(row["decoded"], answers)) / n,
                     "recomputed_share": sum(row["share"]) / len(row["share"]),
                     "hits": [int(h) for h in hits], "examples": row["decoded"][:3]}
    native = out["native"]["accuracy"]
    for name, row in out.items():
        row["kept"] = row["accuracy"] / native if native > 0 else None
        row["mcnemar_p_vs_native"] = mcnemar(out["native"]["hits"], row["hits"])
    return out


def mcnemar(a: list[int], b: list[int]) -> float:
    """Exact two-sided McNemar p-value for paired hits ``a``, ``b`` (same documents)."""
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (for a ratio to native, divide both ends)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = correct / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


__all__ = ["FORMATS", "HandoffPrompt", "Setting", "evaluate_handoff", "make_handoff_prompts", "mcnemar", "wilson",
           "RECALL_MARK"]


def handoff_markdown(result: dict, fmt: str, settings: list[str] | None = None) -> str:
    """A Markdown table of a :mod:`benchmarks.handoff` result: one row per setting (all, or ``settings`` in that
    order), per length the exact-match accuracy with its binomial SE, the share of native kept and the recomputed
    share of the context. README tables are this text exactly (a test holds them together)."""
    rows = result["formats"][fmt]
    lengths = [str(n) for n in result["lengths"] if str(n) in rows]  # a stopped run may lack its last lengths
    names = settings or list(rows[lengths[0]])
    head = "| setting | " + " | ".join(f"{n} tokens: exact match (kept), recomputed" for n in lengths) + " |"
    lines = [head, "| --- |" + " ---: |" * len(lengths)]
    for name in names:
        cells = []
        for n in lengths:
            row = rows[n][name]
            kept = "—" if row["kept"] is None else f"{row['kept']:.2f}"
            cells.append(f"{row['accuracy']:.2f} ± {row['accuracy_se']:.2f} ({kept}), {row['recomputed_share']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speed_markdown(result: dict) -> str:
    """A Markdown table of a hand-off speed result (the harness's ``handoff-speed`` stage, ``benchmarks/handoff.py``): per length, native prefill, plan, the map (into
    the receiver's cache, and into a working cache keeping every position), and each setting's end-to-end time
    with its speed-up over native prefill."""
    lengths = list(result["lengths"])
    names = list(result["lengths"][lengths[0]]["settings"])
    lines = ["| receiver tokens | native prefill | plan | map | map, every position | "
             + " | ".join(f"{name}: end to end (x)" for name in names) + " |",
             "| ---: |" + " ---: |" * (4 + len(names))]
    for n in lengths:
        row = result["lengths"][n]
        ms = lambda s: f"{s * 1e3:.0f} ms"  # noqa: E731
        cells = [ms(row["native_prefill_s"]), ms(row["plan_s"]), ms(row["map_s"]), ms(row["map_every_position_s"])]
        cells += [f"{ms(v['end_to_end_s'])} ({v['speedup']:.1f}x)" for v in row["settings"].values()]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
