"""A receiver cache made of segments: native text the receiver reads itself, and mapped text from senders.

Agents talk through chat templates and turns. A receiver's cache for one exchange is a run of segments at
consecutive receiver positions, each one of:

- :class:`Native`: text the receiver computes itself (template scaffolding, its system prompt, its own notes, the
  question);
- :class:`Mapped`: text a sender prefilled, mapped through that pair's adapter instead of prefilled again.

    result = compose(pipeline, [Native(system), Mapped(prefill), Native(question)])
    result = append(pipeline, result, Mapped(reply_prefill))          # the next turn: earlier rows untouched

A mapped segment is mapped exactly as :meth:`TransferPipeline.transfer` maps a one-document hand-off (its plan, its
adapter, the receiver's native prefix as attention sink), its keys rotated by the receiver's RoPE at the positions
its rows take in the composed cache; a segment after the first drops its native prefix rows, and every segment's
last token is read natively by the receiver (the last one of all stays uncached: it is ``generate``'s first input,
as for any result). A
segment's cost is its own length: earlier rows are neither mapped nor copied again (sliding-window layers keep only
their window, as the receiver's own prefill does).

The sender never saw the segments before its own (the receiver's system prompt, other agents' turns): that, not
the positions, is the approximation a mapped segment adds beyond a one-document transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.identity import row_digests, side_identity
from heterofold_hub.transfer.kvcache import LayerKV, build_cache, cache_layers, check_cache, view_of
from heterofold_hub.transfer.sender import SenderPrefill, as_texts, check_sender


@dataclass(frozen=True)
class Native:
    """Text the receiver reads itself (``text``: template scaffolding, a system prompt, notes, a question).

    ``special_tokens``: whether the receiver's tokenizer adds its own special tokens (BOS) when this is the first
    segment; False for text that writes them itself (a rendered chat template starts with ``<bos>`` or
    ``<|im_start|>``)."""

    text: str
    special_tokens: bool = True

    def __post_init__(self):
        as_texts(self.text, "native segment")


@dataclass(frozen=True)
class Mapped:
    """A sender's prefill of one text (``prefill_sender`` of a single text), mapped into the receiver.

    ``via``: the pair that maps it, a ``HeteroFoldModel`` or ``TransferPipeline`` into the same receiver (another
    sender's: several senders in one cache); None: the composing model's own. ``config``: what the receiver
    recomputes after mapping it (None: the composing call's)."""

    prefill: SenderPrefill
    via: object = None
    config: TransferConfig | None = None

    def __post_init__(self):
        if not isinstance(self.prefill, SenderPrefill):
            raise HeteroFoldError(f"Mapped(prefill=...) takes a SenderPrefill (model.prefill_sender(text)); got "
                                  f"{type(self.prefill).__name__}.")
        if len(self.prefill.texts) != 1:
            raise HeteroFoldError(f"A mapped segment is one text; this prefill holds {len(self.prefill.texts)}. Prefill "
                                  "each text on its own (prefill_sender(text)).")

    @property
    def text(self) -> str:
        return self.prefill.texts[0]


def chat(receiver, prefill: SenderPrefill, *, role: str = "user", system: str | None = None,
         history: list[dict] | None = None, chat_template: str | None = None, before: str = "", after: str = "",
         via=None) -> list:
    """The segments of ``prefill``'s text handed over as one message of the receiver's chat template (a ``role``
    turn after an optional ``system`` prompt and earlier ``history`` turns, then the generation prompt): the
    template's scaffolding native, the message mapped (see :func:`~heterofold_hub.transfer.templates.chat_segments`;
    ``before`` / ``after``: native text in the same turn around it, such as a question). ``via``: the pair that maps it (see :class:`Mapped`)."""
    from heterofold_hub.transfer.templates import chat_segments  # noqa: PLC0415

    pieces = chat_segments(receiver, prefill.texts[0], role=role, system=system, history=history,
                           chat_template=chat_template, before=before, after=after)
    return [Mapped(prefill, via=via) if kind == "content" else Native(text, special_tokens=False)
            for kind, text in pieces]


def compose(pipeline, segments, *, config: TransferConfig | None = None, query: str | None = None):
    """A receiver cache of ``segments`` (a list of :class:`Native` and :class:`Mapped`), in order, at consecutive
    receiver positions: a :class:`~heterofold_hub.transfer.pipeline.TransferResult` ``generate`` continues from.

    ``pipeline``: the :class:`~heterofold_hub.transfer.pipeline.TransferPipeline` whose receiver holds the cache
    (and whose adapter maps a :class:`Mapped` segment that names none); ``config``: the default recompute of every
    mapped segment (pure transfer when None); ``query``: the receiver's prompt, for a ``select`` that reads it."""
    segments = _checked(segments, pipeline)
    result = None
    for segment in segments:
        result = _extend(pipeline, result, segment, config=config, query=query)
    return result


def append(pipeline, result, *segments, config: TransferConfig | None = None, query: str | None = None):
    """``result`` continued by ``segments`` (its rows are neither mapped nor copied again; ``result`` itself is not
    changed): the next turn of a conversation."""
    if result is None or getattr(result, "segments", None) is None:
        raise HeteroFoldError("append() continues a result of compose() (or of append()); start a conversation with "
                              "compose(pipeline, [...]).")
    if result.identity["receiver"] != side_identity(pipeline.receiver):
        made_for = result.identity["receiver"]
        raise PairMismatchError(f"This result is a cache for receiver {made_for['id']!r}, not for "
                                f"{pipeline.receiver.name!r}: append to it with a pipeline into that receiver.")
    for segment in _checked(list(segments), pipeline):
        result = _extend(pipeline, result, segment, config=config, query=query)
    return result


def _checked(segments, pipeline) -> list:
    segments = list(segments)
    if not segments:
        raise HeteroFoldError("No segments given; pass a list of Native(text) and Mapped(prefill) segments.")
    for i, segment in enumerate(segments):
        if not isinstance(segment, (Native, Mapped)):
            raise HeteroFoldError(f"Segment {i} is a {type(segment).__name__}; pass Native(text) or Mapped(prefill).")
        mapper = _mapper(pipeline, segment) if isinstance(segment, Mapped) else None
        if mapper is not None and side_identity(mapper.receiver) != side_identity(pipeline.receiver):
            raise PairMismatchError(f"Segment {i} is mapped by an adapter into {mapper.receiver.name!r}, but this cache "
                                    f"is {pipeline.receiver.name!r}'s; use that pair's adapter into this receiver.")
    return segments


def _mapper(pipeline, segment: Mapped):
    via = pipeline if segment.via is None else segment.via
    via = getattr(via, "pipeline", via)  # a HeteroFoldModel maps through its pipeline
    if via is None or not hasattr(via, "adapter_identity"):
        raise HeteroFoldError(f"Mapped(via={segment.via!r}): pass the HeteroFoldModel (or TransferPipeline) of the "
                              "sender's pair into this receiver; a model that fell back to prefill has no adapter.")
    return via


@torch.no_grad()
def _extend(pipeline, result, segment, *, config, query):
    """``result`` (None: an empty cache) followed by ``segment``."""
    receiver = pipeline.receiver
    if result is None:
        if isinstance(segment, Mapped):  # the first segment: exactly the one-document hand-off
            mapper = _mapper(pipeline, segment)
            made = mapper.transfer(segment.prefill, segment.prefill.texts, config=segment.config or config,
                                   query=query)
            if made.deferred is not None:
                raise HeteroFoldError(_QUERY_NEEDED)
            return _with_segments(made, [made.identity | {"segment": "mapped"}], receiver)
        ids = encode(receiver.tokenizer, segment.text, add_special_tokens=segment.special_tokens)[0]
        if len(ids) < 2:
            raise HeteroFoldError(f"The first segment {segment.text!r} is {len(ids)} receiver token: a cache needs one "
                                  "token to hold and one to continue from; start with a longer native text.")
        layers, tokens = _read_natively(receiver, None, ids[:-1], start=0)
        return _result(receiver, layers, tokens, ids, [_native_identity(ids)])
    ids = result.input_ids[0]
    if isinstance(segment, Native):  # the receiver reads the pending last token and this text but its last
        new = encode(receiver.tokenizer, segment.text, add_special_tokens=False)[0]
        layers, tokens = _read_natively(receiver, result.cache, torch.cat([ids[-1:], new[:-1]]), start=len(ids) - 1)
        part = _native_identity(new)
    else:
        layers, tokens = _read_natively(receiver, result.cache, ids[-1:], start=len(ids) - 1)
        new, mapped, part, choice = _map_segment(pipeline, segment, start=tokens, config=config, query=query)
        layers = [(torch.cat([k, mk], 2), torch.cat([v, mv], 2)) for (k, v), (mk, mv) in zip(layers, mapped)]
        if choice is not None:
            _recompute_in_place(receiver, layers, torch.cat([ids, new[:-1]]), tokens, choice,
                                segment.config or config)
        tokens += mapped[0][0].shape[2]
    return _result(receiver, layers, tokens, torch.cat([ids, new]), result.segments + [part])


_QUERY_NEEDED = ("A mapped segment's recompute reads the receiver's prompt, which a composed cache cannot wait for: "
                 "pass query= (the question the receiver will be asked), or a select that does not read it.")


def _read_natively(receiver: Side, cache, ids: torch.Tensor, *, start: int) -> tuple[list[LayerKV], int]:
    """The receiver's cache after it reads ``ids`` ``[T]`` at positions ``start..``, on top of ``cache`` (None: an
    empty cache); returns its layers (sliding ones their window) and the positions it covers."""
    if len(ids) == 0:
        return cache_layers(cache) if cache is not None else [], start
    model = receiver.model
    out = model(input_ids=ids[None].to(model.device), use_cache=True,
                position_ids=torch.arange(start, start + len(ids), device=model.device)[None],
                cache=None if cache is None else view_of(cache), **cache_only(model))
    return cache_layers(out.cache), start + len(ids)


def _map_segment(pipeline, segment: Mapped, *, start: int, config, query):
    """``segment`` mapped as a one-document hand-off whose receiver positions start ``start`` later than its first
    mapped token's, without its native prefix: returns its receiver ids ``[m + 1]`` (the last one uncached), per layer
    ``[1, Hr, m, Dr]``, its identity, and the positions its recompute chooses (:class:`Choice` over its ``m`` rows,
    or None)."""
    from heterofold_hub.transfer.fast import map_every_position  # noqa: PLC0415 (the model stack)
    from heterofold_hub.transfer.pipeline import _check_rows, what_was_read  # noqa: PLC0415
    from heterofold_hub.transfer.recompute import choose_before_map, selection_inputs  # noqa: PLC0415
    from heterofold_hub.transfer.selection import Choice  # noqa: PLC0415

    mapper = _mapper(pipeline, segment)
    chosen = segment.config or config or TransferConfig()
    plan = mapper.plan(segment.prefill.texts, mapped_start=start)
    native = plan.alignment.native_prefix
    _check_rows(segment.prefill, plan.texts)
    check_sender(segment.prefill, mapper.sender)
    layers = cache_layers(segment.prefill.cache)
    check_cache(layers, mapper.sender.spec, who="sender", model_id=mapper.sender.name)
    mapped = map_every_position(mapper.adapter, plan, layers, dtype=pipeline.receiver.model.dtype)
    part = {"segment": "mapped", "adapter": mapper.adapter_identity, "sender": side_identity(mapper.sender),
            "config": chosen.to_dict(), "sender_tokens": segment.prefill.digests(),
            "dtypes": {"map": str(mapper.adapter.compute_dtype), "sender_cache": str(layers[0][0].dtype),
                       "sender_wire": segment.prefill.wire_dtype}}
    choice = None
    if chosen.active:
        if chosen.repair_layers or chosen.select_name in ("deviation", "oracle"):
            raise HeteroFoldError(f"A mapped segment after the first recomputes positions chosen by a select; "
                                  f"repair_layers and select={chosen.select_name!r} need the whole context from its "
                                  "start: choose another select (statement, statement-tail, tail, content, ...).")
        queries = None if query is None else [query]
        if queries is None and chosen.reads_prompt:
            raise HeteroFoldError(_QUERY_NEEDED)
        selector, inputs = selection_inputs(chosen, receiver=pipeline.receiver, sender=mapper.sender,
                                            alignment=plan.alignment, sender_layers=layers,
                                            sender_mask=segment.prefill.attention_mask,
                                            surprisal=segment.prefill.surprisal, query=queries, spans=None,
                                            texts=plan.texts)
        made = choose_before_map(selector, inputs, plan.alignment, chosen)  # never None: deviation is refused
        choice = Choice(made.index - native, made.valid, made.share)  # over the segment's own rows
        part |= {"share": made.share, "read": what_was_read(chosen, queries, None, segment.prefill.surprisal)}
    return plan.input_ids[0, native:], [(k[:, :, native:], v[:, :, native:]) for k, v in mapped], part, choice


def _recompute_in_place(receiver: Side, layers: list[LayerKV], ids: torch.Tensor, start: int, choice, config) -> None:
    """Recompute ``choice``'s rows of the segment that starts at column ``start`` of ``layers`` (the whole cache but
    the last token, sliding layers their window: ``ids`` ``[T]``), attending to everything before them; then scale
    the keys of the segment's rows left mapped when ``config`` says so."""
    from heterofold_hub.transfer.recompute import recompute, scale_mapped_keys  # noqa: PLC0415

    mask = torch.ones((1, len(ids)), dtype=torch.long)
    windows = [None if w is None else w + 1 for w in receiver.spec.windows]
    recompute(receiver.model, layers, ids[None], mask, choice.index + start, choice.valid, windows=windows)
    if config.mapped_key_scale != 1:
        left = torch.zeros((1, len(ids)), dtype=torch.bool)
        left[0, start:] = True
        left[0, (choice.index + start)[choice.valid]] = False
        scale_mapped_keys(layers, left, config.mapped_key_scale)


def _native_identity(ids: torch.Tensor) -> dict:
    return {"segment": "native", "tokens": len(ids)}


def _result(receiver: Side, layers: list[LayerKV], tokens: int, ids: torch.Tensor, parts: list[dict]):
    from heterofold_hub.transfer.pipeline import TransferResult  # noqa: PLC0415

    ids = ids[None]
    mask = torch.ones_like(ids)
    if tokens != ids.shape[1] - 1:
        raise HeteroFoldError(f"internal: a composed cache covers {tokens} positions for {ids.shape[1]} tokens")
    cache = build_cache(layers, windows=receiver.spec.windows, tokens=tokens)
    made = {"kind": "segments", "receiver": side_identity(receiver),
            "dtypes": {"receiver": str(receiver.model.dtype)}, "segments": parts,
            "receiver_tokens": row_digests(ids, mask)}
    return TransferResult(cache=cache, input_ids=ids, attention_mask=mask, identity=made, segments=parts)


def _with_segments(result, parts: list[dict], receiver: Side):
    """A one-document transfer as the first segment of a composed cache (the same cache, bit for bit)."""
    if result.input_ids.shape[0] != 1:
        raise HeteroFoldError("A composed cache holds one conversation (batch of one).")
    result.segments = parts
    result.identity = {"kind": "segments", "receiver": side_identity(receiver),
                       "dtypes": result.identity.get("dtypes"), "segments": parts,
                       "receiver_tokens": result.identity["receiver_tokens"]}
    return result
