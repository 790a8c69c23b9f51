"""Transfer a sender's cache for some texts into a receiver cache the receiver can ``generate`` from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from heterofold_hub.errors import HeteroFoldError, PairMismatchError
from heterofold_hub.transfer.kvcache import cache_layers, check_cache
from heterofold_hub.methods.base import PairAdapter
from heterofold_hub.base_models.loading import Side, cache_only, encode
from heterofold_hub.transfer.plan import PlanCache, TransferPlan, build_plan
from heterofold_hub.transfer.fast import LayerStream, map_cache


@dataclass
class TransferResult:
    """A receiver cache over ``input_ids`` ``[B, Tr]`` (left-padded, ``attention_mask`` ``[B, Tr]``).

    ``prefilled`` is True when the receiver computed the cache itself (a fallback), not a transfer."""

    cache: DynamicCache
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prefilled: bool = False


@torch.no_grad()
def native_prefill(receiver: Side, texts: str | list[str]) -> TransferResult:
    """The receiver's own cache of ``texts`` (all but each last token), left-padded exactly as a transfer gives
    it, so code can treat both alike (``prefilled=True``)."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    encoded = [encode(receiver.tokenizer, t)[0] for t in texts]
    width = max(len(ids) for ids in encoded)
    ids = torch.full((len(texts), width), receiver.tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((len(texts), width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, width - len(seq):], mask[row, width - len(seq):] = seq, 1
    model = receiver.model
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers left-padded rows
    out = model(input_ids=ids[:, :-1].to(model.device), attention_mask=mask[:, :-1].to(model.device),
                position_ids=positions[:, :-1].to(model.device), use_cache=True, **cache_only(model))
    return TransferResult(cache=out.cache, input_ids=ids, attention_mask=mask, prefilled=True)


class TransferPipeline:
    """A fitted adapter between a sender (tokenizer + KV layout) and a loaded, frozen receiver.

    ``plan_cache`` keeps what every plan of this pair shares (RoPE tables, the receiver's native-prefix K/V), so
    only the first plan pays for them."""

    def __init__(self, adapter: PairAdapter, sender: Side, receiver: Side):
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

    def plan(self, texts: str | list[str], *, sender_position_ids: torch.Tensor | None = None) -> TransferPlan:
        """Tokenize and align ``texts`` once; pass the plan to :meth:`transfer` to map any sender cache of them.

        ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not its cache columns."""
        return build_plan(self.sender, self.receiver, texts, min_native=self.adapter.config.min_native,
                          sender_position_ids=sender_position_ids, cache=self.plan_cache)

    def stream(self, plan: TransferPlan) -> LayerStream:
        """A :class:`LayerStream` that maps sender layers into this receiver's cache as they arrive."""
        return LayerStream(self.adapter, plan, dtype=self.receiver.model.dtype)

    def transfer(self, sender_cache, texts: str | list[str] | None = None, *, plan: TransferPlan | None = None,
                 sender_position_ids: torch.Tensor | None = None) -> TransferResult:
        """Map ``sender_cache`` (the sender's prefill of ``texts``, right-padded) to a receiver cache.

        Give ``texts`` or a ``plan`` of them (:meth:`plan`; reusing one skips tokenization and alignment). The
        result covers the receiver's tokens of the texts except the last; pass that last token (see
        :meth:`generate`) as the first input, as a cache needs at least one uncached token.
        """
        if (texts is None) == (plan is None):
            raise HeteroFoldError("Pass the context texts or a plan of them (pipeline.plan(texts)), not both or neither.")
        plan = plan or self.plan(texts, sender_position_ids=sender_position_ids)
        layers = cache_layers(sender_cache)
        check_cache(layers, self.sender.spec, who="sender", model_id=self.sender.name)
        keys = layers[self.sender.spec.full_layers[0]][0]  # sliding-window layers may hold fewer positions
        batch, tokens = keys.shape[0], keys.shape[2]
        if (batch, tokens) != (plan.batch_size, plan.sender_tokens):
            raise PairMismatchError(
                f"The sender cache holds {batch} sequence(s) of {tokens} tokens, but {self.sender.name!r} tokenizes "
                f"the {plan.batch_size} text(s) given into at most {plan.sender_tokens} tokens. "
                "Pass the texts the sender prefilled, in the same order."
            )
        cache = map_cache(self.adapter, plan, layers, dtype=self.receiver.model.dtype)
        return TransferResult(cache=cache, input_ids=plan.input_ids, attention_mask=plan.attention_mask)

    def generate(self, result: TransferResult, **kwargs) -> torch.Tensor:
        """``receiver.generate`` continuing from a transferred cache; returns only the new tokens."""
        return self.continue_from(self.receiver.model, result, **kwargs)

    @staticmethod
    def continue_from(model, result: TransferResult, **kwargs) -> torch.Tensor:
        """``model.generate`` from ``result``'s cache: the last token of each text is the first input."""
        out = model.generate(
            input_ids=result.input_ids.to(model.device),
            attention_mask=result.attention_mask.to(model.device),
            cache=result.cache,
            **kwargs,
        )
        return out[:, result.input_ids.shape[1] :]
