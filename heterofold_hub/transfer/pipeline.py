"""Transfer a sender's cache for some texts into a receiver cache the receiver can ``generate`` from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.transfer.kvcache import LayerKV, build_cache, cache_layers, check_cache, view_of
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.transfer.padding import padded, positions
from heterofold_hub.transfer.plan import PlanCache, TransferPlan, build_plan
from heterofold_hub.transfer.fast import LayerStream, map_cache, map_every_position
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.selects import needs_surprisal
from heterofold_hub.transfer.recompute import apply_recompute, choose_before_map, selection_inputs, window_rows
from heterofold_hub.transfer.sender import SenderPrefill, as_texts, check_sender
from heterofold_hub.transfer.identity import adapter_digest, cache_key, identity, side_identity, text_digest


@dataclass
class TransferResult:
    """A receiver cache over ``input_ids`` ``[B, Tr]`` (left-padded, ``attention_mask`` ``[B, Tr]``).

    ``prefilled`` is True when the receiver computed the cache itself (a fallback), not a transfer.
    ``config``: the :class:`~heterofold_hub.transfer.config.TransferConfig` the transfer ran (None for a native
    prefill). ``recompute``: what the receiver recomputed natively after mapping (the config's fields, and
    ``share``, the share of mapped positions actually recomputed), None for a pure transfer.

    A result can be read any number of times: :meth:`TransferPipeline.generate` extends a view of ``cache``, never
    ``cache`` itself, so every question asked of one result reads exactly the context it was made of."""

    cache: DynamicCache
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prefilled: bool = False
    recompute: dict | None = None
    identity: dict | None = None  # how the cache was made (heterofold_hub.transfer.identity), for cache keys
    deferred: DeferredRecompute | None = None  # a recompute that waits for the receiver's prompt (see transfer)
    config: TransferConfig | None = None
    segments: list[dict] | None = None  # a composed cache's segments, in order (heterofold_hub.transfer.segments)

    def cache_key(self, row: int | None = None) -> str:
        """A key for a serving cache: equal only for caches made the same way (mapped or native, adapter and its
        weights, models, dtypes, recompute and what it read) from the same receiver tokens (of one ``row`` when
        given)."""
        if self.identity is None:
            raise HeteroFoldError("This result has no identity; make it with TransferPipeline.transfer or native_prefill.")
        rows = self.input_ids.shape[0]
        if row is not None and (isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < rows):
            raise HeteroFoldError(f"cache_key(row={row!r}): this result holds {rows} row(s); pass a row in "
                                  f"0..{rows - 1}, or no row for the key of the whole batch.")
        return cache_key(self.identity, row)


@dataclass
class DeferredRecompute:
    """A recompute asked for before the receiver's prompt was known, by a ``select`` that reads it (``statement``,
    ``keywords``, ...): the hand-off keeps the sender's cache and the plan, and :meth:`apply` makes the recomputed
    cache once the prompt arrives (:meth:`TransferPipeline.generate` calls it). Its cache is what
    ``transfer(..., query=prompt)`` would have made (to float rounding). It starts from the pure transfer's
    ``mapped`` cache and maps again only the sliding-window rows that cache dropped and the recompute reads; if
    that cache was extended since (generation ran on it), it maps afresh."""

    pipeline: TransferPipeline
    sender_cache: object  # a SenderPrefill, or the sender's cache
    plan: TransferPlan
    config: TransferConfig
    mapped: DynamicCache | None = None  # the pure transfer's cache

    def apply(self, prompt: str | list[str]) -> TransferResult:
        tokens = self.plan.cache_tokens
        layers = None if self.mapped is None else cache_layers(self.mapped)
        untouched = layers is not None and all(
            getattr(layer, "cumulative_length", keys.shape[2]) == tokens and keys.shape[2] <= tokens
            for layer, (keys, _) in zip(self.mapped.layers, layers))
        query = _per_row(prompt, self.plan.batch_size, "prompt")
        return self.pipeline.recomputed(self.sender_cache, self.plan, self.config, query=query,
                                         mapped=layers if untouched else None)


@torch.no_grad()
def native_prefill(receiver: Side, texts: str | list[str]) -> TransferResult:
    """The receiver's own cache of ``texts`` (all but each last token), left-padded exactly as a transfer gives
    it, so code can treat both alike (``prefilled=True``)."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    encoded = [encode(receiver.tokenizer, t)[0] for t in texts]
    ids, mask = padded(encoded, receiver.tokenizer.pad_token_id or 0, side="left")
    model = receiver.model
    out = model(input_ids=ids[:, :-1].to(model.device), attention_mask=mask[:, :-1].to(model.device),
                position_ids=positions(mask)[:, :-1].to(model.device), use_cache=True, **cache_only(model))
    made = identity(kind="native", receiver=receiver, input_ids=ids, attention_mask=mask,
                    dtypes={"receiver": str(model.dtype)})
    return TransferResult(cache=out.cache, input_ids=ids, attention_mask=mask, prefilled=True, identity=made)


class TransferPipeline:
    """A fitted adapter between a sender (tokenizer + KV layout) and a loaded, frozen receiver.

    ``plan_cache`` keeps what every plan of this pair shares (RoPE tables, the receiver's native-prefix K/V), so
    only the first plan pays for them."""

    def __init__(self, adapter: PairAdapter, sender: Side, receiver: Side, *, source: str | None = None):
        """``source``: where the adapter came from (``repo@version`` or a folder), recorded in every result's
        identity."""
        if receiver.model is None:
            raise HeteroFoldError("The receiver model must be loaded to build its cache.")
        for side, spec_key, who in ((sender, "sender_spec", "sender"), (receiver, "receiver_spec", "receiver")):
            if side.spec.to_dict() != getattr(adapter.config, spec_key):
                raise PairMismatchError(
                    f"This {adapter.config.method!r} adapter was fitted for {who} {getattr(adapter.config, who)!r} "
                    f"with KV layout {getattr(adapter.config, spec_key)}, but the {who} given is {side.name!r} "
                    f"with {side.spec.to_dict()}. Use an adapter fitted for this pair."
                )
        self.adapter, self.sender, self.receiver = adapter, sender, receiver
        self.plan_cache = PlanCache(sender, receiver)
        self.source = source or adapter.config.method
        self._adapter_identity: dict | None = None

    @property
    def adapter_identity(self) -> dict:
        """``{"source", "weights_sha256"}`` of this pipeline's adapter (hashed once)."""
        if self._adapter_identity is None:
            self._adapter_identity = {"source": self.source, "weights_sha256": adapter_digest(self.adapter)}
        return self._adapter_identity

    def _result(self, cache, plan: TransferPlan, sender_layers: list[LayerKV], config: TransferConfig,
                recompute: dict | None = None, read: dict | None = None, *, wire: str | None = None) -> TransferResult:
        """``recompute``: the record of what was recomputed (None: nothing); ``read``: what the recompute read
        beyond the plan (digests of the prompt or spans, whether the sender's surprisal was there); ``wire``: the
        narrower dtype a loaded prefill's K/V travelled in (they were rounded to it), else None."""
        dtypes = {"receiver": str(self.receiver.model.dtype), "map": str(self.adapter.compute_dtype),
                  "sender_cache": str(sender_layers[0][0].dtype)}
        if wire is not None:
            dtypes["sender_wire"] = wire
        made = identity(kind="mapped", receiver=self.receiver, sender=self.sender, adapter=self.adapter_identity,
                        input_ids=plan.input_ids, attention_mask=plan.attention_mask, recompute=recompute,
                        dtypes=dtypes, read=read)
        return TransferResult(cache=cache, input_ids=plan.input_ids, attention_mask=plan.attention_mask,
                              recompute=recompute, identity=made, config=config)

    def plan(self, texts: str | list[str], *, sender_position_ids: torch.Tensor | None = None,
             mapped_start: int | None = None, prefill: SenderPrefill | None = None) -> TransferPlan:
        """Tokenize and align ``texts`` once; pass the plan to :meth:`transfer` to map any sender cache of them.

        ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not its cache columns;
        ``mapped_start``: the receiver position of the first mapped token (see :func:`build_plan`); ``prefill``:
        the sender's :class:`SenderPrefill` of ``texts``, whose tokens the plan reads instead of tokenizing again."""
        if prefill is not None:
            _check_rows(prefill, as_texts(texts))
            check_sender(prefill, self.sender)
        return build_plan(self.sender, self.receiver, texts, min_native=self.adapter.config.min_native,
                          sender_position_ids=sender_position_ids, cache=self.plan_cache,
                          mapped_start=mapped_start, sender_tokens=None if prefill is None else prefill.tokens())

    def stream(self, plan: TransferPlan) -> LayerStream:
        """A :class:`LayerStream` that maps sender layers into this receiver's cache as they arrive."""
        return LayerStream(self.adapter, plan, dtype=self.receiver.model.dtype)

    def transfer(self, sender_cache, texts: str | list[str] | None = None, *, plan: TransferPlan | None = None,
                 config: TransferConfig | None = None, query: str | list[str] | None = None,
                 spans: list[list[tuple[int, int]]] | None = None,
                 sender_position_ids: torch.Tensor | None = None) -> TransferResult:
        """Map ``sender_cache`` (the sender's prefill of ``texts``, right-padded; best made by
        :func:`~heterofold_hub.transfer.sender.prefill_sender`) to a receiver cache.

        Give ``texts`` or a ``plan`` of them (:meth:`plan`; reusing one skips tokenization and alignment); a
        :class:`SenderPrefill` is checked against either. The result covers the receiver's tokens of the texts
        except the last; pass that last token (see :meth:`generate`) as the first input, as a cache needs at least
        one uncached token.

        ``config``: what the receiver recomputes after the map (:class:`TransferConfig`; default: nothing, the pure
        transfer). ``query``: the receiver's prompt, for a ``select`` that reads it (without it, that recompute
        waits for :meth:`generate`'s prompt); ``spans``: per context, the character spans ``select="oracle"``
        recomputes; ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not its cache columns.
        """
        config = TransferConfig() if config is None else config
        if not isinstance(config, TransferConfig):
            raise HeteroFoldError(f"config={config!r}; pass a TransferConfig, e.g. TransferConfig(recompute=0.05, "
                                  "select='statement').")
        if (texts is None) == (plan is None):
            raise HeteroFoldError("Pass the context texts or a plan of them (pipeline.plan(texts)), not both or neither.")
        prefill = sender_cache if isinstance(sender_cache, SenderPrefill) else None
        texts = None if texts is None else as_texts(texts)
        if prefill is not None:
            _check_rows(prefill, texts if texts is not None else plan.texts)
            check_sender(prefill, self.sender)
        plan = plan or self.plan(texts, sender_position_ids=sender_position_ids, prefill=prefill)
        layers = cache_layers(prefill.cache if prefill is not None else sender_cache)
        check_cache(layers, self.sender.spec, who="sender", model_id=self.sender.name)
        keys = layers[self.sender.spec.full_layers[0]][0]  # sliding-window layers may hold fewer positions
        batch, tokens = keys.shape[0], keys.shape[2]
        if (batch, tokens) != (plan.batch_size, plan.sender_tokens):
            raise PairMismatchError(
                f"The sender cache holds {batch} sequence(s) of {tokens} tokens, but {self.sender.name!r} tokenizes "
                f"the {plan.batch_size} text(s) given into at most {plan.sender_tokens} tokens. "
                "Pass the texts the sender prefilled, in the same order."
            )
        queries = None if query is None else _per_row(query, plan.batch_size, "query")
        if spans is not None:
            _check_spans(spans, plan.texts)
        dtype = self.receiver.model.dtype
        if not config.active:
            return self._result(map_cache(self.adapter, plan, layers, dtype=dtype), plan, layers, config,
                                wire=getattr(prefill, "wire_dtype", None))
        if queries is None and config.reads_prompt:
            pure = self._result(map_cache(self.adapter, plan, layers, dtype=dtype), plan, layers, config,
                                {**config.to_dict(), "share": 0.0, "deferred": True},
                                wire=getattr(prefill, "wire_dtype", None))
            pure.deferred = DeferredRecompute(self, sender_cache, plan, config, mapped=pure.cache)
            return pure
        return self.recomputed(sender_cache, plan, config, query=queries, spans=spans)

    def recomputed(self, sender_cache, plan: TransferPlan, config: TransferConfig, *,
                   query: list[str] | None = None, spans=None, mapped: list[LayerKV] | None = None) -> TransferResult:
        """The mapped cache with ``config``'s recompute applied; ``mapped``: layers already mapped of this plan
        (a pure transfer's), which the working cache starts from."""
        prefill = sender_cache if isinstance(sender_cache, SenderPrefill) else None
        layers = cache_layers(prefill.cache if prefill is not None else sender_cache)
        dtype = self.receiver.model.dtype
        surprisal = None if prefill is None else prefill.surprisal
        selector, inputs = selection_inputs(
            config, receiver=self.receiver, sender=self.sender, alignment=plan.alignment, sender_layers=layers,
            sender_mask=None if prefill is None else prefill.attention_mask, surprisal=surprisal, query=query,
            spans=spans, texts=plan.texts)
        choice = choose_before_map(selector, inputs, plan.alignment, config)
        needed = None if choice is None else window_rows(choice, plan.cache_tokens, self.receiver.spec.windows)
        working = map_every_position(self.adapter, plan, layers, dtype=dtype, needed=needed, mapped=mapped)
        working, choice = apply_recompute(config, selector, inputs, receiver=self.receiver, alignment=plan.alignment,
                                          working=working, choice=choice)
        cache = build_cache(working, windows=self.receiver.spec.windows, tokens=plan.cache_tokens)
        read = what_was_read(config, query, spans, surprisal)
        return self._result(cache, plan, layers, config, {**config.to_dict(), "share": choice.share}, read,
                            wire=getattr(prefill, "wire_dtype", None))

    def generate(self, result: TransferResult, *, prompt: str | list[str] | None = None, **kwargs) -> torch.Tensor:
        """``receiver.generate`` continuing from a transferred cache, the receiver first reading ``prompt`` itself
        (one per context, or one for all); returns only the new tokens."""
        check_result(result, self.receiver)
        return self.continue_from(self.receiver.model, result, prompt=prompt, tokenizer=self.receiver.tokenizer,
                                  **kwargs)

    @staticmethod
    def continue_from(model, result: TransferResult, *, prompt: str | list[str] | None = None, tokenizer=None,
                      **kwargs) -> torch.Tensor:
        """``model.generate`` from ``result``'s cache: the last token of each text is the first input, then the
        tokens of ``prompt`` (read natively by the receiver; needs ``tokenizer``). Rows whose prompts have the
        same token count share one ``generate`` call, so no padding ever sits between a context and its prompt;
        the new tokens of all rows come back right-padded with the pad id. Returns ``[B, new]``."""
        rows = result.input_ids.shape[0]
        texts = None if prompt is None else _per_row(prompt, rows, "prompt")
        if result.deferred is not None and texts is not None:  # without a prompt there is nothing to select by
            result = result.deferred.apply(texts)
        if texts is None:
            return _generate(model, view_of(result.cache), result.input_ids, result.attention_mask, **kwargs)
        if tokenizer is None:
            raise HeteroFoldError("generate(prompt=...) needs the receiver's tokenizer to read the prompt.")
        prompts = [torch.tensor(tokenizer(p, add_special_tokens=False)["input_ids"], dtype=torch.long) for p in texts]
        groups: dict[int, list[int]] = {}
        for row, ids in enumerate(prompts):
            groups.setdefault(len(ids), []).append(row)
        pad = kwargs.get("pad_token_id", tokenizer.pad_token_id or 0)
        outputs: dict[int, torch.Tensor] = {}
        for group in groups.values():
            cache = view_of(result.cache) if len(groups) == 1 else _rows_of(result.cache, group,
                                                                              result.input_ids.shape[1] - 1)
            ids = torch.cat([result.input_ids[group], torch.stack([prompts[r] for r in group])], 1)
            mask = torch.cat([result.attention_mask[group], torch.ones_like(ids[:, result.input_ids.shape[1]:])], 1)
            new = _generate(model, cache, ids, mask, **kwargs)
            outputs.update({row: new[i] for i, row in enumerate(group)})
        return padded([outputs[row] for row in range(rows)], pad, side="right", device=outputs[0].device)[0]


def check_result(result, receiver: Side) -> None:
    """Refuse a result made for another receiver (by its identity, else by its cache's layout): continuing from it
    would fail deep inside the model, or read another model's keys as this one's."""
    if not isinstance(result, TransferResult):
        raise HeteroFoldError(f"Expected a TransferResult (from transfer() or native_prefill()); got "
                              f"{type(result).__name__}.")
    made_for = None if result.identity is None else result.identity["receiver"]
    if made_for is not None and made_for != side_identity(receiver):
        raise PairMismatchError(f"This result is a cache for receiver {made_for['id']!r} (revision "
                                f"{made_for['revision']}), not for {receiver.name!r}; generate with the model that "
                                "made it, or transfer again for this receiver.")
    check_cache(cache_layers(result.cache), receiver.spec, who="result's", model_id=receiver.name)


def _generate(model, cache, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs) -> torch.Tensor:
    out = model.generate(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                         cache=cache, **kwargs)
    return out[:, input_ids.shape[1]:]


def _rows_of(cache, rows: list[int], tokens: int) -> DynamicCache:
    """A cache of some batch ``rows`` of ``cache`` (copies; the receiver's own layer classes kept)."""
    index = torch.tensor(rows)
    windows = [getattr(layer, "sliding_window", None) for layer in cache.layers]
    layers = [(k.index_select(0, index.to(k.device)), v.index_select(0, index.to(v.device)))
              for k, v in cache_layers(cache)]
    return build_cache(layers, windows=[None if w is None else w - 1 for w in windows], tokens=tokens)


def _check_rows(prefill: SenderPrefill, texts: list[str]) -> None:
    """Refuse a sender cache made of other texts than ``texts`` (another text, or the rows in another order), naming
    the first row that differs: its receiver would silently continue the wrong text."""
    if len(prefill.texts) != len(texts):
        raise PairMismatchError(f"The sender cache holds {len(prefill.texts)} texts but {len(texts)} were given; pass "
                                "the texts the sender prefilled, in the same order.")
    for row, (made, given) in enumerate(zip(prefill.texts, texts)):
        if made != given:
            where = f" (it is the cache of text {prefill.texts.index(given)})" if given in prefill.texts else ""
            raise PairMismatchError(
                f"Row {row} of the sender cache was computed from another text than text {row} given{where}: "
                f"{first_difference(made, given)}. Pass the texts the sender prefilled, in the same order.")


def first_difference(made: str, given: str) -> str:
    """Where two texts part: the character index and a few characters of each around it."""
    at = next((i for i, (a, b) in enumerate(zip(made, given)) if a != b), min(len(made), len(given)))
    start = max(at - 20, 0)
    return (f"they differ at character {at} of {len(made)} (cache) and {len(given)} (text): the cache has "
            f"{made[start:at + 20]!r} there, the text {given[start:at + 20]!r}")


def _per_row(text: str | list[str], rows: int, what: str) -> list[str]:
    """One ``what`` (``"prompt"``, ``"query"``) per row: a string is every row's; each non-empty text."""
    texts = as_texts(text, what)
    texts = texts * rows if isinstance(text, str) else texts
    if len(texts) != rows:
        plural = {"query": "queries"}.get(what, what + "s")
        raise HeteroFoldError(f"{len(texts)} {plural} for {rows} contexts; pass one {what} per context, or one string "
                              "for all.")
    return texts


def _check_spans(spans, texts: list[str]) -> None:
    """Refuse ``select="oracle"`` spans that would silently recompute nothing: one list per context, each span a
    ``(start, end)`` of character indices with ``0 <= start < end <= len(text)``."""
    if not isinstance(spans, (list, tuple)) or len(spans) != len(texts):
        raise HeteroFoldError(f"spans: pass one list of (start, end) character spans per context ({len(texts)}), "
                              f"e.g. spans=[[(0, 40)]]; got {spans!r:.80}.")
    for row, (row_spans, text) in enumerate(zip(spans, texts)):
        for span in row_spans:
            ok = (isinstance(span, (list, tuple)) and len(span) == 2
                  and all(isinstance(x, int) and not isinstance(x, bool) for x in span))
            if not ok or not 0 <= span[0] < span[1] <= len(text):
                raise HeteroFoldError(f"spans[{row}] holds {span!r}: a span is (start, end) with 0 <= start < end "
                                      f"<= {len(text)} (the length of context {row}); a reversed or out-of-range "
                                      "span would recompute nothing.")


def what_was_read(config: TransferConfig, query: list[str] | None, spans, surprisal) -> dict:
    """What a recompute's choice depended on beyond the plan, for the cache key: the prompt (a digest per row), the
    spans, and whether the sender's surprisal was there."""
    read = {}
    if config.reads_prompt and query is not None:
        read["query"] = [text_digest(q) for q in query]
    if config.select_name == "oracle" and spans is not None:
        read["spans"] = [[list(span) for span in row] for row in spans]
    if needs_surprisal(config.select) and config.recompute > 0:
        read["surprisal"] = surprisal is not None
    return read
