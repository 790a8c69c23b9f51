"""Which context positions a receiver recomputes natively: one small base class, one method per strategy.

A :class:`Selector` scores every receiver position of a plan (``[B, Tr]``, higher first); :func:`choose` takes the
top share of each row's mapped positions. Strategies, cheapest signal first:

- ``tail``: the most recent positions (a baseline);
- ``chunk-start``: the first positions of every ``chunk``-token chunk (EPIC's attention-sink lever);
- ``content``: query-agnostic, tokens that carry content to copy: digit runs and rare tokens (the sender's
  surprisal when the prefill kept it), spread over the line around each (``digits``: the few tokens before each
  only); ``content-tail``: content's ranking and tail's, interleaved (about half the share each);
- ``deviation``: where the mapped K/V of the receiver's first layer deviates most from its native K/V (CacheBlend;
  pays a native first layer over every token, which then stays in the cache);
- ``query``: query-aware, the prompt's rare words found in the context, spread over their line, the sender's
  attention from the prompt breaking ties (ProphetKV's relevance to the query); ``keywords``: the same words
  alone, with no model run (the sender's attention costs a forward of the prompt over the whole cache);
  ``statement``: only the line those words match best, however large the share, which then only caps it;
  ``statement-tail``: that line, then the most recent positions to fill the share; ``attention``: that attention
  alone (CacheClip style). All need the prompt at transfer time, ``attention`` the sender model too;
- ``oracle``: exactly the character spans given (the answer's line in an evaluation): the ceiling.

Each strategy is a frozen dataclass whose fields are its knobs (kvpress's presses):
``TransferConfig(recompute=0.1, select=ChunkStart(chunk=32))``; its name alone means its default knobs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.selects import SELECT_READS
from heterofold_hub.transfer.kvcache import LayerKV
from heterofold_hub.transfer.padding import positions



@dataclass
class SelectionInputs:
    """What a selector may read. ``mapped_mask`` ``[B, Tr]``: positions whose K/V came from the map (the only ones
    a selector may choose). ``surprisal`` / ``query_attention`` ``[B, Tr]``: sender signals aligned to receiver
    positions, None when not available. ``native_first`` / ``mapped_first``: the receiver's first layers, native and
    mapped, ``[B, Hr, Tr, Dr]`` each, when computed. ``spans``: per row, character spans for ``oracle``, with
    ``offsets`` ``[B, Tr, 2]`` the receiver tokens' character offsets."""

    receiver_ids: torch.Tensor
    mapped_mask: torch.Tensor
    tokenizer: object
    surprisal: torch.Tensor | None = None
    query_attention: torch.Tensor | None = None
    native_first: list[LayerKV] | None = None
    mapped_first: list[LayerKV] | None = None
    spans: list[list[tuple[int, int]]] | None = None
    offsets: torch.Tensor | None = None
    query_ids: list[torch.Tensor] | None = None  # per row, the receiver's token ids of its prompt


@dataclass(frozen=True)
class Selector:
    """Scores positions for recompute: one frozen dataclass per strategy, its fields its knobs (validated when made),
    ``name`` its registered name, :meth:`scores` its one method. What a strategy reads (:attr:`needs`) is declared by
    name in :data:`~heterofold_hub.transfer.config.SELECT_READS`, where the registry and the CLI read it without
    torch. Pass one as ``TransferConfig(select=ChunkStart(chunk=32))``; its name alone means its default knobs."""

    name: ClassVar[str] = ""
    fills_share: ClassVar[bool] = True  # False: only positions scored above 0 are taken, at most the share

    @property
    def needs(self) -> tuple[str, ...]:
        return SELECT_READS[self.name]

    def scores(self, inputs: SelectionInputs) -> torch.Tensor:
        """``[B, Tr]`` float, higher recomputed first."""
        raise NotImplementedError

    def knobs(self) -> dict:
        return dataclasses.asdict(self)

    def _check(self, **limits: int | float) -> None:
        """Refuse a knob below its lowest value (``limits``: knob name -> lowest), naming the class and the fix."""
        for knob, low in limits.items():
            value = getattr(self, knob)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
                raise HeteroFoldError(f"{type(self).__name__}({knob}={value!r}): pass a number >= {low} (default "
                                      f"{type(self).__dataclass_fields__[knob].default}).")


@dataclass(frozen=True)
class Tail(Selector):
    """The most recent positions (a baseline)."""

    name: ClassVar[str] = "tail"

    def scores(self, inputs):
        return torch.arange(inputs.receiver_ids.shape[1], dtype=torch.float32).expand(inputs.receiver_ids.shape)


@dataclass(frozen=True)
class ChunkStart(Selector):
    """The first positions of every ``chunk`` receiver tokens (EPIC's attention-sink lever)."""

    name: ClassVar[str] = "chunk-start"
    chunk: int = 64

    def __post_init__(self):
        self._check(chunk=1)

    def scores(self, inputs):
        position = positions(inputs.mapped_mask)  # counted over the mapped tokens only
        return -(position % self.chunk).float()


def token_content(inputs: SelectionInputs, digit_bonus: float) -> torch.Tensor:
    """``[B, Tr]``: ``digit_bonus`` nats for each token holding a digit, plus the sender's surprisal when the prefill
    kept it."""
    score = digit_tokens(inputs.tokenizer, inputs.receiver_ids).float() * digit_bonus
    return score if inputs.surprisal is None else score + inputs.surprisal


@dataclass(frozen=True)
class Content(Selector):
    """Digits and the sender's surprise, spread over the line around each peak (a value with its name).

    ``digit_bonus``: nats added to a token holding a digit (numbers are what exact copying most often needs);
    ``line_radius``: tokens on either side of a peak, on its line, that share its score (a statement, not a
    paragraph)."""

    name: ClassVar[str] = "content"
    digit_bonus: float = 20.0
    line_radius: int = 12

    def __post_init__(self):
        self._check(digit_bonus=0, line_radius=0)

    def scores(self, inputs):
        return spread_in_line(token_content(inputs, self.digit_bonus), line_ids(inputs.tokenizer, inputs.receiver_ids),
                              self.line_radius)


@dataclass(frozen=True)
class Digits(Selector):
    """:class:`Content`'s token signal spread only to the ``span_before`` tokens before each (the name before a
    value; the first content signal measured)."""

    name: ClassVar[str] = "digits"
    digit_bonus: float = 20.0
    span_before: int = 4

    def __post_init__(self):
        self._check(digit_bonus=0, span_before=0)

    def scores(self, inputs):
        return spread_back(token_content(inputs, self.digit_bonus), self.span_before)


@dataclass(frozen=True)
class ContentTail(Selector):
    """Query-agnostic: :class:`Content`'s ranking and :class:`Tail`'s, interleaved, so a share takes about half
    from each (the content lines where facts sit, the recent context the next tokens read first). A position's score
    is minus its better rank of the two. Its knobs are :class:`Content`'s."""

    name: ClassVar[str] = "content-tail"
    digit_bonus: float = 20.0
    line_radius: int = 12

    def __post_init__(self):
        self._check(digit_bonus=0, line_radius=0)

    def scores(self, inputs):
        content = Content(digit_bonus=self.digit_bonus, line_radius=self.line_radius).scores(inputs)
        recent = Tail().scores(inputs)
        best = torch.minimum(_ranks(content, inputs.mapped_mask), _ranks(recent, inputs.mapped_mask))
        return -best.float()


def _ranks(score: torch.Tensor, mapped: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` long: each position's rank by ``score`` among its row's mapped positions (0 the highest;
    unmapped positions rank last)."""
    order = score.float().masked_fill(~mapped, float("-inf")).argsort(dim=1, descending=True, stable=True)
    return torch.empty_like(order).scatter_(1, order, torch.arange(score.shape[1]).expand_as(order))


@dataclass(frozen=True)
class Deviation(Selector):
    """Where the mapped K/V of the receiver's first layer deviates most from its native K/V (CacheBlend)."""

    name: ClassVar[str] = "deviation"

    def scores(self, inputs):
        (nk, nv), (mk, mv) = inputs.native_first[0], inputs.mapped_first[0]
        error = lambda n, m: ((n.float() - m.float()).norm(dim=-1) / n.float().norm(dim=-1).clamp(min=1e-6)).mean(1)  # noqa: E731
        return error(nk, mk) + error(nv, mv)


@dataclass(frozen=True)
class Attention(Selector):
    """The sender's attention from the prompt over the context alone (CacheClip's signal, with the sender as helper),
    spread to the ``span_before`` tokens before each position."""

    name: ClassVar[str] = "attention"
    span_before: int = 4

    def __post_init__(self):
        self._check(span_before=0)

    def scores(self, inputs):
        return spread_back(inputs.query_attention, self.span_before)


@dataclass(frozen=True)
class Keywords(Selector):
    """The prompt's rare words found in the context, each matched token weighted by how rare it is there, spread over
    ``line_radius`` tokens of the line around each match: the statement the prompt asks about, name and value
    together. No model runs."""

    name: ClassVar[str] = "keywords"
    line_radius: int = 12

    def __post_init__(self):
        self._check(line_radius=0)

    def scores(self, inputs):
        return spread_in_line(keyword_matches(inputs), line_ids(inputs.tokenizer, inputs.receiver_ids),
                              self.line_radius)


@dataclass(frozen=True)
class Statement(Selector):
    """The statement the prompt asks about: the line whose tokens match the prompt's rare words best (by the sum of
    :func:`keyword_matches` over the line; lines that tie with it too), and nothing more. Recomputing further lines
    to fill the share lowered retrieval at 2048 tokens (docs/results/retrieval.md): a sibling statement made native competes
    with the asked one. So the share only caps what this takes."""

    name: ClassVar[str] = "statement"
    fills_share: ClassVar[bool] = False

    def scores(self, inputs):
        match, lines = keyword_matches(inputs), line_ids(inputs.tokenizer, inputs.receiver_ids)
        per_line = torch.zeros(match.shape[0], int(lines.max()) + 1).scatter_add_(1, lines, match)
        score = per_line.gather(1, lines)  # [B, Tr]: each token scores its line's sum
        best = per_line.amax(1, keepdim=True)
        return torch.where((score >= best) & (best > 0), score, torch.zeros_like(score))


@dataclass(frozen=True)
class StatementTail(Selector):
    """:class:`Statement`'s line, then the most recent positions until the share is filled: the asked fact for
    retrieval, the recent context for what the receiver writes next (the tail alone lifts recovered the most of the
    query-agnostic strategies: docs/results/retrieval.md)."""

    name: ClassVar[str] = "statement-tail"

    def scores(self, inputs):
        asked = Statement().scores(inputs)
        recent = Tail().scores(inputs) / inputs.receiver_ids.shape[1]  # [0, 1): below any statement token
        return torch.where(asked > 0, asked + 1.0, recent)


@dataclass(frozen=True)
class Query(Selector):
    """:class:`Keywords`, with the sender's attention from the prompt (when the sender model is loaded) breaking
    ties between positions the words score alike."""

    name: ClassVar[str] = "query"
    line_radius: int = 12

    def __post_init__(self):
        self._check(line_radius=0)

    def scores(self, inputs):
        score, attention = keyword_matches(inputs), inputs.query_attention
        if attention is not None:
            score = score + 1e-3 * attention / attention.amax(1, keepdim=True).clamp(min=1e-12)
        return spread_in_line(score, line_ids(inputs.tokenizer, inputs.receiver_ids), self.line_radius)


def keyword_matches(inputs: SelectionInputs) -> torch.Tensor:
    """``[B, Tr]``: at each mapped context token that also occurs in the row's prompt, 1 / its count in the context
    (a name the prompt asks about outweighs ``the``), else 0."""
    ids, mapped = inputs.receiver_ids, inputs.mapped_mask
    score = torch.zeros(ids.shape)
    for row, asked in enumerate(inputs.query_ids):
        context = ids[row][mapped[row]]
        counts = torch.bincount(context, minlength=int(max(ids.max(), asked.max())) + 1).float()
        matched = torch.isin(ids[row], asked) & mapped[row]
        score[row] = matched.float() / counts[ids[row]].clamp(min=1)
    return score


@dataclass(frozen=True)
class Oracle(Selector):
    """Exactly the character spans given (the answer's line in an evaluation): the ceiling."""

    name: ClassVar[str] = "oracle"

    def scores(self, inputs):
        start, end = inputs.offsets[..., 0], inputs.offsets[..., 1]
        score = torch.zeros(inputs.receiver_ids.shape)
        for row, spans in enumerate(inputs.spans):
            for a, b in spans:
                score[row] += ((start[row] < b) & (end[row] > a) & (end[row] > start[row])).float()
        return score


SELECTORS: dict[str, type[Selector]] = {s.name: s for s in (Tail, ChunkStart, Content, Digits, ContentTail, Deviation,
                                                            Keywords, Statement, StatementTail, Query, Attention,
                                                            Oracle)}


if set(SELECTORS) != set(SELECT_READS):  # one class per declared name, and no class left undeclared
    raise ImportError(f"selectors {sorted(SELECTORS)} do not match SELECT_READS {sorted(SELECT_READS)}")


def get_selector(select: str | Selector) -> Selector:
    """The strategy ``select`` names (with its default knobs), or ``select`` itself."""
    if isinstance(select, Selector):
        return select
    if select not in SELECTORS:
        raise HeteroFoldError(f"select={select!r}; choose one of {', '.join(SELECT_READS)}.")
    return SELECTORS[select]()


def selector_from_dict(fields: dict) -> Selector:
    """A selector from its record (``{"name": "chunk-start", "chunk": 32}``), refusing unknown names and knobs."""
    fields = dict(fields)
    cls = SELECTORS.get(fields.pop("name", None))
    if cls is None:
        raise HeteroFoldError(f"select={fields!r}: a selector record names one of {', '.join(SELECT_READS)} under "
                              "'name'.")
    known = {f.name for f in dataclasses.fields(cls)}
    if set(fields) - known:
        raise HeteroFoldError(f"select: {cls.__name__} has no knob(s) {', '.join(sorted(set(fields) - known))}; its "
                              f"knobs are {', '.join(sorted(known)) or 'none'}.")
    return cls(**fields)


def spread_back(score: torch.Tensor, before: int) -> torch.Tensor:
    """``[B, T]``: each position also takes the score of any of the ``before`` positions after it, so the tokens
    just before a chosen one (a value's name) rank with it."""
    if before <= 0:
        return score
    padded = torch.nn.functional.pad(score[:, None], (0, before), value=float("-inf"))
    return torch.nn.functional.max_pool1d(padded, before + 1, stride=1)[:, 0]


def spread_in_line(score: torch.Tensor, lines: torch.Tensor, radius: int) -> torch.Tensor:
    """``[B, T]``: each position scores the sum of the scores within ``radius`` positions of it on its own line
    (``lines`` ``[B, T]`` line ids): a statement dense in content (a name and its five digits) outranks one stray
    digit, its tokens are chosen together, and the spread stops at the line's end."""
    out = score.clone()
    for shift in range(1, radius + 1):
        for other, other_line, here in ((score[:, shift:], lines[:, shift:], slice(None, -shift)),
                                        (score[:, :-shift], lines[:, :-shift], slice(shift, None))):
            out[:, here] += torch.where(other_line == lines[:, here], other, torch.zeros_like(other))
    return out


def _token_texts(tokenizer, ids: torch.Tensor, test) -> torch.Tensor:
    """``[B, T]`` bool: ``test(text)`` of each token's decoded text (decoded once per distinct id)."""
    unique = torch.unique(ids)
    flags = torch.tensor([test(tokenizer.decode([i])) for i in unique.tolist()], dtype=torch.bool)
    return flags[torch.searchsorted(unique, ids)]


def digit_tokens(tokenizer, ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` bool: tokens whose text holds a digit."""
    return _token_texts(tokenizer, ids, lambda text: any(c.isdigit() for c in text))


def line_ids(tokenizer, ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` line number of each token; a token holding a newline belongs to the line it ends."""
    newline = _token_texts(tokenizer, ids, lambda text: "\n" in text).long()
    return newline.cumsum(1) - newline


@dataclass
class Choice:
    """Chosen positions: ``index`` ``[B, n]`` columns of the receiver cache, ``valid`` ``[B, n]`` which are real,
    ``share``: chosen / mapped positions over the batch."""

    index: torch.Tensor
    valid: torch.Tensor
    share: float = field(default=0.0)


def choose(scores: torch.Tensor, mapped_mask: torch.Tensor, fraction: float | None, *,
           positive_only: bool = False) -> Choice:
    """Per row, the top ``fraction`` of its mapped positions by ``scores`` (``[B, Tr]``), at least one when the
    fraction is above 0 (``positive_only``: of those scored above 0 only, so maybe fewer); ``fraction=None`` takes
    every position with a positive score (the oracle's spans)."""
    counts, positive = mapped_mask.sum(1), ((scores > 0) & mapped_mask).sum(1)
    if fraction is None:
        wanted = positive
    else:
        wanted = torch.where(counts > 0, (counts * fraction).round().long().clamp(min=1 if fraction > 0 else 0), 0)
        wanted = torch.minimum(wanted, positive if positive_only else counts)
    n = int(wanted.max()) if len(wanted) else 0
    ranked = scores.float().masked_fill(~mapped_mask, float("-inf")).sort(dim=1, descending=True, stable=True).indices[:, :n]
    valid = torch.arange(n)[None] < wanted[:, None]
    index = torch.where(valid, ranked, ranked[:, :1] if n else ranked)
    index, order = index.sort(dim=1)  # by position, as a forward reads them
    valid = valid.gather(1, order)
    share = float(wanted.sum()) / max(int(counts.sum()), 1)
    return Choice(index=index, valid=valid, share=share)
