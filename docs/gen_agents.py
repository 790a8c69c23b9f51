"""The generated tables of ``docs/results/agents.md``: the hidden-profile task against text communication, and the
conversation's fidelity and time per turn, read from the committed results of the ``real-*-hidden-profile-*`` and
``real-conversation`` experiments. An experiment not yet run is listed with the command that runs it."""

from __future__ import annotations

from gen_tables import RESULTS, stage

from heterofold_hub.transfer.config import TransferConfig

CONDITIONS = ("no communication", "text", "kv pure", "kv recommended")  # the per-side table's columns
DIRECTIONS = {"s2g": "SmolLM2 -> Gemma 3", "g2s": "Gemma 3 -> SmolLM2"}
LENGTHS = (512, 1024, 2048)


def _stage(name: str, stage_name: str) -> dict | None:
    """The stage entry of experiment ``name``'s results, or None when the experiment has not been run."""
    return stage((name, stage_name)) if (RESULTS / f"{name}.json").is_file() else None


def _interval(pair) -> str:
    return "—" if pair is None else f"{pair[0]:.2f}-{pair[1]:.2f}"


def _kv_label(result: dict) -> str:
    """The recommended condition with its setting, and where the setting came from when not the registry (results
    written before the source was recorded required the registry's)."""
    name = TransferConfig.from_dict(result["recommended"], strict=False).label
    return f"kv recommended ({name})" if result.get("recommended_from", "the registry") == "the registry" else f"kv {name} (none registered)"


def hidden_profile_markdown() -> str:
    """Per direction and document length, each condition over both fact formats pooled: exact match (95% Wilson
    interval), its share of text communication's (paired bootstrap interval), McNemar's p against text, the
    receiver's median time to first token and its median ratio to text's, and the whole exchange."""
    lines = ["| direction | tokens | condition | episodes | exact match (95% CI) | share of text (95% CI) | "
             "McNemar p vs text | TTFT | TTFT speed-up vs text | whole exchange |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    missing = []
    for key, label in DIRECTIONS.items():
        for n in LENGTHS:
            name = f"real-{key}-hidden-profile-{n}"
            entry = _stage(name, "hidden-profile")
            if entry is None:
                missing.append(name)
                continue
            result = entry["result"]
            for condition, row in result["lengths"][str(n)]["pooled"].items():
                if condition == "kv recommended":
                    condition = _kv_label(result)
                ratio = row["vs_text"]["ratio"]
                share = "—" if ratio is None else f"{ratio:.2f} ({_interval(row['vs_text']['interval'])})"
                lines.append(f"| {label} | {n} | {condition} | {row['n']} | {row['exact_match']:.2f} "
                             f"({_interval(row['interval'])}) | {share} | {row['vs_text']['mcnemar_p']:.3f} | "
                             f"{row['ttft_s'] * 1000:.0f} ms | {row['ttft_speedup_vs_text']:.1f}x | "
                             f"{row['exchange_s']:.2f} s |")
    table = lines if len(lines) > 2 else []
    note = ["Not run yet: " + ", ".join(f"`python -m benchmarks run {m} --stage hidden-profile`" for m in missing)
            + "."] if missing else []
    return "\n\n".join(part for part in ("\n".join(table), "\n".join(note)) if part)


def hidden_profile_sides_markdown() -> str:
    """Exact match per fact format and per side (whose fact was asked), for each direction and length."""
    lines = ["| direction | tokens | format | asked about | no communication | text | kv pure | kv recommended |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, label in DIRECTIONS.items():
        for n in LENGTHS:
            entry = _stage(f"real-{key}-hidden-profile-{n}", "hidden-profile")
            if entry is None:
                continue
            for fmt, cell in entry["result"]["lengths"][str(n)]["formats"].items():
                conditions = cell["conditions"]
                for side in ("sender", "receiver"):
                    rows = [conditions[c]["by_side"][side] for c in CONDITIONS]
                    lines.append(f"| {label} | {n} | {fmt} | the {side}'s fact (n={rows[0]['n']}) | "
                                 + " | ".join(f"{r['exact_match']:.2f}" for r in rows) + " |")
    return "\n".join(lines)


def conversation_markdown(name: str = "real-conversation") -> str:
    """Per turn handed over: the listener, its history, each setting's recovered (± jackknife se) and KL on the
    listener's next turn, and the median seconds of reading the turn natively, of each hand-off, and of the sender's
    prefill of its turn alone."""
    entry = _stage(name, "conversation")
    if entry is None:
        return f"Not run yet: `python -m benchmarks run {name} --stage conversation`."
    result = entry["result"]
    names = list(result["settings"])
    agents = {"a": result["agent_a"], "b": result["agent_b"]}
    lines = ["| turn | to | history | " + " | ".join(f"{n}: recovered, KL" for n in names)
             + " | " + " | ".join(f"{n}, earlier turns native: recovered, KL" for n in names)
             + " | read natively | " + " | ".join(f"{n} hand-off" for n in names) + " | sender's prefill of the turn |",
             "| --- " * (5 + 3 * len(names)) + "|"]
    cell = lambda m: f"{m['recovered']:.3f} ± {m['recovered_se']:.3f}, {m['kl']:.3f}"  # noqa: E731
    for row in result["per_turn"]:
        s, t, only = row["settings"], row["median_s"], row["last_turn_only"]
        lines.append(f"| {row['turn']} | {agents[row['listener']].split('/')[-1]} | {row['history_tokens']} | "
                     + " | ".join(cell(s[n]) for n in names) + " | " + " | ".join(cell(only[n]) for n in names)
                     + f" | {t['native_s'] * 1000:.0f} ms | "
                     + " | ".join(f"{t[n + '_s'] * 1000:.0f} ms" for n in names)
                     + f" | {t['sender_prefill_s'] * 1000:.0f} ms |")
    return "\n".join(lines)


def hidden_profile_run_markdown(name: str = "real-s2g-hidden-profile-2048-keyscale") -> str:
    """Every condition of one hidden-profile run (its extra kv settings too), per length over both formats: exact
    match (95% CI), share of text (paired bootstrap CI), McNemar's p against text, and exact match per side."""
    entry = _stage(name, "hidden-profile")
    if entry is None:
        return f"Not run yet: `python -m benchmarks run {name} --stage hidden-profile`."
    lines = ["| tokens | condition | episodes | exact match (95% CI) | share of text (95% CI) | McNemar p vs text | "
             "the sender's facts | the receiver's notes | TTFT |", "| --- " * 9 + "|"]
    result = entry["result"]
    for tokens, length in result["lengths"].items():
        for condition, row in length["pooled"].items():
            ratio = row["vs_text"]["ratio"]
            share = "—" if ratio is None else f"{ratio:.2f} ({_interval(row['vs_text']['interval'])})"
            label = _kv_label(result) if condition == "kv recommended" else condition
            lines.append(f"| {tokens} | {label} | {row['n']} | {row['exact_match']:.2f} "
                         f"({_interval(row['interval'])}) | {share} | {row['vs_text']['mcnemar_p']:.3f} | "
                         f"{row['by_side']['sender']['exact_match']:.2f} | "
                         f"{row['by_side']['receiver']['exact_match']:.2f} | {row['ttft_s'] * 1000:.0f} ms |")
    return "\n".join(lines)
