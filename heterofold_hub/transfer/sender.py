"""The sender side of a hand-off: prefill texts into exactly the cache ``transfer`` expects.

    prefill = prefill_sender(sender, ["context one", "context two"])   # right-padded, every position kept
    result = pipeline.transfer(prefill, prefill.texts)

The cache keeps every position of every layer (a sliding-window sender such as Gemma 3 still attends within its
window), the texts are tokenized as the plan tokenizes them (special prefix included, e.g. SmolLM2's
``<|endoftext|>``), and the token ids of each row are kept beside the cache, so a transfer can check that the cache
belongs to the texts it is given. ``surprisal=True`` also returns each token's surprisal under the sender (a cheap
signal of content worth recomputing: names, numbers, identifiers).

A prefill travels as one safetensors file (:mod:`heterofold_hub.transfer.prefill_file`): ``prefill.save_pretrained(
path)`` on the sender's side, ``SenderPrefill.from_pretrained(path, sender=side)`` on the receiver's; the texts, the
model that made it and digests of both go with the cache, so ``transfer`` refuses another text as it does in-process.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache

from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.errors import AlignmentError, HeteroFoldError, PairMismatchError
from heterofold_hub.transfer import prefill_file
from heterofold_hub.transfer.kvcache import LayerKV, cache_layers, full_cache
from heterofold_hub.transfer.padding import padded

SURPRISAL_CHUNK = 256  # positions per LM-head chunk: a 262k-vocabulary head over 2048 positions would be GBs


@dataclass
class SenderPrefill:
    """A sender's cache of ``texts`` and what it was computed from.

    - ``cache``: the sender's ``DynamicCache``, layers ``[B, Hs, Ts, Ds]``, right-padded;
    - ``input_ids`` / ``attention_mask`` ``[B, Ts]``: the sender tokens of each row (right-padded);
    - ``offsets``: per row, character offsets ``[T_b, 2]`` of its tokens;
    - ``surprisal`` ``[B, Ts]`` (or None): ``-log p(token | tokens before)`` in nats under the sender (0 at a row's
      first token and at padding);
    - ``sender`` (or None): the model that made it, ``{"id", "revision", "spec"}`` (set by :func:`prefill_sender`);
      a transfer from another sender is refused;
    - ``wire_dtype`` (or None): set by :meth:`from_pretrained` when the K/V travelled in a narrower dtype than they
      have now (``"bfloat16"``): the values were rounded to it, and a transfer's identity records it.
    """

    cache: DynamicCache
    texts: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    offsets: list[torch.Tensor]
    surprisal: torch.Tensor | None = None
    sender: dict | None = None
    wire_dtype: str | None = None

    def save_pretrained(self, path: str | os.PathLike, *, dtype: torch.dtype | None = None) -> Path:
        """Write this prefill as one safetensors file, atomically: ``path`` ending in ``.safetensors`` is the file,
        any other path a folder that receives ``sender_prefill.safetensors``. ``dtype``: the K/V dtype on the wire
        (``torch.bfloat16`` halves a float32 cache; :meth:`from_pretrained` casts back). Returns the file written."""
        return prefill_file.save(self, path, dtype=dtype)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, sender: Side | None = None) -> "SenderPrefill":
        """The prefill :meth:`save_pretrained` wrote at ``path`` (the file, or its folder), K/V in the dtype they had
        when saved. ``sender``: the side the receiver maps from; a file made by another model raises
        :class:`~heterofold_hub.errors.PairMismatchError`. A truncated, corrupted or unknown-version file raises
        :class:`~heterofold_hub.errors.IntegrityError` naming the file and the fix."""
        return prefill_file.load(cls, path, sender=sender)

    @property
    def layers(self) -> list[LayerKV]:
        return cache_layers(self.cache)

    def row_ids(self, row: int) -> list[int]:
        return self.input_ids[row, : int(self.attention_mask[row].sum())].tolist()

    def tokens(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per row, the sender token ids ``[T_b]`` and character offsets ``[T_b, 2]`` this cache was computed from
        (what a transfer plans from instead of tokenizing the text again)."""
        return [(self.input_ids[row, : len(offsets)], offsets) for row, offsets in enumerate(self.offsets)]

    def digests(self) -> list[str]:
        """Per row, the sha256 of its sender token ids (what a cache of that row was computed from)."""
        return [token_digest(self.row_ids(row)) for row in range(len(self.texts))]


def token_digest(ids: list[int]) -> str:
    """A stable digest of a token id sequence (``sha256:`` of the ids as little-endian int64)."""
    return "sha256:" + hashlib.sha256(torch.tensor(ids, dtype=torch.int64).numpy().tobytes()).hexdigest()


def as_texts(texts: str | list[str], what: str = "context") -> list[str]:
    """``texts`` as a list of non-empty strings (one string is one ``what``: a context, a query, a prompt)."""
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, (list, tuple)):
        texts = list(texts)
    else:
        raise AlignmentError(f"The {what} given is a {type(texts).__name__} ({_short(texts)}); pass a string, or a "
                             "list of strings (one per context).")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise AlignmentError(f"{what.capitalize()} {i} is a {type(text).__name__} ({_short(text)}), not a "
                                 f"string; pass the {what} as text.")
    if not texts or not all(texts):
        raise AlignmentError(f"A {what} covers no characters (it is empty, or none was given): pass a non-empty "
                             "string or a list of non-empty strings.")
    return texts


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def sender_inputs(sender: Side, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Right-padded sender ids and mask ``[B, Ts]`` and per-row offsets, checked against the sender's positions."""
    encoded = [encode(sender.tokenizer, text) for text in texts]
    width = max(len(ids) for ids, _ in encoded)
    if width > sender.spec.max_positions:
        raise HeteroFoldError(
            f"A context is {width} sender tokens long but {sender.name!r} allows {sender.spec.max_positions} "
            "positions. Pass a shorter context."
        )
    ids, mask = padded([tokens for tokens, _ in encoded], sender.tokenizer.pad_token_id or 0, side="right")
    return ids, mask, [offsets for _, offsets in encoded]


@torch.no_grad()
def prefill_sender(sender: Side, texts: str | list[str], *, surprisal: bool = False) -> SenderPrefill:
    """Run the frozen sender over ``texts`` (right-padded) into a cache that keeps every position."""
    if sender.model is None:
        raise HeteroFoldError(f"The sender model {sender.name!r} is not loaded; load it (Side.load, or "
                              "HeteroFoldModel.from_pretrained(..., load_sender=True)) to prefill with it.")
    texts = as_texts(texts)
    ids, mask, offsets = sender_inputs(sender, texts)
    model, device = sender.model, sender.model.device
    out, hidden = _forward(model, ids.to(device), mask.to(device), catch_hidden=surprisal)
    scores = surprisal_from_hidden(model, hidden, ids.to(device), mask.to(device)).cpu() if surprisal else None
    return SenderPrefill(cache=out.cache, texts=texts, input_ids=ids, attention_mask=mask, offsets=offsets,
                         surprisal=scores, sender=sender_record(sender))


def sender_record(side: Side) -> dict:
    """What a prefill records of the model that made it: ``{"id", "revision", "spec"}``."""
    return {"id": side.name, "revision": side.revision, "spec": side.spec.to_dict()}


def check_sender(prefill: SenderPrefill, side: Side) -> None:
    """Refuse a prefill made by another model than ``side`` (when it records its maker): its KV layout must be
    ``side``'s, and its revision too when both are known (a GGUF's sha256, a Hub commit), else its id."""
    if prefill.sender is None:
        return
    problem = prefill_file.sender_problem(prefill.sender, side)
    if problem is not None:
        raise PairMismatchError(f"This sender prefill is not a cache of the pair's sender: {problem}. Prefill with the "
                                "sender this adapter maps from, or load the pair of the model that made it.")


def _forward(model, ids: torch.Tensor, mask: torch.Tensor, *, catch_hidden: bool):
    """The sender's prefill forward ``(output, final hidden states [B, T, E] or None)``: the hidden states are caught
    where the LM head reads them (after the final norm), so the head need not run over every position here."""
    final = []
    hook = final_norm(model).register_forward_hook(lambda _m, _i, out: final.append(out)) if catch_hidden else None
    try:
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, cache=full_cache(), **cache_only(model))
    finally:
        if hook is not None:
            hook.remove()
    return out, (final[0] if catch_hidden else None)


def last_hidden_states(sender: Side, prefill: SenderPrefill) -> torch.Tensor:
    """``[B, T, E]``: the sender's final hidden states over ``prefill``'s tokens (a second forward), for timing or
    recomputing what :func:`surprisal_from_hidden` reads."""
    device = sender.model.device
    return _forward(sender.model, prefill.input_ids.to(device), prefill.attention_mask.to(device), catch_hidden=True)[1]


def final_norm(model) -> torch.nn.Module:
    norm = getattr(getattr(model, "model", None), "norm", None)
    if norm is None:
        raise HeteroFoldError(f"surprisal=True needs the final norm at `model.model.norm`; {type(model).__name__} "
                              "has none. Prefill without surprisal.")
    return norm


def surprisal_from_hidden(model, hidden: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` nats: ``-log p(ids[t] | ids[:t])`` from the final hidden states ``[B, T, E]``, in chunks of
    positions so the full-vocabulary logits never exist at once."""
    head, cap = model.get_output_embeddings(), getattr(model.config, "final_logit_softcapping", None)
    out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    for start in range(0, ids.shape[1] - 1, SURPRISAL_CHUNK):
        stop = min(start + SURPRISAL_CHUNK, ids.shape[1] - 1)
        logits = head(hidden[:, start:stop]).float()
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        picked = logits.log_softmax(-1).gather(-1, ids[:, start + 1 : stop + 1, None]).squeeze(-1)
        out[:, start + 1 : stop + 1] = -picked
    return out * mask


@torch.no_grad()
def query_attention(sender: Side, layers: list[LayerKV], attention_mask: torch.Tensor,
                    queries: list[str]) -> torch.Tensor:
    """``[B, Ts]``: how much the sender, reading each row's ``queries[row]`` after its cached context, attends to
    each context position (mean over layers, heads and query tokens; eager attention for this one short forward).

    ``layers`` ``[B, Hs, Ts, Ds]`` the sender's cache (right-padded, ``attention_mask`` ``[B, Ts]``); it is read,
    not extended."""
    from heterofold_hub.transfer.kvcache import build_cache  # noqa: PLC0415 (kvcache imports nothing of ours)

    if sender.model is None:
        raise HeteroFoldError(f"select='query' reads the sender's attention, but the sender model {sender.name!r} is "
                              "not loaded; load it (from_pretrained(..., load_sender=True)) or choose another select.")
    if len(queries) != attention_mask.shape[0]:
        raise HeteroFoldError(f"{len(queries)} queries for {attention_mask.shape[0]} contexts; pass one query per context.")
    model, device = sender.model, sender.model.device
    encoded = [encode(sender.tokenizer, q, add_special_tokens=False)[0] for q in queries]
    ids, query_mask = padded(encoded, sender.tokenizer.pad_token_id or 0, side="right")
    positions = attention_mask.sum(1, keepdim=True) + torch.arange(ids.shape[1])[None]
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")  # the only implementation that returns attention weights
    try:
        out = model(input_ids=ids.to(device), attention_mask=torch.cat([attention_mask, query_mask], 1).to(device),
                    position_ids=positions.to(device), cache=build_cache(layers), use_cache=True,
                    output_attentions=True, **cache_only(model))
    finally:
        model.set_attn_implementation(previous)
    context = attention_mask.shape[1]
    weights = torch.stack([a[..., :context].float().mean(1) for a in out.attentions]).mean(0)  # [B, q, Ts]
    weights = (weights * query_mask[:, :, None].to(weights)).sum(1) / query_mask.sum(1, keepdim=True).to(weights)
    return weights.cpu() * attention_mask
