"""Selective native recompute: the receiver recomputes a few context positions of a mapped cache itself.

A mapped cache keeps a context's gist but not its facts: exact copying needs the receiver's own keys and values
over the tokens that state them (see docs/design). After mapping, the receiver runs a forward over only the chosen
positions, at their own positions, attending causally to the mapped cache everywhere else (each layer's sliding
window respected), and their K/V replace the mapped rows. Recomputing every position gives native prefill back;
recomputing none leaves the transfer as it was.

One forward covers all chosen positions at once (a batch of positions, never token by token): at each layer a
chosen position attends to the mapped rows of the positions not chosen and to the fresh rows of the chosen ones
at or before it, so the result is exactly what a native prefill computes for them given the mapped rest. The
forward runs on a working cache in which every layer keeps every position: a chosen position older than a sliding
layer's window attends there to mapped rows that the receiver's final cache then drops.

``repair_layers=k`` first runs the receiver's first ``k`` layers natively over every token (DroidSpeak's lever;
costs ``k / L`` of a prefill), where the map is weakest.

``mapped_key_scale=s`` multiplies the keys of the rows still mapped after the recompute by ``s`` (free: one
multiply per mapped key). Every attention score on a mapped row is scaled by ``s``, a softer softmax over mapped
rows only: with ``s < 1`` they draw less attention away from the receiver's own rows (the recomputed facts, its
prefix, its prompt). On the real pair it lets a recomputed fact be copied that the receiver otherwise misses, and it
lowers what the receiver writes next (docs/results/probes.md, "Mapped keys scaled").
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer import padding
from heterofold_hub.transfer.kvcache import LayerKV, build_cache
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.grouped_attention import grouped_attention
from heterofold_hub.transfer.selection import Choice, SelectionInputs, Selector, choose, get_selector
from heterofold_hub.transfer.sender import query_attention


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a transformers causal LM (``model.model.layers`` for Llama, Qwen2, Mistral, Gemma)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise HeteroFoldError(f"Recompute needs a decoder with `model.model.layers`; {type(model).__name__} has "
                              "none. Use recompute=0 (the pure transfer) with this receiver.")
    return layers


def layer_types(model, num_layers: int) -> list[str]:
    """Each layer's attention type (``full_attention`` unless the config says ``layer_types``)."""
    return list(getattr(model.config, "layer_types", None) or ["full_attention"] * num_layers)


def _allowed(query_pos: torch.Tensor, key_pos: torch.Tensor, key_ok: torch.Tensor, window: int | None) -> torch.Tensor:
    """``[B, 1, n, T]`` bool: query at ``query_pos`` ``[B, n]`` may attend key at ``key_pos`` ``[B, T]`` (causal by
    position, within ``window`` positions when given, ``key_ok`` ``[B, T]`` usable keys)."""
    q, k = query_pos[:, :, None], key_pos[:, None, :]
    ok = (k <= q) & key_ok[:, None, :]
    if window is not None:
        ok &= k > q - window
    return ok[:, None]


def recompute_masks(model, positions: torch.Tensor, usable: torch.Tensor, chosen: torch.Tensor,
                    valid: torch.Tensor, windows: dict[str, int | None]):
    """The attention mask argument for a forward over ``chosen`` positions on a working cache of ``T`` columns.

    ``positions`` ``[B, T]`` the cache's receiver positions, ``usable`` ``[B, T]`` mapped rows that may be read
    (real tokens, not chosen: a chosen row's mapped K/V is replaced by its fresh one), ``chosen`` ``[B, n]`` column
    indices, ``valid`` ``[B, n]`` which of them are real (rows choose different counts). Keys are the ``T`` cached
    columns then the ``n`` fresh ones. Returns one mask, or a dict per layer type for models that mix them."""
    query_pos = positions.gather(1, chosen)
    key_pos = torch.cat([positions, query_pos], 1)
    key_ok = torch.cat([usable, valid], 1)
    masks = {}
    for kind, window in windows.items():
        mask = _allowed(query_pos, key_pos, key_ok, window)
        self_col = torch.eye(chosen.shape[1], dtype=torch.bool, device=mask.device)  # an unused query reads itself,
        mask[:, 0, :, positions.shape[1]:] |= self_col & ~valid[:, :, None]       # so no row of its mask is empty
        if model.config._attn_implementation == "eager":  # eager adds the mask to the scores
            mask = torch.zeros(mask.shape, dtype=model.dtype, device=mask.device).masked_fill_(
                ~mask, torch.finfo(model.dtype).min)
        masks[kind] = mask
    return masks if len(masks) > 1 else next(iter(masks.values()))


@torch.no_grad()
def recompute(model, layers: list[LayerKV], ids: torch.Tensor, attention_mask: torch.Tensor,
              chosen: torch.Tensor, valid: torch.Tensor, *, windows: list[int | None]) -> list[LayerKV]:
    """Rows ``chosen`` of every layer of ``layers`` recomputed natively, written into ``layers`` (returned).

    ``layers``: the working cache, every position of every layer (``[B, Hr, T, Dr]``), except that a sliding-window
    layer may hold only its last columns (a composed cache's history keeps its window: it must still hold every
    column a chosen position's window reads); ``ids``/``attention_mask`` ``[B, T]`` the receiver tokens it covers
    (left-padded); ``chosen`` ``[B, n]`` column indices to recompute,
    ``valid`` ``[B, n]`` which are real; ``windows``: per layer, its sliding window in positions (``KVSpec.window
    + 1``, the positions a query sees, itself included) or None.

    Two things a prefill needs are skipped, since only the chosen rows' K/V are wanted: a sliding layer reads only
    the columns some chosen row's window covers (the rest are masked anyway, and attending over them would cost as
    much as a full layer), and the forward stops once the last layer has stored its K/V (that layer's attention and
    MLP, the final norm and the LM head would only make logits nobody reads)."""
    if chosen.shape[1] == 0:
        return layers
    device = model.device
    positions = padding.positions(attention_mask).to(device)
    chosen, valid = chosen.to(device), valid.to(device)
    usable = attention_mask.bool().to(device)
    batch = torch.arange(chosen.shape[0], device=device)[:, None].expand_as(chosen)
    usable[batch[valid], chosen[valid]] = False  # a chosen row's mapped K/V is replaced, never read
    kinds = layer_types(model, len(layers))
    kind_windows = {kind: windows[kinds.index(kind)] for kind in dict.fromkeys(kinds)}
    masks = recompute_masks(model, positions, usable, chosen, valid, kind_windows)
    masks = masks if isinstance(masks, dict) else {kinds[0]: masks}
    columns = attention_mask.shape[1]
    held = [columns - keys.shape[2] for keys, _ in layers]  # per layer, the first column it holds
    read = {kind: _read_columns(mask, columns) if kind_windows[kind] is not None else None
            for kind, mask in masks.items()}
    for layer, (kind, first) in enumerate(zip(kinds, held)):
        if first and (read[kind] is None or (read[kind].numel() and int(read[kind].min()) < first)):
            raise HeteroFoldError(f"internal: recompute layer {layer} holds columns from {first}, but its chosen "
                                  "positions read earlier ones")
    masks = {kind: mask if read[kind] is None else torch.cat([mask[..., :columns][..., read[kind]],
                                                             mask[..., columns:]], -1) for kind, mask in masks.items()}
    working = build_cache([kv if read[kind] is None else tuple(x[:, :, read[kind] - first] for x in kv)
                           for kv, kind, first in zip(layers, kinds, held)])
    _stop_after_layer(working, len(layers) - 1)
    pad = getattr(model.config, "pad_token_id", None) or 0
    inputs = ids.to(device).gather(1, chosen).masked_fill(~valid, pad)
    try:
        with grouped_attention(model):  # a masked forward would otherwise copy each layer's K/V per query head
            model(input_ids=inputs, position_ids=positions.gather(1, chosen),
                  attention_mask=masks if len(masks) > 1 else next(iter(masks.values())), cache=working,
                  use_cache=True)
    except _Stop:
        pass
    n, out = chosen.shape[1], []
    for (keys, values), layer, first in zip(layers, working.layers, held):
        merged = []
        for old, new in ((keys, layer.keys), (values, layer.values)):
            fresh = new[:, :, new.shape[2] - n:].transpose(1, 2)  # [B, n, Hr, Dr]: what this forward appended
            old.transpose(1, 2)[batch[valid], chosen[valid] - first] = fresh[valid].to(old.dtype)  # in place: ours
            merged.append(old)
        out.append(tuple(merged))
    return out


def _read_columns(mask: torch.Tensor, columns: int) -> torch.Tensor:
    """Indices of the first ``columns`` key columns that some query of ``mask`` ``[B, 1, n, columns + n]`` may read
    (bool, or eager's additive float mask)."""
    cached = mask[:, 0, :, :columns]
    readable = cached if cached.dtype == torch.bool else cached == 0
    return readable.any(1).any(0).nonzero().flatten()


def _stop_after_layer(cache: DynamicCache, last: int) -> None:
    """Make ``cache`` end the forward (raise :class:`_Stop`) once layer ``last`` has stored its K/V."""
    update = cache.update

    def update_then_stop(key_states, value_states, layer_idx, *args, **kwargs):
        stored = update(key_states, value_states, layer_idx, *args, **kwargs)
        if layer_idx == last:
            raise _Stop
        return stored

    cache.update = update_then_stop


class _Stop(Exception):
    """Raised by a hook to end a forward once the layers wanted have run."""


@torch.no_grad()
def native_first_layers(model, ids: torch.Tensor, attention_mask: torch.Tensor, count: int) -> list[LayerKV]:
    """The receiver's own K/V ``[B, Hr, T, Dr]`` of its first ``count`` layers over ``ids`` ``[B, T]`` (left-padded),
    every position kept: a forward that stops after layer ``count - 1``."""
    layers = decoder_layers(model)
    if not 0 < count <= len(layers):
        raise HeteroFoldError(f"repair_layers={count}; the receiver has layers 1..{len(layers)} to repair.")

    def stop(*_):
        raise _Stop

    cache = DynamicCache()
    handle = layers[count - 1].register_forward_hook(stop)
    device = model.device
    try:
        model(input_ids=ids.to(device), attention_mask=attention_mask.to(device),
              position_ids=padding.positions(attention_mask).to(device), cache=cache, use_cache=True)
    except _Stop:
        pass
    finally:
        handle.remove()
    return [(layer.keys, layer.values) for layer in cache.layers[:count]]


def choose_before_map(selector: Selector, inputs: SelectionInputs, alignment, config: TransferConfig) -> Choice | None:
    """The positions ``config`` recomputes, chosen before the map so that sliding-window layers map only the windows
    the recompute reads (:func:`window_rows`); None when ``selector`` reads the mapped first layer and so chooses
    after the map (:func:`apply_recompute`)."""
    return None if "first_layer" in selector.needs else _choice(selector, inputs, alignment, config)


def _choice(selector: Selector, inputs: SelectionInputs, alignment, config: TransferConfig) -> Choice:
    rows = alignment.receiver_ids.shape[0]
    fraction = None if selector.name == "oracle" else config.recompute
    if fraction == 0:
        return Choice(torch.zeros((rows, 0), dtype=torch.long), torch.zeros((rows, 0), dtype=torch.bool))
    return choose(selector.scores(inputs), alignment.mapped_mask, fraction, positive_only=not selector.fills_share)


@torch.no_grad()
def apply_recompute(config: TransferConfig, selector: Selector, inputs: SelectionInputs, *, receiver, alignment,
                    working: list[LayerKV], choice: Choice | None) -> tuple[list[LayerKV], Choice]:
    """``working`` (the mapped cache, every position, ``[B, Hr, Tr, Dr]`` per layer over ``alignment``'s receiver
    tokens; sliding layers at least at the rows :func:`window_rows` of ``choice`` names) with ``config`` applied:
    first layers repaired, the chosen positions recomputed (``choice``, or chosen now when it is None), the keys of
    the rows left mapped scaled. Returns the working cache and the choice.

    The caller maps (:func:`~heterofold_hub.transfer.fast.map_every_position`) between
    :func:`choose_before_map` and this, so this module never calls back into the pipeline."""
    first = max(config.repair_layers, 1 if "first_layer" in selector.needs else 0)
    if first:
        native = native_first_layers(receiver.model, alignment.receiver_ids, alignment.attention_mask, first)
        inputs.native_first, inputs.mapped_first = native, working[:first]
        working = [(k.to(working[0][0].dtype), v.to(working[0][0].dtype)) for k, v in native] + working[first:]
    choice = choice or _choice(selector, inputs, alignment, config)
    windows = [None if w is None else w + 1 for w in receiver.spec.windows]
    working = recompute(receiver.model, working, alignment.receiver_ids, alignment.attention_mask, choice.index,
                        choice.valid, windows=windows)
    if config.mapped_key_scale != 1:
        scale_mapped_keys(working, still_mapped(alignment.mapped_mask, choice), config.mapped_key_scale)
    return working, choice


def selection_inputs(settings: TransferConfig, *, receiver, sender, alignment, sender_layers: list[LayerKV],
                     sender_mask: torch.Tensor | None, surprisal: torch.Tensor | None, query: list[str] | None,
                     spans: list[list[tuple[int, int]]] | None, texts: list[str] | None) -> tuple[Selector, SelectionInputs]:
    """``settings``' selector and what it reads over ``alignment``'s receiver tokens ``[B, Tr]``: the sender's
    ``surprisal`` ``[B, Ts]`` aligned, the prompt's receiver ids, the sender's attention from the prompt (when the
    selector reads it and the sender is loaded), the oracle's spans; refusing what a selector needs and lacks."""
    selector = get_selector(settings.select)
    columns = alignment.receiver_ids.shape[1]
    aligned = lambda x: x.gather(1, alignment.sender_index.clamp(max=x.shape[1] - 1))  # noqa: E731 [B, Ts] -> [B, Tr]
    inputs = SelectionInputs(receiver_ids=alignment.receiver_ids, mapped_mask=alignment.mapped_mask,
                             tokenizer=receiver.tokenizer, surprisal=None if surprisal is None else aligned(surprisal))
    if "query" in selector.needs:
        if query is None:
            raise HeteroFoldError(f"select={selector.name!r} needs the receiver's prompt at transfer time (query=...); "
                                  "pass it, or choose a query-agnostic select such as 'content'.")
        from heterofold_hub.base_models.loading import encode  # noqa: PLC0415 (loading pulls the model stack)

        inputs.query_ids = [encode(receiver.tokenizer, q, add_special_tokens=False)[0] for q in query]
        loaded = sender is not None and sender.model is not None and sender_mask is not None
        if "sender_attention" in selector.needs and (selector.name == "attention" or loaded):
            if sender_mask is None:
                raise HeteroFoldError("select='attention' reads the sender's attention: pass a cache made by "
                                      "prefill_sender (it keeps the sender's padding).")
            inputs.query_attention = aligned(query_attention(sender, sender_layers, sender_mask, query))
    if "spans" in selector.needs:
        if spans is None or texts is None:
            raise HeteroFoldError("select='oracle' needs the character spans to recompute (spans=[[(start, end)], ...], "
                                  "one list per context) and the context texts.")
        inputs.spans, inputs.offsets = spans, receiver_offsets(receiver, texts, columns)
    return selector, inputs


def still_mapped(mapped_mask: torch.Tensor, choice: Choice) -> torch.Tensor:
    """``[B, Tr]`` bool: the mapped rows ``choice`` did not recompute."""
    left = mapped_mask.clone()
    batch = torch.arange(choice.index.shape[0])[:, None].expand_as(choice.index)
    left[batch[choice.valid], choice.index[choice.valid].cpu()] = False
    return left


def scale_mapped_keys(layers: list[LayerKV], rows: torch.Tensor, scale: float) -> None:
    """Multiply, in place, the keys ``[B, Hr, Tr, Dr]`` of every layer at ``rows`` ``[B, Tr]`` by ``scale`` (keys
    are stored after RoPE, a rotation, so scaling them scales each score ``q . k`` on those rows)."""
    if not layers:
        return
    keys = layers[0][0]
    factor = torch.where(rows.to(keys.device), scale, 1.0).to(keys.dtype)[:, None, :, None]  # once for every layer
    for keys, _ in layers:
        keys.mul_(factor[:, :, factor.shape[2] - keys.shape[2]:])  # a layer holding only its last columns


def window_rows(choice: Choice, columns: int, windows: list[int | None]) -> torch.Tensor | None:
    """``[B, columns]`` bool: the rows a sliding-window layer of the working cache must hold, its last ``window``
    rows (what the final cache keeps) and the ``window + 1`` up to each chosen column (what the recompute attends
    to there); None when no layer slides. ``windows``: per layer, the positions a sliding layer keeps
    (:attr:`KVSpec.windows`)."""
    window = max((w for w in windows if w is not None), default=None)
    if window is None:
        return None
    rows = choice.index.shape[0]
    edges = torch.zeros((rows, columns + 1), dtype=torch.int32)
    edges[:, max(columns - window, 0)] += 1  # the final cache's window
    index, valid = choice.index, choice.valid.int()
    edges.scatter_add_(1, (index - window).clamp(min=0), valid)
    edges.scatter_add_(1, index + 1, -valid)
    return edges.cumsum(1)[:, :columns] > 0


def receiver_offsets(receiver, texts: list[str], columns: int) -> torch.Tensor:
    """``[B, columns, 2]`` character offsets of each text's receiver tokens but the last, left-padded like a plan
    (padding and special tokens get empty spans)."""
    from heterofold_hub.base_models.loading import encode  # noqa: PLC0415 (loading pulls the model stack)

    out = torch.zeros((len(texts), columns, 2), dtype=torch.long)
    for row, text in enumerate(texts):
        offsets = encode(receiver.tokenizer, text)[1][:-1]
        out[row, columns - len(offsets):] = offsets
    return out
