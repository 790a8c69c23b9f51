"""Transfer a sender's cache for some texts into a receiver cache the receiver can ``generate`` from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .alignment import align_batch
from .errors import HeteroFoldError, PairMismatchError
from .kvcache import build_cache, cache_layers, check_cache
from .methods.base import PairAdapter
from .models import Side, encode
from .transfer import assemble, native_prefix_kv, sender_features


@dataclass
class TransferResult:
    """A receiver cache over ``input_ids`` ``[B, Tr]`` (left-padded, ``attention_mask`` ``[B, Tr]``).

    ``prefilled`` is True when the receiver computed the cache itself (a fallback), not a transfer."""

    cache: DynamicCache
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prefilled: bool = False


class TransferPipeline:
    """A fitted adapter between a sender (tokenizer + KV layout) and a loaded, frozen receiver."""

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

    def transfer(self, sender_cache, texts: str | list[str], *, sender_position_ids: torch.Tensor | None = None) -> TransferResult:
        """Map ``sender_cache`` (the sender's prefill of ``texts``, right-padded) to a receiver cache.

        The result covers the receiver's tokens of ``texts`` except the last; pass that last token
        (see :meth:`generate`) as the first input, as a cache needs at least one uncached token.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        layers = cache_layers(sender_cache)
        check_cache(layers, self.sender.spec, who="sender", model_id=self.sender.name)
        sender_enc = [encode(self.sender.tokenizer, t) for t in texts]
        receiver_enc = [encode(self.receiver.tokenizer, t) for t in texts]
        longest = max(len(ids) for ids, _ in sender_enc)
        if layers[0][0].shape[2] != longest or layers[0][0].shape[0] != len(texts):
            raise PairMismatchError(
                f"The sender cache holds {layers[0][0].shape[0]} sequence(s) of {layers[0][0].shape[2]} tokens, but "
                f"{self.sender.name!r} tokenizes the {len(texts)} text(s) given into at most {longest} tokens. "
                "Pass the texts the sender prefilled, in the same order."
            )
        limit = self.receiver.spec.max_positions
        if max(len(ids) for ids, _ in receiver_enc) > limit:
            raise HeteroFoldError(
                f"A context is {max(len(ids) for ids, _ in receiver_enc)} receiver tokens long but "
                f"{self.receiver.name!r} allows {limit} positions. Shorten the context."
            )
        alignment = align_batch(
            [off for _, off in sender_enc],
            [off[:-1] for _, off in receiver_enc],
            [ids[:-1] for ids, _ in receiver_enc],
            [len(t) for t in texts],
            min_native=self.adapter.config.min_native,
        )
        used = {s for sources in self.adapter.config.layer_sources for s in sources}
        with torch.no_grad():
            feats = sender_features(layers, alignment, self.sender.rope, used, sender_position_ids)
            native = native_prefix_kv(self.receiver.model, alignment)
            kv = assemble(self.adapter, feats, alignment, self.receiver.rope, native, dtype=self.receiver.model.dtype)
        last = torch.stack([ids[-1] for ids, _ in receiver_enc])[:, None]
        return TransferResult(
            cache=build_cache(kv),
            input_ids=torch.cat([alignment.receiver_ids, last], 1),
            attention_mask=torch.cat([alignment.attention_mask, torch.ones_like(last)], 1),
        )

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
