"""A composed adapter from the registry: sender -> pivot -> receiver, each leg the package given or the registry's
best, checked against the models in use. What ``hf-fold compose`` and ``hf-fold train --init composed`` start from."""

from __future__ import annotations

from pathlib import Path

from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.save_and_load import check_pair
from heterofold_hub.data.texts import trained_on_eval_text
from heterofold_hub.errors import HeteroFoldError, UsageError
from heterofold_hub.hub.registry import PIVOT_FAITHFUL_METHODS, PairEnd
from heterofold_hub.hub.resolve import fetch, pair_end
from heterofold_hub.methods.composed import compose, training_data


def leg(folder: Path | None, sender, receiver, *, registry, hub_dir=None, token=None, flag: str,
        prefer: frozenset = frozenset()):
    """``(adapter, ref)`` for one leg between two PairEnds: the package ``folder``, else the registry's best of a
    ``prefer`` method when one is registered, else its best."""
    if folder is not None:
        return load_adapter(folder), None
    for method in [*sorted(prefer), None]:  # None: any method, the registry's usual preference
        try:
            entry, version = registry.find(sender, receiver, method=method)
            break
        except HeteroFoldError as miss:
            missed = miss
    else:
        raise HeteroFoldError(f"No adapter {sender.id} -> {receiver.id} to compose:\n{missed}\nOr pass a package "
                              f"with {flag} DIR.") from None
    fetched = fetch(registry, entry, version, hub_dir=hub_dir, token=token)
    return load_adapter(fetched), {"repo_id": entry.repo_id, "version": version.version}


def compose_path(sender, receiver, *, via: str, registry, first: Path | None = None, second: Path | None = None,
                 hub_dir=None, token=None, rematch_on=None):
    """The composed adapter ``sender`` -> ``via`` -> ``receiver`` (Sides; ``via`` a model id): each leg is the
    package given (``first``/``second``) or the registry's best (for the first leg, a least-squares one if
    registered), checked against the models in use; with ``rematch_on`` (calibration features sender -> via)
    re-matched at the pivot."""
    a2p, a2p_ref = leg(first, pair_end(sender), PairEnd(via), registry=registry, hub_dir=hub_dir, token=token,
                       flag="--first", prefer=PIVOT_FAITHFUL_METHODS)  # the second leg reads the pivot's own K/V
    c = a2p.config  # the second leg must start from the very pivot the first one ends at
    if c.receiver != via:
        raise UsageError(f"--first {first} maps into {c.receiver}, not the --pivot {via!r}; pass "
                         f"--pivot {c.receiver} or a package that maps {sender.name} into {via}.")
    pivot = PairEnd(via, c.receiver_revision, c.receiver_tokenizer, c.receiver_spec)
    p2b, p2b_ref = leg(second, pivot, pair_end(receiver), registry=registry, hub_dir=hub_dir, token=token,
                       flag="--second")
    composed = compose(a2p, p2b, first_ref=a2p_ref, second_ref=p2b_ref, rematch_on=rematch_on)
    check_pair(composed, sender, receiver, source=f"the composition via {via}")
    return composed


def held_out_problem(adapter, heldout: str) -> str | None:
    """Why ``heldout`` cannot score ``adapter`` (a text it or a parent was fitted on shares passages with it)."""
    seen = [d for d in training_data(adapter.config) if trained_on_eval_text(d, heldout)]
    if not seen:
        return None
    return (f"A parent was trained on {seen[0]!r}, which shares text with --heldout {heldout!r}; held-out text must "
            "never be trained on. Pass other --heldout text.")
