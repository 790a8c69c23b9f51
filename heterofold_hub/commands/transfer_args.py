"""The transfer flags that ``hf-fold eval``, ``eval --task retrieval`` and ``bench`` share: one dataclass the
commands' arguments extend, and one way to turn the flags into a
:class:`~heterofold_hub.transfer.config.TransferConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from heterofold_hub.errors import HeteroFoldError

FLAGS = "--recompute/--select/--repair-layers/--mapped-key-scale"


@dataclass(kw_only=True)
class TransferArgs:
    recompute: float = 0.0  # share of mapped positions the receiver recomputes natively after each map
    select: str | None = None  # which positions (None: content, when --recompute asks for any)
    repair_layers: int = 0  # the receiver's first layers recomputed for every position
    mapped_key_scale: float = 1.0  # factor on the keys of the rows left mapped (1: unchanged)

    def transfer_config(self):
        """The flags as a TransferConfig (raises HeteroFoldError naming the bad value)."""
        from heterofold_hub.transfer.config import TransferConfig

        return TransferConfig(recompute=self.recompute, select=self.select or "content",
                              repair_layers=self.repair_layers, mapped_key_scale=self.mapped_key_scale)

    def transfer_problems(self) -> list[str]:
        """What is wrong with the transfer flags, phrased in flags: a bad value, or ``--select`` given with nothing
        to recompute (it would be dropped without a word)."""
        try:
            config = self.transfer_config()
        except HeteroFoldError as bad:
            return [f"{FLAGS}: {bad}"]
        if self.select is not None and not config.active:
            return [f"--select {self.select}: chooses positions to recompute, but --recompute is 0, so it would "
                    "recompute nothing; give a share too (e.g. --recompute 0.12 --select "
                    f"{self.select}), or leave --select out for the pure transfer"]
        return []
