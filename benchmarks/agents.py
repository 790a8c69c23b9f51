"""The agent benchmarks, run by the harness's ``hidden-profile`` and ``conversation`` stages
(``python -m benchmarks run NAME --stage hidden-profile``): a task against text communication, and error over turns.
The measurements are :mod:`heterofold_hub.evaluation.hidden_profile` and :mod:`heterofold_hub.evaluation.conversation`;
this module loads what they need, logs progress and draws the tables and the plot."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from heterofold_hub.data.texts import read_texts
from heterofold_hub.evaluation.handoff import make_handoff_prompts
from heterofold_hub.evaluation.retrieval import filler_texts, known_facts
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.templates import GEMMA3_CHAT_TEMPLATE


def template_for(side) -> tuple[str | None, str]:
    """The chat template an agent runs in, and where it comes from: the tokenizer's own, or Google's Gemma 3 template
    for a Gemma 3 model whose file carries none (the 270M GGUF is the pretrained model)."""
    if getattr(side.tokenizer, "chat_template", None):
        return None, "the tokenizer's own"
    if getattr(side.model.config, "model_type", "").startswith("gemma3"):
        return GEMMA3_CHAT_TEMPLATE, "GEMMA3_CHAT_TEMPLATE (the model's file carries none)"
    return None, "none"


def _log(prefix: str):
    return lambda line: print(f"{time.strftime('%H:%M:%S')} {prefix}: {line}", file=sys.stderr, flush=True)


def measure_hidden_profile(model, *, lengths: list[int], episodes: int, formats: list[str], data: str,
                           seed: int, setting: TransferConfig | None = None, extra: str = "") -> dict:
    """Every (length, format) cell of ``episodes`` episodes, plus each length's formats pooled. The ``kv
    recommended`` condition runs the registry's recommended setting for the adapter, or ``setting`` where the
    registry recommends none (recorded as the setting's source); ``extra``: more kv conditions as a hand-off grid
    (:func:`benchmarks.handoff.parse_grid`), each named ``kv SETTING``."""
    from benchmarks.handoff import parse_grid
    from heterofold_hub.errors import HeteroFoldError
    from heterofold_hub.evaluation.hidden_profile import CONDITIONS, evaluate_hidden_profile, summarise_runs

    more = {f"kv {s.name}": s.config for s in parse_grid(extra, [0])[1:]}  # [0] is the pure transfer

    recommended, source = model.recommended, "the registry"
    if recommended is not None and setting is not None:
        raise HeteroFoldError(f"{model.resolved.describe()} has a recommended setting in the registry "
                              f"({recommended.to_dict()}); drop the experiment's select/recompute, which are for an "
                              "adapter that has none.")
    if recommended is None:
        if setting is None:
            raise HeteroFoldError(f"{model.resolved.describe()} has no recommended setting in the registry; give the "
                                  "experiment's [hidden-profile] a select and recompute for the kv condition.")
        recommended, source = setting, "the experiment (the registry recommends none for this version)"
    template, template_source = template_for(model.receiver)
    fillers = filler_texts(read_texts(data))
    exclude = known_facts(read_texts("bundled:wide"))
    result = {"sender": model.sender.name, "receiver": model.receiver.name, "recommended": recommended.to_dict(),
              "recommended_from": source,
              "chat_template": template_source, "data": data, "episodes": episodes, "conditions": [*CONDITIONS, *more],
              "lengths": {}}
    for n in lengths:
        cells = {}
        for fmt in formats:
            prompts = make_handoff_prompts(fillers, model.receiver, n, episodes, fmt=fmt, seed=seed, exclude=exclude)
            cell = evaluate_hidden_profile(model, prompts, recommended, chat_template=template, extra=more, seed=seed,
                                           log=_log(f"{fmt} {n}"))
            cells[fmt] = cell
        pooled = summarise_runs([s for cell in cells.values() for s in cell["sides"]],
                                [run for cell in cells.values() for run in cell["runs"]])
        result["lengths"][str(n)] = {"formats": cells, "pooled": pooled}
        Console(stderr=True).print(hidden_profile_table(result, str(n)))
    return result


def hidden_profile_table(result: dict, length: str) -> Table:
    cell = result["lengths"][length]
    t = Table(title=f"{result['sender']} -> {result['receiver']}, {length}-token documents: exact match "
                    "(95% interval), share of text communication, time to first token")
    for column in ("condition", "exact match", "of text (95% CI)", "McNemar p vs text", "TTFT", "TTFT vs text",
                   "exchange"):
        t.add_column(column, justify="left" if column == "condition" else "right")
    for name, row in cell["pooled"].items():
        low, high = row["interval"]
        ratio, interval = row["vs_text"]["ratio"], row["vs_text"]["interval"]
        of_text = "—" if ratio is None else f"{ratio:.2f}" + ("" if interval is None else
                                                               f" ({interval[0]:.2f}-{interval[1]:.2f})")
        t.add_row(name, f"{row['exact_match']:.2f} ({low:.2f}-{high:.2f})", of_text, f"{row['vs_text']['mcnemar_p']:.3f}",
                  f"{row['ttft_s'] * 1000:.0f} ms", f"{row['ttft_speedup_vs_text']:.1f}x", f"{row['exchange_s']:.2f} s")
    return t


def measure_conversation(a_to_b, b_to_a, *, conversations: int, turns: int, document_tokens: int, turn_tokens: int,
                         score_tokens: int, recompute: float, select: str, data: str, seed: int, plot: Path) -> dict:
    """The conversation benchmark with two settings for the mapped turns: the pure transfer and ``select`` at
    ``recompute``; draws ``plot``."""
    from heterofold_hub.evaluation.conversation import evaluate_conversation

    settings = {"kv pure": TransferConfig(), f"kv {select}@{recompute:g}": TransferConfig(recompute=recompute,
                                                                                           select=select)}
    templates, sources = {}, {}
    for side, model in (("a", b_to_a), ("b", a_to_b)):
        templates[side], sources[model.receiver.name] = template_for(model.receiver)
    result = evaluate_conversation(a_to_b, b_to_a, read_texts(data), settings, conversations=conversations,
                                   document_tokens=document_tokens, turn_tokens=turn_tokens, turns=turns,
                                   score_tokens=score_tokens, templates=templates, seed=seed,
                                   log=_log("conversation"))
    result |= {"agent_a": a_to_b.sender.name, "agent_b": a_to_b.receiver.name, "chat_templates": sources, "data": data}
    Console(stderr=True).print(conversation_table(result))
    conversation_plot(result, plot)
    return result


def conversation_table(result: dict) -> Table:
    names = list(result["settings"])
    t = Table(title=f"{result['agent_a']} <-> {result['agent_b']}, {result['conversations']} conversations: the "
                    "listener's next turn after each hand-off (recovered ± se, KL), and the hand-off's time")
    for column in ("turn", "to", "history", *[f"{n} recovered" for n in names], *[f"{n} KL" for n in names],
                   *[f"{n} KL, last turn only" for n in names], "prefill", *[f"{n} hand-off" for n in names],
                   "sender's prefill"):
        t.add_column(column, justify="right")
    for row in result["per_turn"]:
        s, timing, only = row["settings"], row["median_s"], row["last_turn_only"]
        t.add_row(str(row["turn"]), row["listener"], str(row["history_tokens"]),
                  *[f"{s[n]['recovered']:.3f} ± {s[n]['recovered_se']:.3f}" for n in names],
                  *[f"{s[n]['kl']:.3f}" for n in names], *[f"{only[n]['kl']:.3f}" for n in names],
                  f"{timing['native_s'] * 1000:.0f} ms",
                  *[f"{timing[n + '_s'] * 1000:.0f} ms" for n in names], f"{timing['sender_prefill_s'] * 1000:.0f} ms")
    return t


def conversation_plot(result: dict, path: Path) -> None:
    """Recovered per turn (with ± 1.96 se) and cumulative seconds against text communication, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["settings"])
    turns = [row["turn"] for row in result["per_turn"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in names:
        rec = [row["settings"][name]["recovered"] for row in result["per_turn"]]
        se = [1.96 * row["settings"][name]["recovered_se"] for row in result["per_turn"]]
        line = left.errorbar(turns, rec, yerr=se, marker="o", capsize=3, label=name)
        only = [row["last_turn_only"][name]["recovered"] for row in result["per_turn"]]
        left.plot(turns, only, linestyle="--", marker="x", color=line.lines[0].get_color(),
                  label=f"{name}, earlier turns native")
    left.set(xlabel="turn handed over", ylabel="recovered on the listener's next turn",
             title="Fidelity per turn (1 = native)")
    left.legend()
    total = lambda key: [sum(r["median_s"][key] for r in result["per_turn"][:i + 1]) for i in range(len(turns))]  # noqa: E731
    right.plot(turns, total("native_s"), marker="o", label="text communication (prefix caching)")
    for name in names:
        right.plot(turns, total(f"{name}_s"), marker="o", label=f"{name}: hand-off")
    with_sender = [a + b for a, b in zip(total(f"{names[0]}_s"), total("sender_prefill_s"))]
    right.plot(turns, with_sender, linestyle="--", label=f"{names[0]} + the sender's prefill of its turn")
    right.set(xlabel="turn", ylabel="cumulative seconds (median turn)", title="Listener time over the conversation")
    right.legend(fontsize=8)
    fig.suptitle(f"{result['agent_a']} <-> {result['agent_b']}: {result['conversations']} conversations, "
                 f"{result['turn_tokens']}-token turns")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
