"""The names of the recompute strategies and what each reads, in plain Python.

Code that must not import torch reads them here: the registry (whose ``recommended`` blocks name a strategy), the
CLI's read-only commands, and :class:`~heterofold_hub.transfer.config.TransferConfig`. The strategies themselves are
in :mod:`heterofold_hub.transfer.selection`, one class per name.
"""

from __future__ import annotations

# Each select name and what it reads beyond the plan: "surprisal" (the sender's, when its prefill kept it),
# "query" (the receiver's prompt), "sender_attention" (the sender's attention from the prompt, when its model is
# loaded), "first_layer" (the receiver's own first layer over every token), "spans" (character spans to recompute).
SELECT_READS: dict[str, tuple[str, ...]] = {
    "tail": (),
    "chunk-start": (),
    "content": ("surprisal",),
    "digits": ("surprisal",),
    "content-tail": ("surprisal",),
    "deviation": ("first_layer",),
    "keywords": ("query",),
    "statement": ("query",),
    "statement-tail": ("query",),
    "query": ("query", "sender_attention"),
    "attention": ("query", "sender_attention"),
    "oracle": ("spans",),
}


def select_name(select) -> str | None:
    """The registered name of ``select``: a name, or a selector object (its class's ``name``)."""
    return select if select is None or isinstance(select, str) else getattr(type(select), "name", None)


def reads(select, signal: str) -> bool:
    """Whether the strategy ``select`` (a name or a selector) reads ``signal`` (see :data:`SELECT_READS`)."""
    return signal in SELECT_READS.get(select_name(select), ())


def needs_query(select) -> bool:
    """Whether ``select`` reads the receiver's prompt (``query=``, or the prompt ``generate`` reads)."""
    return reads(select, "query")


def needs_surprisal(select) -> bool:
    """Whether ``select`` reads the sender's surprisal (so a prefill should keep it: ``surprisal=True``)."""
    return reads(select, "surprisal")
