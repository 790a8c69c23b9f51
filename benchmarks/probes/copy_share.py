"""Share of continuation targets that repeat the context (``Batch.copied_targets``: the target and the 3 tokens
before it occur together in the context), in Gemma 3 tokens, for the texts the real pair trains and is scored on:
what ``hf-fold train --copy-weight`` weights.

    .venv/bin/python benchmarks/probes/copy_share.py > benchmarks/results/real/copy-share.txt
"""

import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.transfer.batches import Batch
from heterofold_hub.data.windows import make_windows

SOURCES = ["bundled:wide", "runs/real/wide-recall.jsonl", "bundled:train", "bundled:train-natural", "bundled:unseen"]

receiver = Side.load("gguf/gemma3-270m-q4_k_m")
prefix = receiver.prefix_ids()
print("# windows of 512 + 64 Gemma 3 tokens, at most 400 per source (as the real pair's training runs cut them)")
for source in SOURCES:
    windows = make_windows(read_texts(source), receiver, context_tokens=512, continuation_tokens=64, max_windows=400)
    copied = total = 0
    for w in windows:  # only the token fields copied_targets reads
        batch = Batch(alignment=None, features=None, query=torch.cat([w.receiver_context[-1:], w.continuation[:-1]])[None],
                      targets=w.continuation[None], native_ids=torch.cat([prefix, w.receiver_context, w.continuation[:-1]])[None],
                      prefix=prefix)
        mask = batch.copied_targets()
        copied, total = copied + int(mask.sum()), total + mask.numel()
    print(f"{source}: {len(windows)} windows, {copied / total:.3f} of continuation targets repeat the context")
