"""Measure how much the demo models benefit from long context on held-out text.

For windows of CTX context + CONT continuation tokens cut from held-out
documents (code files and retrieval documents) it compares the continuation
NLL with the context in front against the continuation alone (just <s> for
Llama, nothing for Qwen, i.e. each tokenizer's own add_special_tokens=True
convention). Both settings score the same tokens, continuation[1:], because
a Qwen model given only the continuation has nothing to predict its first
token from.

    python scripts/check_zoo.py [--ctx 512] [--cont 64] [model folders...]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from heterofold_hub.zoo.corpus import load_records  # noqa: E402

MODELS_DIR = REPO / "heterofold_hub" / "zoo" / "models"
MAX_WINDOWS_PER_DOC = 4  # keep one long file from dominating the average


def heldout_windows(tokenizer, ctx: int, cont: int) -> list[tuple[str, list[int]]]:
    """Deterministic (kind, token ids) windows of ctx+cont tokens from the heldout split."""
    size = ctx + cont
    out = []
    for rec in load_records("heldout"):
        # verbose=False: whole files exceed model_max_length; we only cut windows.
        ids = tokenizer(rec["text"], add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) < size:
            continue
        if rec["source"].startswith("synthetic/retrieval/"):
            # The end of a retrieval doc holds the questions and answers.
            out.append(("retrieval", ids[-size:]))
        else:
            starts = range(0, len(ids) - size + 1, size)[:MAX_WINDOWS_PER_DOC]
            out += [("code", ids[s : s + size]) for s in starts]
    return out


@torch.no_grad()
def scored_nll(model, prefix: list[int], windows: list[list[int]], start: int, n_score: int,
                batch_size: int = 8) -> list[float]:
    """Mean NLL of tokens windows[i][start+1 : start+1+n_score] given prefix + everything before them."""
    res = []
    for i in range(0, len(windows), batch_size):
        x = torch.tensor([prefix + w for w in windows[i : i + batch_size]])
        logp = torch.log_softmax(model(input_ids=x).logits.float(), dim=-1)
        first = len(prefix) + start + 1  # position of the first scored token
        tgt = x[:, first : first + n_score]
        pred = logp[:, first - 1 : first - 1 + n_score]
        nll = -pred.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        res += nll.mean(dim=1).tolist()
    return res


def context_benefit(model, tokenizer, ctx: int = 512, cont: int = 64) -> dict:
    """Per-window NLL difference (no context minus with context), nats/token."""
    model.eval()
    wins = heldout_windows(tokenizer, ctx, cont)
    # What add_special_tokens=True puts in front: [<s>] for Llama, [] for Qwen.
    prefix = tokenizer("", add_special_tokens=True)["input_ids"]
    seqs = [w for _, w in wins]
    with_ctx = scored_nll(model, prefix, seqs, ctx, cont - 1)
    no_ctx = scored_nll(model, prefix, [w[ctx:] for w in seqs], 0, cont - 1)
    diffs = [a - b for a, b in zip(no_ctx, with_ctx)]

    def stats(vals):
        n = len(vals)
        mean = sum(vals) / n
        var = sum((v - mean) ** 2 for v in vals) / max(1, n - 1)
        return mean, math.sqrt(var / n)

    out = {"n_windows": len(diffs), "ctx": ctx, "cont": cont}
    out["benefit"], out["benefit_se"] = stats(diffs)
    out["nll_with_ctx"] = stats(with_ctx)[0]
    out["nll_no_ctx"] = stats(no_ctx)[0]
    for kind in ("code", "retrieval"):
        d = [x for (k, _), x in zip(wins, diffs) if k == kind]
        if d:
            out[f"benefit_{kind}"], out[f"benefit_{kind}_se"] = stats(d)
            out[f"n_{kind}"] = len(d)
    return out


def format_result(name: str, r: dict) -> str:
    s = (f"{name}: context benefit {r['benefit']:.3f} ± {r['benefit_se']:.3f} nats/token "
         f"(n={r['n_windows']} windows of {r['ctx']}+{r['cont']}; NLL {r['nll_no_ctx']:.3f} -> "
         f"{r['nll_with_ctx']:.3f})")
    for kind in ("code", "retrieval"):
        if f"benefit_{kind}" in r:
            s += f"; {kind} {r[f'benefit_{kind}']:.3f} ± {r[f'benefit_{kind}_se']:.3f} (n={r[f'n_{kind}']})"
    return s


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--cont", type=int, default=64)
    ap.add_argument("--min-benefit", type=float, default=0.3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    folders = args.folders or sorted(p for p in MODELS_DIR.iterdir() if (p / "config.json").exists())
    ok = True
    for folder in folders:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        r = context_benefit(model, tok, args.ctx, args.cont)
        passed = r["benefit"] >= args.min_benefit
        ok &= passed
        print(format_result(folder.name, r), "PASS" if passed else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
