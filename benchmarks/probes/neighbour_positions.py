"""What the map reads: does a receiver token need the sender positions around the one it draws on?

    .venv/bin/python benchmarks/probes/neighbour_positions.py [--direction s2g|g2s] [--json OUT]

Token alignment gives each receiver token the sender token that covers its last character (transfer/alignment.py).
The map diagnosis (map_diagnosis.py) found the loss concentrated where the two tokenizers cut the text differently:
receiver tokens that split a sender token are 8.5% of the rows into Gemma 3 and gain 0.072 recovered when made
native. This probe sizes what reading more around the aligned position would give, with closed-form KV Ridge maps
fitted and scored as ``sources_per_layer.py`` does (a lever that does not lift these is not worth a calibration run):

- ``prev`` / ``next``: every source layer is also read at the sender token before / after the aligned one (keys
  un-rotated at their own positions, as the aligned one's are);
- ``split``: every source layer is also read gated by whether the receiver token splits a sender token (draws on
  the same one as the receiver token before it): with ridge, a second map for those rows, shrunk toward the shared
  one.

Maps with 2 and 4 source layers (``best_correlated_layers``, as KV Ridge picks them) are fitted on the first 64
windows of ``bundled:wide`` and scored on the first 16 of ``bundled:unseen`` at 512 tokens, paired window by window.
The features of every view are collected once; each arm costs its fit.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.probes.layer_residual import print_scores, probe_windows  # noqa: E402
from benchmarks.probes.map_diagnosis import token_classes  # noqa: E402
from heterofold_hub.base_models.loading import Side  # noqa: E402
from heterofold_hub.evaluation.fidelity import evaluate  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.methods.affine import fit_affine  # noqa: E402
from heterofold_hub.methods.features import collect  # noqa: E402
from heterofold_hub.methods.kv_ridge import KVRidgeAdapter, best_correlated_layers  # noqa: E402
from heterofold_hub.methods.stats import ridge  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402
from heterofold_hub.transfer.reference import sender_features  # noqa: E402
from heterofold_hub.transfer.sender import prefill_sender  # noqa: E402

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
VIEWS = ("prev", "next", "split")
LAM = 0.01  # KV Ridge's default


def with_views(views: tuple[str, ...]):
    """A ``prepare_batch`` whose features hold, after the sender's ``L`` layers, ``L`` more per view in ``views``
    order: view ``i``'s copy of sender layer ``s`` is feature ``(i + 1) * L + s``, each ``[B, Tr, Hs*Ds]``. Given
    ``layers`` (feature indices), only those are made (None elsewhere; a view's layer needs its sender layer too)."""
    def prepare(windows, sender, receiver, *, layers: set[int] | None = None, **options):
        count = sender.spec.num_layers
        wanted = [None if layers is None else {s % count for s in layers if s // count == i}
                  for i in range(len(views) + 1)]
        own = None if layers is None else {s % count for s in layers}
        batch = prepare_batch(windows, sender, receiver, layers=own, **options)
        shifted = [v for v, w in zip(views, wanted[1:]) if v != "split" and w != set()]
        if shifted:  # the batch keeps no sender cache: prefill again (same texts, same cache)
            prefill = prefill_sender(sender, [w.context for w in windows])
            last = prefill.attention_mask.sum(1, keepdim=True) - 1
        extra = []
        for view, these in zip(views, wanted[1:]):
            if view == "split":
                gate = token_classes(batch.alignment)["splits a sender token"][..., None]
                extra += [None if kv is None or (these is not None and s not in these)
                          else tuple(x * gate.to(x.dtype) for x in kv) for s, kv in enumerate(batch.features)]
            elif view in shifted:
                index = (batch.alignment.sender_index + (-1 if view == "prev" else 1)).clamp(min=0).minimum(last)
                extra += sender_features(prefill.layers, replace(batch.alignment, sender_index=index), sender.rope,
                                         these)
            else:
                extra += [None] * count
        return replace(batch, features=batch.features + extra)
    return prepare


def read_also(plan: list[list[int]], views: tuple[str, ...], read: tuple[str, ...], layers: int) -> list[list[int]]:
    """``plan`` (sender layers per receiver layer) with each layer also read through every view of ``read``."""
    offsets = [(views.index(v) + 1) * layers for v in read]
    return [sources + [o + s for o in offsets for s in sources] for sources in plan]


def viewed_calibration(sender, receiver, windows, prepare):
    """``collect`` over ``windows`` with every view, its sender spec widened so an adapter's config accepts the
    views' feature indices as sender layers."""
    calib = collect(sender, receiver, windows, batch_size=2, prepare=prepare)
    spec, copies = calib.sender_spec, len(VIEWS) + 1
    wide = replace(spec, num_layers=spec.num_layers * copies,
                   layer_types=None if spec.layer_types is None else spec.layer_types * copies)
    return replace(calib, sender_spec=wide)


def ridge_with_views(calib, sources: int, read: tuple[str, ...]) -> KVRidgeAdapter:
    """KV Ridge from the ``sources`` best-correlated sender layers per receiver layer, each also read through the
    views ``read`` (``calib`` from :func:`viewed_calibration`)."""
    layers = calib.sender_spec.num_layers // (len(VIEWS) + 1)
    plan = best_correlated_layers(calib, sources, LAM, candidates=list(range(layers)))
    return fit_affine(KVRidgeAdapter, calib, "kv-ridge", read_also(plan, VIEWS, read, layers),
                      lambda x, y: ridge(x, y, LAM), lam=LAM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=("s2g", "g2s"), default="s2g")
    parser.add_argument("--calib-windows", type=int, default=64)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ids = (SMOL, GEMMA) if args.direction == "s2g" else (GEMMA, SMOL)
    sender, receiver = (Side.load(i) for i in ids)
    train, held_out, _ = probe_windows(receiver, args.calib_windows, args.windows)
    prepare = with_views(VIEWS)
    calib = viewed_calibration(sender, receiver, train, prepare)
    arms = {}
    for k in (2, 4):
        for read in ((), ("prev",), ("prev", "next"), ("split",), ("prev", "split")):
            if k == 4 and read in (("prev", "next"), ("split",)):
                continue  # the 4-source arms test only what the 2-source ones single out
            name = f"kv-ridge x{k}" + "".join(f" +{v}" for v in read)
            arms[name] = ridge_with_views(calib, k, read)
            print(f"fitted {name}", flush=True)
    del calib
    result = evaluate(sender, receiver, arms, held_out, batch_size=2, data="bundled:unseen", prepare=prepare)
    print_scores(result)
    if args.json:
        result.pop("per_window")
        write_json_atomic(args.json, {"command": f"benchmarks/probes/neighbour_positions.py --direction "
                                                 f"{args.direction}", **result})


if __name__ == "__main__":
    main()
