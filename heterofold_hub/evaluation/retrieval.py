"""Long-context retrieval accuracy: facts early in a document, one question at the end, exact-match answers.

Each prompt is a retrieval document in the format the demo models were trained on
(:mod:`heterofold_hub.zoo.retrieval`), cut right before its first question block, plus that question's
prefix::

    [receiver special prefix, e.g. BOS]
    # facts
    # the code of amber-falcon is 73914      (4 to 6 fact lines; the asked one at a random position)
    ...
    <filler: held-out code, trimmed so the prompt is the target length in receiver tokens>
    # recall: the code of amber-falcon is    <- the prompt ends here; the answer is 5 digits

The facts open the document (no lead text), so they sit in its first few hundred characters; the asked
answer occurs in the prompt exactly once, in its fact line (documents where the filler happens to hold
it, or whose facts occur in excluded text such as the calibration split, are drawn again).

Conditions, all decoded greedily through the same ``TransferPipeline.continue_from`` path:

- ``native``: the receiver prefills the whole prompt itself;
- ``no-context``: the receiver reads only its special prefix and the question line
  ``# recall: the code of X is `` (no facts, no filler);
- each adapter: the sender prefills the prompt, the adapter maps that cache, the receiver continues.

Scoring (:func:`exact_match`): the first run of digits of the decoded continuation, after optional
leading whitespace, must equal the answer exactly (``"73914\\n"`` right; ``"739140"``, ``"7391"``,
``"x73914"`` wrong).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch

from heterofold_hub.progress import progress_bar
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.kvcache import build_cache, cache_layers
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline, TransferResult, native_prefill
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.selects import needs_surprisal
from heterofold_hub.transfer.sender import prefill_sender
from heterofold_hub.zoo.retrieval import FACTS_HEADER, fact_line, make_retrieval_doc

# Facts per document: training documents had 4 to 8; at most 6 keeps the facts block within about the first
# quarter of a 512-token prompt (a third at worst) on the demo receiver.
MIN_FACTS, MAX_FACTS = 4, 6
RECALL_MARK = "# recall: the code of "
FACT_RE = re.compile(r"^# (?:the|recall: the) code of (\S+) is (\d+)$", re.MULTILINE)
ANSWER_RE = re.compile(r"\s*(\d+)")
REFERENCES = ("native", "no-context")
QUALIFY_GAP = 0.20  # a length "qualifies" when native beats no-context by this much accuracy
NO_CONTEXT = "the receiver's special prefix + the question line alone ('# recall: the code of X is ')"
SCORING = "exact match: the first digit run of the greedy continuation (leading whitespace skipped) equals the answer"


@dataclass(frozen=True)
class RetrievalPrompt:
    """One question: ``prompt`` (ends with ``question``) and its 5-digit ``answer``."""

    prompt: str
    answer: str
    name: str
    question: str  # the question prefix the prompt ends with ("# recall: the code of X is ")
    facts_end: int  # character offset in ``prompt`` where the facts block ends and the filler begins
    fact_index: int  # position of the asked fact among the fact lines (0-based)
    n_facts: int
    tokens: int  # receiver tokens of ``prompt``, special prefix included
    target: int  # the receiver token count asked for


def exact_match(decoded: str, answer: str) -> bool:
    """True when the first digit run of ``decoded`` (after optional leading whitespace) is exactly ``answer``."""
    found = ANSWER_RE.match(decoded)
    return found is not None and found.group(1) == answer


def filler_texts(texts: list[str]) -> list[str]:
    """The texts fit to serve as filler: those holding no retrieval facts or questions of their own."""
    return [t for t in texts if FACTS_HEADER not in t and RECALL_MARK not in t and not FACT_RE.search(t)]


def known_facts(texts: list[str]) -> set[tuple[str, str]]:
    """Every ``(name, value)`` stated or recalled in ``texts`` (to keep eval facts out of fitted/trained text)."""
    return {(m.group(1), m.group(2)) for t in texts for m in FACT_RE.finditer(t)}


def _filler_chunk(rng: random.Random, fillers: list[str], chars: int) -> str:
    """At least ``chars`` characters of filler, from a random line start of a random text onwards (continuing
    into the next texts, in order, when one text is too short)."""
    first = rng.randrange(len(fillers))
    text = fillers[first]
    starts = [0] + [m.end() for m in re.finditer("\n", text[:-1])]
    parts, total, index = [text[rng.choice(starts):]], 0, first
    total = len(parts[0])
    while total < chars:
        index = (index + 1) % len(fillers)
        piece = fillers[index] if parts[-1].endswith("\n") else "\n" + fillers[index]
        parts.append(piece)
        total += len(piece)
    return "".join(parts)[:chars]


def make_prompt(
    rng: random.Random,
    fillers: list[str],
    receiver: Side,
    target: int,
    *,
    exclude: set[tuple[str, str]] = frozenset(),
    max_tries: int = 50,
) -> RetrievalPrompt:
    """One prompt of as close to ``target`` receiver tokens as the filler allows (never more; within a token or
    two below). Randomness comes from ``rng`` only."""
    tokenizer = receiver.tokenizer
    count = lambda text: len(tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"])  # noqa: E731
    for _ in range(max_tries):
        doc_seed, chunk_seed, n_facts = rng.getrandbits(64), rng.getrandbits(64), rng.randint(MIN_FACTS, MAX_FACTS)
        chars = 8 * target

        def build(filler: str) -> tuple[str, list[tuple[str, str]]]:
            text, pairs = make_retrieval_doc(random.Random(doc_seed), filler, n_facts)  # same facts for any filler
            blocks = sum(len(q) + len(a) + 1 for q, a in pairs)
            return text[: len(text) - blocks] + pairs[0][0], pairs  # cut before the first question block

        if count(build("")[0]) > target:
            raise HeteroFoldError(
                f"--lengths: {target} receiver tokens cannot hold {n_facts} facts and a question "
                f"({count(build('')[0])} tokens without any filler); use lengths of at least 256.")
        chunk = _filler_chunk(random.Random(chunk_seed), fillers, chars)
        while count(build(chunk)[0]) < target:  # not enough filler to reach the target: take more of it
            chars *= 2
            chunk = _filler_chunk(random.Random(chunk_seed), fillers, chars)
        low, high = 0, len(chunk)  # largest filler length whose prompt is <= target tokens
        while low < high:
            mid = (low + high + 1) // 2
            if count(build(chunk[:mid])[0]) <= target:
                low = mid
            else:
                high = mid - 1
        prompt, pairs = build(chunk[:low])
        question, answer = pairs[0]
        names_values = known_facts([prompt[: prompt.index(question)]])
        if names_values & set(exclude) or prompt.count(answer) != 1:
            continue  # a fact seen in fitting/training text, or the answer also inside the filler: draw again
        name = question[len(RECALL_MARK):].rsplit(" is ", 1)[0]
        facts_end = len(FACTS_HEADER) + sum(len(fact_line(n, v)) for n, v in pairs)
        fact_lines = prompt[len(FACTS_HEADER):facts_end].splitlines(keepends=True)
        return RetrievalPrompt(prompt=prompt, answer=answer, name=name, question=question, facts_end=facts_end,
                               fact_index=fact_lines.index(fact_line(name, answer)), n_facts=n_facts,
                               tokens=count(prompt), target=target)
    raise HeteroFoldError(f"Could not build a clean retrieval prompt of {target} tokens in {max_tries} tries; "
                          "the filler text keeps containing the answers. Use other --data.")


def make_prompts(
    fillers: list[str],
    receiver: Side,
    lengths: list[int],
    docs: int,
    *,
    seed: int = 0,
    exclude: set[tuple[str, str]] = frozenset(),
) -> dict[int, list[RetrievalPrompt]]:
    """``docs`` prompts per length; each length has its own seeded generator, so adding a length or changing
    ``docs`` leaves the other lengths' first prompts unchanged."""
    if not fillers:
        raise HeteroFoldError("No filler text: every text given holds retrieval facts or questions of its own. "
                              "Pass plain code or prose as --data.")
    out = {}
    for length in lengths:
        rng = random.Random(f"{seed}:retrieval:{length}")
        out[length] = [make_prompt(rng, fillers, receiver, length, exclude=exclude) for _ in range(docs)]
    return out


def answer_budget(receiver: Side, prompts: list[RetrievalPrompt]) -> int:
    """New tokens to decode: the longest answer in receiver tokens plus one, so that a number running on past
    the answer's length shows (and is scored wrong)."""
    return 1 + max(len(receiver.tokenizer(p.answer, add_special_tokens=False)["input_ids"]) for p in prompts)


def _stacked(results: list[TransferResult], receiver: Side) -> TransferResult:
    """One batch from several results of the same width (rows are independent: same answers, one ``generate``),
    in a cache of the receiver's own layer classes: a sliding-window layer (Gemma 3) stays one, having seen every
    position of the context, or ``generate`` would mask its window as if it held them all."""
    layers = [cache_layers(r.cache) for r in results]
    cache = build_cache([(torch.cat([per[i][0] for per in layers]), torch.cat([per[i][1] for per in layers]))
                         for i in range(len(layers[0]))],
                        windows=receiver.spec.windows, tokens=results[0].input_ids.shape[1] - 1)
    return TransferResult(cache=cache, input_ids=torch.cat([r.input_ids for r in results]),
                          attention_mask=torch.cat([r.attention_mask for r in results]))


QUESTION_BY = ("receiver", "sender")  # who reads the question: the receiver itself (the hand-off), or the sender


@torch.no_grad()
def decode_answers(
    sender: Side,
    receiver: Side,
    adapters: dict[str, PairAdapter],
    prompts: list[RetrievalPrompt],
    *,
    batch_size: int = 8,
    progress=None,
    question_by: str = "sender",
    recompute: TransferConfig | None = None,
) -> dict[str, list[str]]:
    """Greedy continuations (decoded text) of every prompt under ``native``, ``no-context`` and each adapter.

    ``question_by="sender"``: the whole prompt, question included, is the transferred context. ``"receiver"``: the
    hand-off protocol: the sender prefills the document alone and the receiver reads the question itself after the
    mapped cache (native prefill likewise reads the document, then the question). ``recompute``: the
    :class:`~heterofold_hub.transfer.config.TransferConfig` of each transfer (the question is the ``query`` of a
    select that reads the prompt).
    Per batch of prompts, the receiver caches of all conditions that cover the same tokens (native and every
    transfer) are stacked into one ``generate`` call."""
    if question_by not in QUESTION_BY:
        raise HeteroFoldError(f"question_by={question_by!r}; choose one of {', '.join(QUESTION_BY)}.")
    pipes = {name: TransferPipeline(adapter, sender, receiver) for name, adapter in adapters.items()}
    new_tokens = answer_budget(receiver, prompts)
    decode = dict(max_new_tokens=new_tokens, do_sample=False,
                  pad_token_id=receiver.tokenizer.pad_token_id or 0)
    out: dict[str, list[str]] = {name: [] for name in (*REFERENCES, *adapters)}
    config = recompute or TransferConfig()
    for start in range(0, len(prompts), batch_size):
        group = prompts[start : start + batch_size]
        asks = [p.question for p in group] if question_by == "receiver" else None
        texts = [p.prompt[: len(p.prompt) - len(p.question)] if asks else p.prompt for p in group]
        results = {"native": native_prefill(receiver, texts)}
        if pipes:
            prefill = prefill_sender(sender, texts, surprisal=config.active and needs_surprisal(config.select))
            results.update({name: pipe.transfer(prefill, texts, query=asks, config=config) for name, pipe in pipes.items()})
        shapes: dict[tuple, list[str]] = {}  # results that can share one generate call
        for name, result in results.items():
            shapes.setdefault((tuple(result.input_ids.shape), cache_layers(result.cache)[0][0].shape[2]), []).append(name)
        no_context = native_prefill(receiver, [p.question for p in group])  # the question alone, read as context
        batches = [(names, asks) for names in shapes.values()] + [(["no-context"], None)]
        results["no-context"] = no_context
        for names, ask in batches:
            stacked = _stacked([results[n] for n in names], receiver)
            new = TransferPipeline.continue_from(receiver.model, stacked, prompt=None if ask is None else ask * len(names),
                                                 tokenizer=receiver.tokenizer, **decode)
            text = receiver.tokenizer.batch_decode(new, skip_special_tokens=True)
            for i, name in enumerate(names):
                out[name] += text[i * len(group) : (i + 1) * len(group)]
        if progress is not None:
            progress(len(group))
    return out


def digit_accuracy(decoded: str, answer: str) -> float:
    """Share of the answer's digits that the first digit run of ``decoded`` reproduces at their place
    (a softer signal than :func:`exact_match`; chance is about 0.1 per digit)."""
    found = ANSWER_RE.match(decoded)
    run = found.group(1) if found else ""
    return sum(a == b for a, b in zip(run, answer)) / len(answer)


def summarise(decoded: dict[str, dict[int, list[str]]], answers: dict[int, list[str]]) -> dict[str, dict[str, dict]]:
    """Per method per length: exact-match ``accuracy``, its binomial standard error ``sqrt(p (1 - p) / n)``,
    ``n``, ``correct``, ``kept`` = accuracy / native accuracy (None where native accuracy is 0) and the
    mean ``digit_accuracy``."""
    hits = {name: {n: [exact_match(t, a) for t, a in zip(texts, answers[n])] for n, texts in by_length.items()}
            for name, by_length in decoded.items()}
    table = {}
    for name, by_length in decoded.items():
        table[name] = {}
        for length, texts in by_length.items():
            n = len(texts)
            acc = sum(hits[name][length]) / n if n else float("nan")
            native = hits["native"][length]
            native_acc = sum(native) / len(native) if native else 0.0
            table[name][str(length)] = {
                "accuracy": acc,
                "accuracy_se": math.sqrt(acc * (1 - acc) / n) if n else float("nan"),
                "n": n,
                "correct": int(sum(hits[name][length])),
                "kept": acc / native_acc if native_acc > 0 else None,
                "digit_accuracy": sum(digit_accuracy(t, a) for t, a in zip(texts, answers[length])) / n if n else float("nan"),
            }
    return table


def qualifying_lengths(methods: dict[str, dict[str, dict]], gap: float = QUALIFY_GAP) -> list[int]:
    """Lengths where native accuracy beats no-context accuracy by at least ``gap``."""
    return [int(length) for length, row in methods["native"].items()
            if row["accuracy"] - methods["no-context"][length]["accuracy"] >= gap - 1e-12]


def evaluate_retrieval(
    sender: Side,
    receiver: Side,
    adapters: dict[str, PairAdapter],
    prompts: dict[int, list[RetrievalPrompt]],
    *,
    batch_size: int = 8,
    progress: bool = True,
    examples: int = 3,
    question_by: str = "sender",
    recompute: TransferConfig | None = None,
) -> dict:
    """Exact-match retrieval accuracy of ``native``, ``no-context`` and each adapter at each length
    (plus the first ``examples`` decoded answers per length, to read); ``question_by`` and ``recompute``: see
    :func:`decode_answers`."""
    decoded: dict[str, dict[int, list[str]]] = {name: {} for name in (*REFERENCES, *adapters)}
    with progress_bar(progress) as bar:
        task = bar.add_task("retrieval", total=sum(len(p) for p in prompts.values()))
        for length, group in prompts.items():
            texts = decode_answers(sender, receiver, adapters, group, batch_size=batch_size,
                                   progress=lambda n: bar.advance(task, n), question_by=question_by,
                                   recompute=recompute)
            for name, values in texts.items():
                decoded[name][length] = values
    methods = summarise(decoded, {n: [p.answer for p in group] for n, group in prompts.items()})
    qualifying = qualifying_lengths(methods)
    return {
        "task": "retrieval",
        "sender": sender.name,
        "receiver": receiver.name,
        "lengths": list(prompts),
        "docs": len(next(iter(prompts.values()))) if prompts else 0,
        "prompt_tokens": {str(n): sum(p.tokens for p in group) / len(group) for n, group in prompts.items()},
        "facts_per_doc": [MIN_FACTS, MAX_FACTS],
        "no_context": NO_CONTEXT,
        "question_by": question_by,
        "recompute": None if recompute is None or not recompute.active else recompute.to_dict(),
        "scoring": SCORING,
        "methods": methods,
        "qualifying_gap": QUALIFY_GAP,
        "qualifying_lengths": qualifying,
        "kept_on_qualifying": {name: {str(n): rows[str(n)]["kept"] for n in qualifying} for name, rows in methods.items()
                               if name not in REFERENCES},
        "examples": {str(n): [{"answer": p.answer, "fact_index": p.fact_index, "n_facts": p.n_facts,
                               "prompt_tokens": p.tokens, **{name: decoded[name][n][i] for name in decoded}}
                              for i, p in enumerate(group[:examples])] for n, group in prompts.items()},
    }
