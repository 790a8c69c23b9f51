"""What a receiver cache is, in a form a serving cache can key on.

A mapped cache is an approximation of the receiver's own prefill: a cache keyed only on the text would serve it for
an exact prefix, or serve one adapter's mapping for another's (serving engines learned both the hard way). The
identity of a :class:`~heterofold_hub.transfer.pipeline.TransferResult` names how it was made (mapped or native),
by which adapter (repo@version and weights hash), between which models (ids and revisions), in which dtypes (the
receiver's, the map's, the sender cache's), with what recompute and what it read (the prompt, the spans, the
sender's surprisal), and from which receiver tokens (a digest per row); :func:`cache_key` hashes it.
"""

from __future__ import annotations

import hashlib
import json

import torch

from heterofold_hub.transfer.sender import token_digest


def adapter_digest(adapter) -> str:
    """The adapter's weights hash: the one its package recorded, else a hash of its tensors in memory."""
    recorded = getattr(adapter.config, "weights_sha256", None)
    if recorded:
        return recorded
    digest = hashlib.sha256()
    for name, tensor in sorted(adapter.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def side_identity(side) -> dict:
    return {"id": side.name, "revision": side.revision}


def row_digests(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[str]:
    """Per row, the digest of the receiver tokens the cache covers (all but the last, padding dropped)."""
    return [token_digest(ids[mask.bool()].tolist()) for ids, mask in zip(input_ids[:, :-1], attention_mask[:, :-1])]


def text_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def identity(*, kind: str, receiver, input_ids: torch.Tensor, attention_mask: torch.Tensor, sender=None,
             adapter: dict | None = None, recompute: dict | None = None, dtypes: dict | None = None,
             read: dict | None = None) -> dict:
    """The identity of a receiver cache (``kind``: ``"mapped"`` or ``"native"``; ``adapter``: its ``source`` and
    ``weights_sha256``; ``dtypes``: the receiver's, the map's and the sender cache's, each of which changes the
    cache; ``read``: what a recompute's choice read beyond the tokens, such as a digest of the prompt)."""
    return {
        "kind": kind,
        "adapter": adapter,
        "sender": None if sender is None else side_identity(sender),
        "receiver": side_identity(receiver),
        "dtypes": dtypes,
        "recompute": recompute,
        "read": read or None,
        "receiver_tokens": row_digests(input_ids, attention_mask),
    }


def cache_key(identity: dict, row: int | None = None) -> str:
    """``sha256:`` of the identity (of one ``row``'s tokens when given): equal only for caches made the same way from
    the same tokens; a mapped cache never shares a key with the receiver's own prefill."""
    fields = dict(identity)
    if row is not None:
        fields["receiver_tokens"] = [identity["receiver_tokens"][row]]
    return "sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
