"""The trainable (unfolded) form of an affine adapter: one ``nn.Linear`` per receiver layer for K and V,
with LoRA corrections from PEFT. ``fold()`` merges everything back into one affine map per layer."""

from __future__ import annotations

import torch
from peft import LoraConfig, inject_adapter_in_model
from torch import nn

from heterofold_hub.methods.affine import AffineAdapter
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.adapter.config import AdapterConfig
from heterofold_hub.methods.heterofold import HeteroFoldAdapter

ADAPTER_NAME = "default"


class UnfoldedAffine(PairAdapter):
    """``k_maps[r]`` / ``v_maps[r]``: ``nn.Linear(in_features, out_features)`` initialised from a fitted
    affine adapter (recoloring). With ``lora_rank > 0`` only LoRA factors and biases train; with 0 the
    full weights train."""

    method = "heterofold"

    def __init__(self, config: AdapterConfig, lora_rank: int = 16, lora_alpha: float | None = None):
        super().__init__(config)
        layers = len(config.layer_sources)
        self.k_maps = nn.ModuleList(nn.Linear(config.in_features, config.out_features) for _ in range(layers))
        self.v_maps = nn.ModuleList(nn.Linear(config.in_features, config.out_features) for _ in range(layers))
        self.lora_rank = lora_rank
        if lora_rank > 0:
            lora = LoraConfig(r=lora_rank, lora_alpha=lora_alpha or lora_rank, target_modules=r".*_maps\.\d+",
                              lora_dropout=0.0, bias="lora_only", init_lora_weights=True)
            inject_adapter_in_model(lora, self, adapter_name=ADAPTER_NAME)

    @classmethod
    def from_affine(cls, affine: AffineAdapter, **kwargs) -> "UnfoldedAffine":
        config = AdapterConfig.from_dict({**affine.config.to_dict(), "method": "heterofold"})
        unfolded = cls(config, **kwargs)
        with torch.no_grad():
            for r in range(len(config.layer_sources)):
                for kind in "kv":
                    linear = unfolded._linear(kind, r)
                    linear.weight.copy_(getattr(affine, f"{kind}_weight")[r].T)
                    linear.bias.copy_(getattr(affine, f"{kind}_bias")[r])
        return unfolded

    def _linear(self, kind: str, layer: int) -> nn.Linear:
        module = getattr(self, f"{kind}_maps")[layer]
        return getattr(module, "base_layer", module)

    def map_layer(self, layer, keys, values):
        return self.k_maps[layer](keys), self.v_maps[layer](values)

    @torch.no_grad()
    def fold(self) -> HeteroFoldAdapter:
        """Merge base weights and LoRA deltas into one affine map per receiver layer (K and V)."""
        folded = HeteroFoldAdapter(self.config)
        for r in range(len(self.config.layer_sources)):
            for kind in "kv":
                module = getattr(self, f"{kind}_maps")[r]
                base = self._linear(kind, r)
                weight = base.weight.detach().clone()
                if module is not base:
                    weight += module.get_delta_weight(ADAPTER_NAME)
                folded.set_layer(r, kind, weight.T, base.bias.detach())
        return folded.requires_grad_(False).eval()
