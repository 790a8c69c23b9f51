"""Train the tiny demo model zoo (tiny-llama-code, tiny-qwen-code) from scratch.

One seeded command rebuilds the corpus if missing, trains both tokenizers,
trains both models on CPU and writes Hugging Face folders (fp16 weights,
tokenizer, model card) to heterofold_hub/zoo/models/:

    python scripts/train_zoo.py [--minutes-per-model 12] [--only llama|qwen] [--seed 0]

Training runs a fixed number of steps per model (chosen so that each fits
about 12 minutes on a quiet 2-core CPU) so that runs are reproducible. On a
slower or shared machine the time budget ends the run instead; the learning
rate schedule follows whichever is further along, so the model is annealed
either way, and the model card says which one ended the run. Logs go to stdout and runs/zoo/train_<model>.log.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import build_corpus  # noqa: E402
import check_zoo  # noqa: E402
import zoo_tokenizers as zt  # noqa: E402
from heterofold_hub.zoo.corpus import CORPUS_DIR, SPLITS, load_corpus  # noqa: E402
from heterofold_hub.zoo.retrieval import make_retrieval_doc  # noqa: E402

MODELS_DIR = REPO / "heterofold_hub" / "zoo" / "models"
LOG_DIR = REPO / "runs" / "zoo"


@dataclass
class Spec:
    name: str  # folder name
    family: str
    arch: str  # config class name in transformers
    tokenizer_desc: str
    train_tokenizer: Callable
    specials: dict
    tokenizer_class: str
    config: dict  # architecture kwargs (vocab_size filled in from the tokenizer)
    steps: int  # fixed step count, measured to fit ~12 min on 2 CPU cores
    lr: float


SPECS = {
    "llama": Spec(
        name="tiny-llama-code", family="llama", arch="LlamaConfig",
        tokenizer_desc="SentencePiece-style Unigram (tokenizers), ▁ space marker, single digits, "
                       "<s> prepended to every encoding",
        train_tokenizer=zt.train_llama_tokenizer, specials=zt.LLAMA_SPECIALS,
        tokenizer_class="PreTrainedTokenizerFast",
        config=dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                    head_dim=24, intermediate_size=512, rope_theta=10000.0, max_position_embeddings=4096,
                    tie_word_embeddings=False, rms_norm_eps=1e-5),
        steps=900, lr=2e-3,  # ~2.5k tok/s at batch 2x1024 on 2 quiet cores: ~12 min
    ),
    "qwen": Spec(
        name="tiny-qwen-code", family="qwen2", arch="Qwen2Config",
        tokenizer_desc="byte-level BPE (tokenizers) with Qwen2's exact NFC + split-regex pipeline, "
                       "no BOS, <|endoftext|> as EOS and pad",
        train_tokenizer=zt.train_qwen_tokenizer, specials=zt.QWEN_SPECIALS,
        tokenizer_class="Qwen2Tokenizer",
        config=dict(hidden_size=192, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=512, rope_theta=1_000_000.0, max_position_embeddings=4096,
                    tie_word_embeddings=True, use_sliding_window=False, rms_norm_eps=1e-6),
        steps=1350, lr=2e-3,  # ~3.9k tok/s: ~12 min
    ),
}


def make_logger(name: str) -> logging.Logger:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = logging.getLogger(name)
    log.setLevel(logging.INFO)
    log.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    for h in (logging.StreamHandler(sys.stdout), logging.FileHandler(LOG_DIR / f"train_{name}.log", mode="w")):
        h.setFormatter(fmt)
        log.addHandler(h)
    return log


def token_stream(tok, texts: list[str], eos_id: int) -> list[list[int]]:
    """One id list per document: the tokenizer's own BOS convention, then EOS."""
    return [enc.ids + [eos_id] for enc in tok.encode_batch(texts)]


def batches(docs: list[list[int]], seq_len: int, batch_size: int, rng: random.Random):
    """Endless packed batches: each pass shuffles document order, then cuts the stream."""
    while True:
        order = list(range(len(docs)))
        rng.shuffle(order)
        stream = [t for i in order for t in docs[i]]
        n = len(stream) // seq_len
        rows = [stream[i * seq_len : (i + 1) * seq_len] for i in range(n)]
        for i in range(0, n - batch_size + 1, batch_size):
            yield torch.tensor(rows[i : i + batch_size])


FACT_RE = re.compile(r"the code of (\S+) is (\d+)")


def eval_facts() -> set[tuple[str, str]]:
    """(name, value) pairs of the calib and heldout retrieval docs: drills must never contain them."""
    return {m for split in ("calib", "heldout") for t in load_corpus(split) for m in FACT_RE.findall(t)}


def copy_drills(tok, code_texts: list[str], code_docs: list[list[int]], n_tokens: int, seed: int,
                prefix: list[int], eos_id: int) -> list[list[int]]:
    """Extra training documents that reward copying from far back (the copy curriculum).

    Half are repeated spans: a random span of train-split tokens, a gap of other tokens, then the
    same span again, so every token of the repeat is predictable only by looking back (what
    induction heads do). Half are retrieval documents with short filler and many facts, so a
    sequence holds many recall events. Facts that occur in the calib or heldout split are never
    drilled. Returns about ``n_tokens`` tokens of documents (prefix + ids + EOS each).
    """
    rng = random.Random(f"{seed}:copy-drills")
    out, total = [], 0
    banned = eval_facts() if n_tokens > 0 else set()
    while total < n_tokens:
        if rng.random() < 0.5:
            src, gap_src = rng.choice(code_docs), rng.choice(code_docs)
            span_len, gap_len = rng.randint(16, 160), rng.randint(0, 400)
            a = rng.randint(1, max(1, len(src) - span_len - 1))
            g = rng.randint(1, max(1, len(gap_src) - gap_len - 1))
            span = src[a : a + span_len]
            ids = span + gap_src[g : g + gap_len] + span
        else:
            filler = build_corpus.filler_from(rng, code_texts, 0, 600)
            text, pairs = make_retrieval_doc(rng, filler, rng.randint(6, 14))
            if any(m in banned for m in FACT_RE.findall(text)):
                continue
            ids = tok.encode(text, add_special_tokens=False).ids
        doc = prefix + ids + [eos_id]
        out.append(doc)
        total += len(doc)
    return out


def copy_probe(model, docs: list[list[int]], prefix: list[int], ctx: int = 512, cont: int = 64) -> float:
    """Context benefit (nats/token) on the last ``cont`` tokens of 8 calib retrieval docs: a cheap
    in-training signal that copying has started (the recall lines are only predictable by copying)."""
    wins = [d[len(prefix):][-(ctx + cont):] for d in docs if len(d) - len(prefix) >= ctx + cont][:8]
    if not wins:
        return float("nan")
    model.eval()
    with_ctx = check_zoo.scored_nll(model, prefix, wins, ctx, cont - 1)
    alone = check_zoo.scored_nll(model, prefix, [w[ctx:] for w in wins], 0, cont - 1)
    model.train()
    return (sum(alone) - sum(with_ctx)) / len(wins)


def lr_at(progress: float, peak: float) -> float:
    """Linear warmup over the first 5%, then cosine down to 10% of peak."""
    if progress < 0.05:
        return peak * max(progress, 0.002) / 0.05
    t = min(1.0, (progress - 0.05) / 0.95)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_one(spec: Spec, args, train_texts: list[str]) -> None:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    log = make_logger(spec.family)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    folder = MODELS_DIR / spec.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)

    t0 = time.time()
    tok = spec.train_tokenizer(train_texts)
    zt.save_for_transformers(tok, folder, spec.specials, spec.tokenizer_class)
    vocab = tok.get_vocab_size()
    log.info(f"[{spec.name}] tokenizer trained in {time.time() - t0:.0f}s, vocab {vocab}")

    sid = {k: tok.token_to_id(v) for k, v in spec.specials.items()}
    cfg_cls = getattr(transformers, spec.arch)
    config = cfg_cls(vocab_size=vocab, bos_token_id=sid.get("bos"), eos_token_id=sid["eos"],
                     pad_token_id=sid["pad"], **spec.config)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())

    docs = token_stream(tok, train_texts, sid["eos"])
    n_train_tokens = sum(map(len, docs))
    prefix = tok.encode("", add_special_tokens=True).ids  # [<s>] for Llama, [] for Qwen
    code = [(t, d) for t, d in zip(train_texts, docs) if "# recall:" not in t]
    drills = copy_drills(tok, [t for t, _ in code], [d for _, d in code], int(args.drill_share * n_train_tokens),
                         args.seed, prefix, sid["eos"])
    n_drill_tokens = sum(map(len, drills))
    probe_docs = [prefix + tok.encode(t, add_special_tokens=False).ids
                  for t in load_corpus("calib") if "# recall:" in t]
    log.info(f"[{spec.name}] {n_params / 1e6:.2f}M params; train split {n_train_tokens / 1e6:.2f}M tokens "
             f"+ {n_drill_tokens / 1e6:.2f}M copy-drill tokens")
    docs = docs + drills

    steps = args.steps or spec.steps
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
    data = batches(docs, args.seq_len, args.batch_size, random.Random(f"{args.seed}:{spec.family}:data"))
    budget_s = args.minutes_per_model * 60
    model.train()
    t_train, losses, step = time.time(), [], 0
    while True:
        # Progress is the larger of the step and the time fraction: on a quiet
        # machine the fixed step count ends the run (reproducible); on a slow
        # or shared one the time budget does, and the schedule still anneals.
        by_time = (time.time() - t_train) / budget_s
        progress = max(step / steps, by_time)
        if progress >= 1:
            stopped_by = "time budget" if step < steps else "step count"
            break
        lr = lr_at(progress, spec.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x = next(data)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        if step % args.log_every == 0:
            el = time.time() - t_train
            recent = sum(losses[-args.log_every:]) / len(losses[-args.log_every:])
            probe = ""
            if step % (args.log_every * args.probe_every) == 0:
                probe = f" copy-probe {copy_probe(model, probe_docs, prefix):.3f}"
            log.info(f"[{spec.name}] step {step}/{steps} loss {recent:.3f} lr {lr:.2e} "
                     f"{step * x.numel() / el:.0f} tok/s elapsed {el / 60:.1f}m progress {100 * progress:.0f}%{probe}")
    if stopped_by == "time budget":
        log.info(f"[{spec.name}] time budget of {args.minutes_per_model} min ended the run at step {step}")
    wall = time.time() - t_train
    tokens_seen = step * args.batch_size * args.seq_len
    final_loss = sum(losses[-20:]) / len(losses[-20:])

    model.to(torch.float16).save_pretrained(folder)
    GenerationConfig(bos_token_id=sid.get("bos"), eos_token_id=sid["eos"], pad_token_id=sid["pad"],
                     do_sample=False).save_pretrained(folder)

    # Measure on what ships: reload the fp16 folder exactly as a user would.
    reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    rtok = AutoTokenizer.from_pretrained(folder)
    bench = check_zoo.context_benefit(reloaded, rtok)
    log.info(check_zoo.format_result(spec.name, bench))

    cmd = "python scripts/train_zoo.py" + "".join(f" {a}" for a in sys.argv[1:])
    write_card(folder, spec, config, dict(
        n_params=n_params, steps=step, budget_min=args.minutes_per_model, planned_steps=steps,
        stopped_by=stopped_by, tokens_seen=tokens_seen,
        wall=wall, final_loss=final_loss, bench=bench, cmd=cmd, seed=args.seed,
        batch=args.batch_size, seq_len=args.seq_len, n_train_tokens=n_train_tokens,
        torch=torch.__version__, transformers=transformers.__version__))
    (LOG_DIR / f"summary_{spec.family}.json").write_text(json.dumps(
        dict(model=spec.name, steps=step, tokens_seen=tokens_seen, wall_s=wall, final_loss=final_loss,
             bench=bench, cmd=cmd), indent=2))
    log.info(f"[{spec.name}] done: {step} steps, {tokens_seen / 1e6:.2f}M tokens, {wall / 60:.1f} min, "
             f"final loss {final_loss:.3f}; wrote {folder}")


def write_card(folder: Path, spec: Spec, config, m: dict) -> None:
    c = config
    b = m["bench"]
    kinds = "".join(
        f"\n  - {k}: {b[f'benefit_{k}']:.3f} ± {b[f'benefit_{k}_se']:.3f} (n={b[f'n_{k}']})"
        for k in ("code", "retrieval") if f"benefit_{k}" in b)
    note = "" if m["stopped_by"] == "step count" else (
        f" (ended by the {m['budget_min']:g}-minute time budget on a busy machine; {m['planned_steps']} were planned)")
    text = f"""---
license: apache-2.0
library_name: transformers
tags: [tiny, demo, code, heterofold-hub]
---

# {spec.name}

A deliberately tiny {spec.family} causal LM trained from scratch on CPU for the
HeteroFold Hub demos (cross-family KV-cache transfer). It is a test fixture, not
a useful code model: it knows Python-stdlib-looking text and has learned to use
its context (copying identifiers and retrieval answers from far back).

## Architecture

- `{type(c).__name__.replace("Config", "ForCausalLM")}`, {m['n_params'] / 1e6:.2f}M parameters, weights stored in fp16
- hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} query heads,
  {c.num_key_value_heads} KV heads (GQA ratio {c.num_attention_heads // c.num_key_value_heads}),
  head_dim {c.head_dim if getattr(c, 'head_dim', None) else c.hidden_size // c.num_attention_heads}, MLP {c.intermediate_size}
- RoPE theta {c.rope_parameters['rope_theta'] if getattr(c, 'rope_parameters', None) else c.rope_theta:g},
  max_position_embeddings {c.max_position_embeddings}, tied embeddings: {c.tie_word_embeddings}

## Tokenizer

{spec.tokenizer_desc}; vocab {c.vocab_size}. Trained on the train split with
`tokenizers`. Special tokens: {', '.join(f'{k}={v}' for k, v in spec.specials.items())}.
`AutoTokenizer.from_pretrained` reproduces the raw `tokenizer.json` ids exactly
(checked in tests/test_zoo.py).

## Data

The bundled corpus `heterofold_hub/zoo/corpus/` (train split, {m['n_train_tokens'] / 1e6:.2f}M tokens
with this tokenizer): CPython 3.11 standard-library source (PSF licence; the
weights are released under the project licence, Apache-2.0) plus
synthetic "recall the code of X" retrieval documents (facts early, recalled at the end). Documents are packed into
{m['seq_len']}-token sequences separated by EOS.

## Training

- {m['steps']} steps{note} of {m['batch']} x {m['seq_len']} tokens = {m['tokens_seen'] / 1e6:.2f}M tokens seen
- AdamW (betas 0.9/0.95, weight decay 0.1), peak lr {spec.lr:g}, 5% linear warmup + cosine to 10%, grad clip 1.0, fp32;
  schedule progress = max(step / planned steps, elapsed / time budget)
- wall time {m['wall'] / 60:.1f} min on 2 CPU cores (torch {m['torch']}, transformers {m['transformers']}), seed {m['seed']}
- final train loss (mean of last 20 steps): {m['final_loss']:.3f} nats/token

## Held-out context benefit

Continuation NLL without vs with {b['ctx']} tokens of context, over {b['n_windows']} windows of
{b['ctx']}+{b['cont']} tokens from the heldout split (`python scripts/check_zoo.py`):

- benefit {b['benefit']:.3f} ± {b['benefit_se']:.3f} nats/token (mean ± s.e.);
  NLL {b['nll_no_ctx']:.3f} without context, {b['nll_with_ctx']:.3f} with it{kinds}

## Reproduce

```
{m['cmd']}
```
"""
    (folder / "README.md").write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes-per-model", type=float, default=12.0,
                    help="safety time budget; training normally stops at the fixed step count first")
    ap.add_argument("--only", choices=sorted(SPECS), help="train just one of the models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (1 when training both models side by side)")
    ap.add_argument("--steps", type=int, default=None, help="override the fixed step count (e.g. smoke tests)")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--probe-every", type=int, default=20, help="copy probe every N log lines")
    ap.add_argument("--drill-share", type=float, default=0.0,
                    help="copy-drill tokens added, as a share of the train split's tokens (0: off; the shipped "
                         "models were trained without; 0.6 for 25 min did not make them copy)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    # Deterministic kernels where torch has them; warn (not fail) elsewhere.
    torch.use_deterministic_algorithms(True, warn_only=True)

    if not all((CORPUS_DIR / f"{s}.jsonl.gz").exists() for s in SPLITS):
        build_corpus.build(Path(build_corpus.DEFAULT_STDLIB), CORPUS_DIR, seed=0)
    train_texts = load_corpus("train")
    for key in [args.only] if args.only else list(SPECS):
        train_one(SPECS[key], args, train_texts)


if __name__ == "__main__":
    main()
