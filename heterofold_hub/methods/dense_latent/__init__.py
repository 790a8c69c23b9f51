"""Dense Latent (arXiv 2606.13594): a learned dense (non-linear) transform of the sender cache.

Trained in two phases on calibration data: reconstruct the receiver's K/V (MSE), then the receiver's
next-token loss through the mapped cache. Being an MLP it cannot fold into one affine map, so each
layer costs two matmuls and a GELU at transfer time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from heterofold_hub.adapter.base import PairAdapter, register_method
from heterofold_hub.adapter.config import MethodOptions
from heterofold_hub.adapter.save_and_load import non_finite
from heterofold_hub.errors import TrainingError
from heterofold_hub.methods.affine import config_for
from heterofold_hub.progress import progress_bar
from heterofold_hub.transfer.alignment import layers_by_depth, source_candidates
from heterofold_hub.transfer.forward import transferred_logits


@dataclass
class DenseLatentOptions(MethodOptions):
    """Budget of the two phases (``mse_steps`` on ``tokens_per_step`` calibration positions each, then
    ``nll_steps`` batches through the receiver), Adam's ``lr``, the MLP's ``hidden`` width, and its sources."""

    hidden: int = 256
    mse_steps: int = 300
    nll_steps: int = 40
    lr: float = 2e-3
    tokens_per_step: int = 4096
    sources_per_layer: int = 2
    sender_layers: str = "all"


@register_method("dense-latent")
class DenseLatentAdapter(PairAdapter):
    """Per receiver layer and for K and V: ``y = mean_y + scale_y * (gelu(xn @ W1 + b1) @ W2 + b2)`` where
    ``xn`` is ``x`` standardised with calibration statistics. Weights ``W1`` ``[layers, in, hidden]``,
    ``W2`` ``[layers, hidden, out]``."""

    def __init__(self, config):
        super().__init__(config)
        layers, fin, fout = len(config.layer_sources), config.in_features, config.out_features
        hidden = config.extra.get("hidden", 256)
        for kind in "kv":
            self.register_buffer(f"{kind}_in_mean", torch.zeros(layers, fin))
            self.register_buffer(f"{kind}_in_scale", torch.ones(layers, fin))
            self.register_buffer(f"{kind}_out_mean", torch.zeros(layers, fout))
            self.register_buffer(f"{kind}_out_scale", torch.ones(layers, fout))
            setattr(self, f"{kind}_w1", nn.Parameter(torch.randn(layers, fin, hidden) / fin**0.5))
            setattr(self, f"{kind}_b1", nn.Parameter(torch.zeros(layers, hidden)))
            setattr(self, f"{kind}_w2", nn.Parameter(torch.randn(layers, hidden, fout) / hidden**0.5 * 0.1))
            setattr(self, f"{kind}_b2", nn.Parameter(torch.zeros(layers, fout)))

    def _mlp(self, kind: str, layer: int, x: torch.Tensor) -> torch.Tensor:
        p = lambda name: getattr(self, f"{kind}_{name}")[layer]
        h = nn.functional.gelu(torch.addmm(p("b1"), ((x.flatten(0, -2) - p("in_mean")) / p("in_scale")), p("w1")))
        y = torch.addmm(p("b2"), h, p("w2")) * p("out_scale") + p("out_mean")
        return y.view(*x.shape[:-1], -1)

    def map_layer(self, layer, keys, values):
        return self._mlp("k", layer, keys), self._mlp("v", layer, values)

    @classmethod
    def fit(cls, calib, *, batches=None, receiver=None, seed: int = 0, progress: bool = True,
            **options) -> "DenseLatentAdapter":
        """MSE phase on ``calib`` features; NLL phase on ``batches`` (prepared windows) through ``receiver``."""
        o = DenseLatentOptions.from_kwargs("dense-latent", options)
        hidden, mse_steps, nll_steps, lr, tokens_per_step = o.hidden, o.mse_steps, o.nll_steps, o.lr, o.tokens_per_step
        torch.manual_seed(seed)
        sources = layers_by_depth(calib.sender_spec.num_layers, calib.receiver_spec.num_layers, o.sources_per_layer,
                                  source_candidates(calib.sender_spec, o.sender_layers))
        adapter = cls(config_for(calib, "dense-latent", sources, hidden=hidden, mse_steps=mse_steps, nll_steps=nll_steps, lr=lr))
        inputs = {kind: [torch.cat([calib.sender[s][j] for s in src], -1) for src in sources] for j, kind in enumerate("kv")}
        targets = {kind: [calib.receiver[r][j] for r in range(len(sources))] for j, kind in enumerate("kv")}
        with torch.no_grad():
            for kind in "kv":
                for r in range(len(sources)):
                    x, y = inputs[kind][r], targets[kind][r]
                    getattr(adapter, f"{kind}_in_mean")[r] = x.mean(0)
                    getattr(adapter, f"{kind}_in_scale")[r] = x.std(0).clamp(min=1e-4)
                    getattr(adapter, f"{kind}_out_mean")[r] = y.mean(0)
                    getattr(adapter, f"{kind}_out_scale")[r] = y.std(0).clamp(min=1e-4)
        optimizer = torch.optim.Adam(adapter.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed)
        with progress_bar(progress) as bar:
            task = bar.add_task("dense-latent: MSE", total=mse_steps)
            for step in range(mse_steps):
                pick = torch.randint(0, calib.tokens, (tokens_per_step,), generator=generator)
                loss = 0.0
                for r in range(len(sources)):
                    k, v = adapter.map_layer(r, inputs["k"][r][pick], inputs["v"][r][pick])
                    for kind, pred in (("k", k), ("v", v)):
                        scale = getattr(adapter, f"{kind}_out_scale")[r]
                        loss = loss + ((pred - targets[kind][r][pick]) / scale).pow(2).mean()
                _descend(optimizer, loss, adapter, phase="MSE", step=step, lr=lr)
                bar.advance(task)
            if batches and receiver is not None and nll_steps:
                task = bar.add_task("dense-latent: receiver NLL", total=nll_steps)
                for step in range(nll_steps):
                    batch = batches[step % len(batches)]
                    logits = transferred_logits(adapter, receiver, batch)
                    loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
                    _descend(optimizer, loss, adapter, phase="receiver NLL", step=step, lr=lr)
                    bar.advance(task)
        return adapter.requires_grad_(False).eval()


def _descend(optimizer, loss: torch.Tensor, adapter: nn.Module, *, phase: str, step: int, lr: float) -> None:
    """One optimizer step that refuses to go on from a NaN/inf loss, or to leave NaN/inf weights behind."""
    if torch.isfinite(loss):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        broken = non_finite(adapter.named_parameters())
        if not broken:
            return
        what = f"left NaN/inf in the weights {broken[:3]}"
    else:
        what = f"made the loss {loss.item()}"
    raise TrainingError(
        f"dense-latent diverged: {phase} step {step} {what} (lr={lr}). "
        f"Lower the learning rate, e.g. lr={lr / 10:g}, or check the calibration data for NaN/inf."
    )
