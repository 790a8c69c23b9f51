"""Output-aware calibration as a LightningModule: the receiver after its own prefill is the teacher, the
receiver reading the mapped cache is the student; only the pair adapter trains."""

from __future__ import annotations

import lightning as L
import torch

from heterofold_hub.transfer.forward import native_logits, transferred_logits
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import Batch

from .faults import Diverged
from .teacher import TopKTeacher, kl_top_k, token_mean
from .unfolded import UnfoldedAffine


def kl_to_teacher(student: torch.Tensor, teacher: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over tokens of KL(teacher || student); logits ``[B, M, V]``, optional token ``weights`` ``[B, M]``
    (a weighted mean)."""
    t = teacher.float().log_softmax(-1)
    per_token = (t.exp() * (t - student.float().log_softmax(-1))).sum(-1)
    return token_mean(per_token, weights)


def copy_weights(batch: Batch, copy_weight: float) -> torch.Tensor | None:
    """``[B, M]``: 1 + ``copy_weight`` on the targets the context could be copied from (``Batch.copied_targets``),
    1 elsewhere; None for 0 (the plain mean)."""
    return None if copy_weight == 0 else 1 + copy_weight * batch.copied_targets().float()


def warmup_then_decay(optimizer: torch.optim.Optimizer, max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The calibration's schedule, per step: a linear warm-up over the first tenth of ``max_steps`` (AdamW's first
    steps move every weight by about ``lr`` whatever its gradient), then a linear decay to a tenth of the peak."""
    warmup = max(1, max_steps // 10)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * max(0.1, 1 - step / max(1, max_steps)))


class CalibrationModule(L.LightningModule):
    """Holds the trainable adapter; the frozen receiver is attached, not owned, so checkpoints stay small."""

    def __init__(self, adapter: UnfoldedAffine, receiver: Side, *, lr: float = 3e-3, weight_decay: float = 0.0,
                 max_steps: int = 100, copy_weight: float = 0.0, teacher_top_k: int = 0):
        super().__init__()
        self.save_hyperparameters({"lr": lr, "weight_decay": weight_decay, "max_steps": max_steps, "copy_weight": copy_weight,
                                   "teacher_top_k": teacher_top_k, "lora_rank": adapter.lora_rank,
                                   "adapter_config": adapter.config.to_dict()})
        self.adapter = adapter
        self._receiver = [receiver]  # a list keeps the receiver out of state_dict and parameters()
        # Top-k teachers by batch index, made on a batch's first visit. Not checkpointed: a resumed run makes them
        # again, the same ones (the receiver is frozen).
        self.teachers: dict[int, TopKTeacher] = {}

    @property
    def receiver(self) -> Side:
        return self._receiver[0]

    def on_fit_start(self) -> None:
        self.receiver.model.to(self.device)

    def training_step(self, indexed: tuple[int, Batch], batch_idx: int) -> torch.Tensor:
        index, batch = indexed
        weights = copy_weights(batch, self.hparams.copy_weight)
        top_k = self.hparams.teacher_top_k
        if top_k and index in self.teachers:
            teacher = self.teachers[index]
        else:
            with torch.no_grad():
                teacher = native_logits(self.receiver, batch)
            if top_k:
                teacher = self.teachers[index] = TopKTeacher.from_logits(teacher, top_k)
        student = transferred_logits(self.adapter, self.receiver, batch)
        loss = kl_top_k(student, teacher, weights) if top_k else kl_to_teacher(student, teacher, weights)
        if not torch.isfinite(loss):
            raise Diverged(f"the calibration loss became {loss.item()} at step {self.global_step}", self.global_step)
        self.log("kl", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        # A huge update can leave NaN/inf weights while the loss that drove it was finite: stop before a
        # checkpoint saves them (checkpoints are written after this step).
        bad = self.adapter.non_finite()
        if bad:
            raise Diverged(f"the update of step {self.global_step} left NaN/inf in the weights {bad[:3]}",
                           self.global_step + 1)

    def configure_optimizers(self):
        params = [p for p in self.adapter.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        schedule = warmup_then_decay(optimizer, self.hparams.max_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
