"""``hf-fold demo``: one real hand-off, end to end, for a first look.

SmolLM2-135M (the sender agent) reads a document holding a few facts; Gemma 3 270M (the receiver agent) answers
questions about it three ways: after its own prefill of the document (what a user runs today), from the pure
transfer of SmolLM2's cache, and with the adapter version's recommended setting (the transfer plus a native
recompute of the line the question asks about, and the keys left mapped scaled where it says so). Each row shows
the answers and what the receiver paid to hold the document: its own prefill, or the hand-off (plan + map +
recompute), timed side by side in this one run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from heterofold_hub.errors import UsageError

REAL_PAIR = ("gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m")
FACTS = (("amber-falcon", "73914"), ("quiet-river", "50218"), ("stone-heron", "66031"))


@dataclass
class DemoArgs:
    sender: str = REAL_PAIR[0]
    receiver: str = REAL_PAIR[1]
    helpers: int = 38  # filler functions after the facts: about 900 receiver tokens of document
    repeats: int = 3  # timed rounds per condition (the median is shown), after one untimed warm-up

    def validate(self) -> None:
        problems = []
        if self.helpers < 1:
            problems.append(f"--helpers: {self.helpers}; give at least 1 filler function")
        if self.repeats < 1:
            problems.append(f"--repeats: {self.repeats}; give at least 1 timed round")
        if problems:
            raise UsageError("; ".join(problems))


def document(helpers: int) -> str:
    """The facts first (the farthest from the question), then ``helpers`` small functions of filler."""
    facts = "".join(f"# the code of {name} is {value}\n" for name, value in FACTS)
    filler = "".join(f"def scale_{i}(values):\n    return [v * {i} for v in values]\n\n" for i in range(2, 2 + helpers))
    return "# facts\n" + facts + "\n" + filler


def question(name: str) -> str:
    return f"# recall: the code of {name} is "


def median_seconds(call, repeats: int) -> float:
    call()  # warm-up: first-call allocations and lazy tables are not what a running agent pays
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_demo(args: DemoArgs, *, log=print) -> dict:
    """Load the pair, hand the document over and ask every question under each condition; returns the rows."""
    from heterofold_hub.modeling import HeteroFoldModel
    from heterofold_hub.transfer.config import TransferConfig
    from heterofold_hub.transfer.pipeline import native_prefill

    log(f"Loading {args.sender} -> {args.receiver} (the first run converts their GGUF files to safetensors: "
        "a few minutes, once)")
    model = HeteroFoldModel.from_pretrained(args.sender, args.receiver, load_sender=True)
    text = document(args.helpers)
    prefill = model.prefill_sender(text)
    tokens = int(native_prefill(model.receiver, text).attention_mask.sum()) - 1
    log(f"Adapter: {model.resolved.describe()}; document: {tokens} receiver tokens, {len(FACTS)} facts at its start")
    recommended = model.recommended or TransferConfig()
    conditions = {
        "own prefill": None,
        "pure transfer": TransferConfig(),
        f"recommended: {_name(recommended)}": recommended,
    }
    decode = dict(max_new_tokens=6, do_sample=False)
    tok = model.receiver.tokenizer
    rows = []
    for label, config in conditions.items():
        answers, seconds = [], []
        for name, _ in FACTS:
            asked = question(name)
            if config is None:
                make = lambda: native_prefill(model.receiver, text)  # noqa: E731
            else:
                make = lambda c=config, q=asked: model.transfer(prefill, text, config=c, query=q)  # noqa: E731
            seconds.append(median_seconds(make, args.repeats))
            new = model.generate(make(), prompt=asked, **decode)
            answers.append(tok.decode(new[0], skip_special_tokens=True).strip().split()[0] if new.numel() else "")
        rows.append({"condition": label, "answers": answers, "seconds": statistics.median(seconds),
                     "correct": sum(a.startswith(v) for a, (_, v) in zip(answers, FACTS))})
        log(f"  {label}: {rows[-1]['correct']}/{len(FACTS)} answered")
    native = rows[0]["seconds"]
    for row in rows:
        row["speedup"] = native / row["seconds"]
    return {"sender": args.sender, "receiver": args.receiver, "adapter": model.resolved.describe(),
            "document_tokens": tokens, "facts": dict(FACTS), "rows": rows}


def _name(config) -> str:
    return config.label if config.active else "pure"


def demo_table(result: dict):
    """Rows: the conditions; columns: the answers (each marked right or wrong), how long the receiver took to hold
    the document, and the speed-up over its own prefill."""
    from rich.table import Table

    facts = result["facts"]
    table = Table(title=f"{result['sender']} -> {result['receiver']}, a {result['document_tokens']}-token document: "
                        f"'the code of NAME is' for {', '.join(facts)}", title_justify="left")
    for column, justify in (("the receiver holds the document by", "left"), (f"answers ({', '.join(facts.values())})", "left"),
                            ("right", "right"), ("ready in", "right"), ("speed-up", "right")):
        table.add_column(column, justify=justify)
    for row in result["rows"]:
        marks = " ".join(a + ("" if a.startswith(v) else "(x)") for a, v in zip(row["answers"], facts.values()))
        table.add_row(row["condition"], marks, f"{row['correct']}/{len(facts)}", f"{row['seconds'] * 1000:.0f} ms",
                      f"{row['speedup']:.1f}x")
    return table
