"""Run by tests/test_trainer.py as `python tests/ddp_fit.py OUT`: a 2-process DDP calibration on CPU (gloo).

Lightning's DDP launcher re-runs this script for rank 1; each rank writes its folded adapter weights."""

import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from conftest import bpe_tokenizer, tiny_model, unigram_tokenizer  # noqa: E402
from helpers import small_calibration  # noqa: E402

from heterofold_hub.base_models.loading import Side  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402
from heterofold_hub.trainers.calibrate import calibrate  # noqa: E402


class DumpWeights(Callback):
    def __init__(self, out: Path):
        self.out = out

    def on_train_end(self, trainer, pl_module):
        state = {k: v.detach().contiguous() for k, v in pl_module.adapter.fold().state_dict().items()}
        save_file(state, self.out / f"rank{trainer.global_rank}.safetensors")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    bpe, uni = bpe_tokenizer(), unigram_tokenizer()
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(uni), layers=2, seed=2), uni)
    windows, calib = small_calibration(sender, receiver, context_tokens=32, windows=8)
    batches = [prepare_batch(windows[i : i + 2], sender, receiver) for i in range(0, 8, 2)]
    calibrate(calib, batches, receiver, steps=4, devices=2, strategy="ddp", progress=False, callbacks=[DumpWeights(out)])
