"""Where a SmolLM2 -> Gemma 3 calibration step's time goes: the teacher (Gemma 3's prefill of the whole window), the
student's forward (Gemma 3 reading the mapped cache for the continuation) and its loss and backward.

    .venv/bin/python benchmarks/probes/calibration_step_parts.py [--repeats 3]

The first two of eight ``bundled:wide`` windows (512 + 64 tokens), the registered adapter unfolded as calibration trains
it. What ``hf-fold train --teacher-top-k`` removes from a window's later visits is the teacher's part.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from heterofold_hub.data.texts import read_texts  # noqa: E402
from heterofold_hub.data.windows import make_windows  # noqa: E402
from heterofold_hub.modeling import HeteroFoldModel  # noqa: E402
from heterofold_hub.trainers.module import kl_to_teacher  # noqa: E402
from heterofold_hub.trainers.unfolded import UnfoldedAffine  # noqa: E402
from heterofold_hub.transfer.batches import prepare_batch  # noqa: E402
from heterofold_hub.transfer.forward import native_logits, transferred_logits  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()
model = HeteroFoldModel.from_pretrained("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m", load_sender=True)
windows = make_windows(read_texts("bundled:wide"), model.receiver, max_windows=8, context_tokens=512,
                       continuation_tokens=64)
batch = prepare_batch(windows[:2], model.sender, model.receiver, dtype=torch.float16)
adapter = UnfoldedAffine.from_affine(model.adapter, lora_rank=0)
for _ in range(args.repeats):
    start = time.perf_counter()
    with torch.no_grad():
        teacher = native_logits(model.receiver, batch)
    taught = time.perf_counter()
    student = transferred_logits(adapter, model.receiver, batch)
    forward = time.perf_counter()
    kl_to_teacher(student, teacher).backward()
    done = time.perf_counter()
    print(f"teacher {taught - start:.2f}s student forward {forward - taught:.2f}s loss + backward {done - forward:.2f}s")
