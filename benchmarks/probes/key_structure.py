"""Gemma 3's keys have a structure the affine map does not keep: does putting it back help?

    .venv/bin/python benchmarks/probes/key_structure.py --steps 150 --json benchmarks/results/real/probe-s2g-key-structure.json

Gemma 3 normalises each key head before RoPE (``k_norm``, an RMSNorm): a native un-rotated key is ``g * x`` with
``g = 1 + k_norm.weight`` (``[head_dim]``, per layer) and ``x`` of RMS 1 over the head. So a native key is exactly
0 where ``g`` is 0, and ``k / g`` has RMS close to 1 elsewhere. The probe first measures how far the registered
SmolLM2 -> Gemma 3 map's keys are from that (on the first held-out windows, beside the native keys), then scores the
map with its keys put back on the structure at transfer time (free: a few operations per key):

- ``zero-gain dims``: the key's dimensions where ``g`` is 0 set to 0 (the native key is 0 there);
- ``rms``: ``k = g * u / rms(u)`` with ``u = k / g`` over the dimensions where ``g`` is not 0: the key Gemma 3's own
  ``k_norm`` would make of ``u``;

each without training, and with ``--steps``, each calibrated through its projection (the affine maps trained, as
``layer_residual.py`` trains them: the same windows, order, teacher and schedule) beside the same steps without one.
Everything is scored on the same held-out windows of ``bundled:unseen``, with paired differences.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.probes.layer_residual import print_scores, train, training_batches  # noqa: E402
from heterofold_hub.adapter.base import PairAdapter  # noqa: E402
from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.data.windows import make_windows  # noqa: E402
from heterofold_hub.evaluation.fidelity import evaluate  # noqa: E402
from heterofold_hub.io import write_json_atomic  # noqa: E402
from heterofold_hub.methods.features import receiver_features  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.trainers.unfolded import UnfoldedAffine  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402

SENDER, RECEIVER = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
PROJECTIONS = ("zero-gain dims", "rms")


def key_gains(receiver) -> list[torch.Tensor]:
    """Per receiver layer, ``g = 1 + k_norm.weight`` ``[head_dim]``: Gemma 3's RMSNorm scales by one plus its weight."""
    return [1 + layer.self_attn.k_norm.weight.detach().float() for layer in receiver.model.model.layers]


def project(keys: torch.Tensor, gain: torch.Tensor, how: str) -> torch.Tensor:
    """``keys`` ``[..., heads * head_dim]`` (un-rotated) put back on the structure ``how`` names (module docstring)."""
    shape = keys.shape
    k = keys.reshape(*shape[:-1], -1, len(gain))
    live = gain != 0
    if how == "zero-gain dims":
        return (k * live).reshape(shape)
    u = torch.where(live, k / torch.where(live, gain, 1), 0)
    return (gain * u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6)).reshape(shape)


class KeysProjected(PairAdapter):
    """``inner``'s map with its keys projected (:func:`project`) in every layer."""

    method = "heterofold"

    def __init__(self, inner: PairAdapter, gains: list[torch.Tensor], how: str):
        super().__init__(inner.config)
        self.inner, self.gains, self.how = inner, gains, how

    def map_layer(self, layer, keys, values):
        k, v = self.inner.map_layer(layer, keys, values)
        return project(k, self.gains[layer].to(k), self.how), v


@torch.no_grad()
def structure(adapter: PairAdapter, receiver, batch, gains) -> list[dict]:
    """Per receiver layer, over the mapped rows: ``k / g``'s RMS over the dimensions where ``g`` is not 0 (native
    and mapped, mean and 5th/95th percentiles), the mapped keys' mean absolute value where ``g`` is 0, and the mapped
    key's norm over the native one's and their cosine (means over rows and heads)."""
    keep = batch.alignment.mapped_mask
    native = receiver_features(receiver, batch)
    rows = []
    for r, gain in enumerate(gains):
        mapped, _ = adapter.map_layer(r, *adapter.layer_inputs(batch.features, r))
        k, m = (x[keep].reshape(-1, len(gain)) for x in (native[r][0], mapped))
        live = gain != 0
        rms = lambda x: (x[:, live] / gain[live]).pow(2).sum(-1).div(len(gain)).sqrt()  # noqa: E731
        quantiles = lambda x: [round(float(q), 3) for q in x.quantile(torch.tensor([0.05, 0.5, 0.95]))]  # noqa: E731
        rows.append({"layer": r, "native_rms": quantiles(rms(k)), "mapped_rms": quantiles(rms(m)),
                     "zero_gain_dims": int((~live).sum()),
                     "mapped_at_zero_gain": float(m[:, ~live].abs().mean()) if (~live).any() else 0.0,
                     "norm_ratio": float((m.norm(dim=-1) / k.norm(dim=-1)).mean()),
                     "cosine": float(torch.nn.functional.cosine_similarity(m, k, dim=-1).mean())})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0, help="calibration steps through each projection (0: none)")
    parser.add_argument("--projections", default=",".join(PROJECTIONS))
    parser.add_argument("--train-windows", type=int, default=96)
    parser.add_argument("--windows", type=int, default=48, help="held-out windows of bundled:unseen at 512 tokens")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = HeteroFoldModel.from_pretrained(SENDER, RECEIVER, load_sender=True)
    sender, receiver, registered = model.sender, model.receiver, model.adapter
    gains = key_gains(receiver)
    cut = dict(context_tokens=512, continuation_tokens=64)
    train_texts, unseen = read_texts("bundled:wide"), read_texts("bundled:unseen")
    assert not set(train_texts) & set(unseen), "a held-out text is among the training texts"
    held_out = make_windows(unseen, receiver, max_windows=args.windows, **cut)
    measured = structure(registered, receiver, prepare_batch(held_out[:4], sender, receiver), gains)
    for row in measured:
        print(row, flush=True)
    projections = args.projections.split(",")
    arms: dict[str, PairAdapter] = {"registered": registered}
    arms.update({f"{how}, untrained": KeysProjected(registered, gains, how) for how in projections})
    training = {}
    if args.steps:
        train_windows = make_windows(train_texts, receiver, max_windows=args.train_windows, **cut)
        batches, order = training_batches(train_windows, sender, receiver, [registered], args.steps)
        teachers: dict = {}
        trained = {"affine, trained": UnfoldedAffine.from_affine(registered, lora_rank=0)}
        trained.update({f"{how}, trained through it": KeysProjected(UnfoldedAffine.from_affine(registered, lora_rank=0),
                                                                    gains, how) for how in projections})
        for name, adapter in trained.items():
            training[name] = train(adapter, batches, teachers, receiver, order, lr=args.lr, residual_lr=0.0, name=name)
        arms.update(trained)
        del batches, teachers
    result = evaluate(sender, receiver, arms, held_out, batch_size=2, data="bundled:unseen")
    print_scores(result)
    if args.json:
        command = " ".join(["benchmarks/probes/key_structure.py", *sys.argv[1:]])
        write_json_atomic(args.json, {"command": command, "adapter": model.pipeline.source,
                                      "args": vars(args) | {"json": str(args.json)}, "structure": measured,
                                      "training": training, **result})


if __name__ == "__main__":
    main()
