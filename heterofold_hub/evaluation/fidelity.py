"""Fidelity of transfer methods on held-out windows (DESIGN.md, Measures).

Per window: continuation NLL, KL(native || method) per token and top-1 agreement with native prefill.
``recovered = (NLL_no_context - NLL_method) / (NLL_no_context - NLL_native)`` on window means, with
standard errors from a leave-one-window-out jackknife.
"""

from __future__ import annotations

import torch
from rich.table import Table

from heterofold_hub.progress import progress_bar
from heterofold_hub.transfer.selects import needs_surprisal
from heterofold_hub.transfer.forward import native_logits, no_context_logits, transferred_logits
from heterofold_hub.adapter.base import PairAdapter
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import prepare_batch
from heterofold_hub.data.windows import Window, make_windows

def token_measures(logits: torch.Tensor, reference: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-window means ``[B]`` of nll, kl(reference || logits) and top-1 agreement with reference."""
    logp = logits.log_softmax(-1)
    ref = reference.log_softmax(-1)
    nll = -logp.gather(-1, targets[..., None]).squeeze(-1)
    kl = (ref.exp() * (ref - logp)).sum(-1)
    top1 = (logits.argmax(-1) == reference.argmax(-1)).float()
    return {"nll": nll.mean(1), "kl": kl.mean(1), "top1": top1.mean(1)}


def _jackknife_se(values: torch.Tensor, stat) -> float:
    """Standard error of ``stat(values)`` by leave-one-out over windows (dim 0)."""
    n = len(values)
    if n < 2:
        return float("nan")
    keep = ~torch.eye(n, dtype=torch.bool)
    loo = torch.stack([stat(values[keep[i]]) for i in range(n)])
    return float(((n - 1) / n * (loo - loo.mean()).pow(2).sum()).sqrt())


def summarise(per_window: dict[str, dict[str, torch.Tensor]]) -> dict[str, dict[str, float]]:
    """Window means, SEs and ``recovered`` for every method from per-window measures ``[W]``."""
    stacked = torch.stack([per_window["no-context"]["nll"], per_window["native"]["nll"]], 1)
    summary = {}
    for name, measures in per_window.items():
        triple = torch.cat([stacked, measures["nll"][:, None]], 1)  # [W, 3]: none, native, method
        recovered = lambda t: (t[:, 0].mean() - t[:, 2].mean()) / (t[:, 0].mean() - t[:, 1].mean())
        row = {"recovered": float(recovered(triple)), "recovered_se": _jackknife_se(triple, recovered)}
        for key, values in measures.items():
            row[key] = float(values.mean())
            row[f"{key}_se"] = float(values.std() / len(values) ** 0.5) if len(values) > 1 else float("nan")
        summary[name] = row
    return summary


def paired_difference(per_window: dict[str, dict[str, torch.Tensor]], a: str, b: str) -> dict[str, float]:
    """Method ``a`` against ``b`` on the same windows (measures of :func:`window_measures`): the difference of their
    ``recovered`` and of their mean KL, each with a leave-one-window-out jackknife error of the difference itself
    (the windows' shared difficulty cancels), and the windows where ``a``'s NLL is lower."""
    columns = [per_window["no-context"]["nll"], per_window["native"]["nll"], per_window[a]["nll"], per_window[b]["nll"],
               per_window[a]["kl"], per_window[b]["kl"]]
    table = torch.stack(columns, 1)  # [W, 6]
    benefit = lambda t: t[:, 0].mean() - t[:, 1].mean()  # noqa: E731
    recovered = lambda t: (t[:, 3].mean() - t[:, 2].mean()) / benefit(t)  # noqa: E731
    kl = lambda t: t[:, 4].mean() - t[:, 5].mean()  # noqa: E731
    return {"recovered": float(recovered(table)), "recovered_se": _jackknife_se(table, recovered),
            "kl": float(kl(table)), "kl_se": _jackknife_se(table, kl),
            "windows": len(table), "windows_better": int((table[:, 2] < table[:, 3]).sum())}


@torch.no_grad()
def score_package(sender: Side, receiver: Side, name: str, adapter: PairAdapter, *, heldout: str, windows: int,
                  context_tokens: int, continuation_tokens: int, batch_size: int = 8) -> dict:
    """The held-out ``metrics.json`` of a package made without training (composed, low rank): ``adapter``, as row
    ``name``, beside native and no-context on ``windows`` windows of ``heldout``, under the pair ids the package
    names (its parents were checked to be these models)."""
    from heterofold_hub.data.texts import read_texts

    held_out = make_windows(read_texts(heldout), receiver, max_windows=windows, context_tokens=context_tokens,
                            continuation_tokens=continuation_tokens)
    result = evaluate(sender, receiver, {name: adapter}, held_out, batch_size=batch_size, data=heldout)
    return result | {"sender": adapter.config.sender, "receiver": adapter.config.receiver}


@torch.no_grad()  # scoring only: without it the maps' outputs carry autograd graphs into every measure
def evaluate(
    sender: Side,
    receiver: Side,
    adapters: dict[str, PairAdapter],
    windows: list[Window],
    *,
    batch_size: int = 8,
    progress: bool = True,
    recompute=None,
    data: str | None = None,
    prepare=prepare_batch,
) -> dict:
    """Fidelity of ``adapters`` (plus native and no-context references) on ``windows``; ``recompute``
    (:class:`~heterofold_hub.transfer.config.TransferConfig`) applied after every adapter's map. ``data``
    names the text the windows were cut from (``bundled:unseen``, a path): figures compare only on the same text.
    ``prepare``: what makes a batch of windows ready (:func:`prepare_batch`; a probe may pass one that adds features)."""
    merged = window_measures(sender, receiver, adapters, windows, batch_size=batch_size, progress=progress,
                             recompute=recompute, prepare=prepare)
    summary = summarise(merged)
    gain = merged["no-context"]["nll"] - merged["native"]["nll"]  # per-window context benefit
    return {
        "sender": sender.name,
        "receiver": receiver.name,
        "data": data,
        "context_tokens": len(windows[0].receiver_context),
        "continuation_tokens": len(windows[0].continuation),
        "windows": len(windows),
        "recompute": None if recompute is None else recompute.to_dict(),
        "benefit": float(gain.mean()),
        "benefit_se": float(gain.std() / len(gain) ** 0.5) if len(gain) > 1 else float("nan"),
        "methods": summary,
        "paired": paired_rows(merged),
        "per_window": per_window_record(merged, windows),
    }


def window_ids(windows: list[Window]) -> list[str]:
    """A short fingerprint per window (its context text and continuation ids): two results are paired window by
    window only where these agree."""
    import hashlib

    digest = lambda w: hashlib.sha256(w.context.encode() + b"\0" + w.continuation.to(torch.int64).numpy().tobytes())  # noqa: E731
    return [digest(w).hexdigest()[:16] for w in windows]


def per_window_record(per_window: dict[str, dict[str, torch.Tensor]], windows: list[Window]) -> dict:
    """What a result keeps of :func:`window_measures` so that another run on the same windows can be paired with it
    (:func:`heterofold_hub.evaluation.paired_runs.paired_between`): each window's fingerprint, and per row its NLL and
    KL per window."""
    return {"windows": window_ids(windows),
            "methods": {name: {key: m[key].tolist() for key in ("nll", "kl")} for name, m in per_window.items()}}


def paired_rows(per_window: dict[str, dict[str, torch.Tensor]]) -> dict[str, dict[str, float]]:
    """``{"A - B": paired_difference}`` for every two transfer rows, in the order scored: where rows differ by
    less than their own errors, the paired difference on the same windows can still tell them apart."""
    rows = [name for name in per_window if name not in ("native", "no-context")]
    return {f"{a} - {b}": paired_difference(per_window, a, b) for i, a in enumerate(rows) for b in rows[i + 1:]}


@torch.no_grad()
def window_measures(sender: Side, receiver: Side, adapters: dict[str, PairAdapter], windows: list[Window], *,
                    batch_size: int = 8, progress: bool = True, recompute=None,
                    prepare=prepare_batch) -> dict[str, dict[str, torch.Tensor]]:
    """Per method (``native``, ``no-context`` and each of ``adapters``), per measure, the per-window values ``[W]``
    that :func:`summarise` pools (and :func:`paired_difference` compares)."""
    per_window: dict[str, dict[str, list]] = {}
    with progress_bar(progress) as bar:
        task = bar.add_task("evaluating", total=len(windows))
        for start in range(0, len(windows), batch_size):
            batch = prepare(windows[start : start + batch_size], sender, receiver,
                            surprisal=recompute is not None and needs_surprisal(recompute.select))
            native = native_logits(receiver, batch)
            logits = {"native": native, "no-context": no_context_logits(receiver, batch)}
            logits.update({name: transferred_logits(a, receiver, batch, recompute=recompute)
                           for name, a in adapters.items()})
            for name, values in logits.items():
                for key, v in token_measures(values, native, batch.targets).items():
                    per_window.setdefault(name, {}).setdefault(key, []).append(v)
            bar.advance(task, len(batch))
    return {name: {k: torch.cat(v) for k, v in m.items()} for name, m in per_window.items()}


def caveats(result: dict) -> list[str]:
    """What a reader of ``result`` must know before comparing ``recovered``: it is a ratio to the context's
    benefit, unstable when that benefit is within two standard errors of zero, and above 1 it means a lower NLL
    than the receiver's own prefill (not a better transfer), which KL to native shows."""
    notes = []
    benefit, se = result["benefit"], result["benefit_se"]
    if not benefit > 2 * se:
        notes.append(f"the context's benefit ({benefit:.3f} ± {se:.3f} nats/token) is within two standard errors of "
                     "zero, so recovered (a ratio to it) is unstable here: compare KL instead")
    for name, row in result["methods"].items():
        if name not in ("native", "no-context") and row["recovered"] > 1 + 2 * row["recovered_se"]:
            notes.append(f"{name}: recovered {row['recovered']:.2f} > 1 means a lower NLL than the receiver's own "
                         f"prefill, not a better transfer; its KL to native prefill ({row['kl']:.3f}) says how far it is")
    return notes


def results_table(result: dict) -> Table:
    table = Table(title=f"{result['sender']} -> {result['receiver']}: {result['windows']} windows, "
                        f"{result['context_tokens']} context + {result['continuation_tokens']} continuation tokens")
    for col in ("method", "recovered", "KL (nats/tok)", "top-1", "NLL (nats/tok)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, row in result["methods"].items():
        table.add_row(name, f"{row['recovered']:.3f} ± {row['recovered_se']:.3f}", f"{row['kl']:.3f} ± {row['kl_se']:.3f}",
                      f"{row['top1']:.3f}", f"{row['nll']:.3f} ± {row['nll_se']:.3f}")
    table.caption = f"context benefit (no-context NLL - native NLL): {result['benefit']:.3f} ± {result['benefit_se']:.3f} nats/token"
    for pair, d in result.get("paired", {}).items():  # results written before paired rows have none
        table.caption += (f"\npaired, {pair}: recovered {d['recovered']:+.3f} ± {d['recovered_se']:.3f}, KL "
                          f"{d['kl']:+.3f} ± {d['kl_se']:.3f}, lower NLL on {d['windows_better']}/{d['windows']} windows")
    for note in caveats(result):
        table.caption += f"\n[yellow]note:[/] {note}"
    return table
