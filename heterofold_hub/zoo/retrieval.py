"""Synthetic long-context retrieval documents ("what is the code of X?").

The format is deliberately rigid: tiny models can only learn to copy a value
from far back in the context if the surrounding text is perfectly predictable.
The same generator builds the bundled corpus and later retrieval-accuracy
evals, so both see exactly the same format.

Layout of a document::

    <lead: python code, may be empty>
    # facts
    # the code of amber-falcon is 73914
    ...                                    (n_facts lines)
    <filler python code>
    # recall: the code of amber-falcon is 73914
    ...                                    (one question per fact, shuffled)
"""

from __future__ import annotations

import random

ADJECTIVES = (
    "amber", "quiet", "rapid", "silver", "hollow", "bright", "crimson", "gentle",
    "frozen", "golden", "hidden", "lucky", "misty", "noble", "olive", "proud",
    "rustic", "scarlet", "tidy", "urban", "vivid", "wild", "young", "zesty",
    "bold", "calm", "dusty", "eager", "fuzzy", "grand", "icy", "jolly",
)
NOUNS = (
    "falcon", "river", "maple", "comet", "harbor", "lantern", "meadow", "otter",
    "pepper", "quartz", "raven", "saddle", "tiger", "valley", "walrus", "anchor",
    "badger", "cactus", "dragon", "ember", "forest", "glacier", "island", "jungle",
    "kettle", "lemon", "marble", "needle", "orchid", "pebble", "rocket", "summit",
)

FACTS_HEADER = "# facts\n"


def fact_line(name: str, value: str) -> str:
    return f"# the code of {name} is {value}\n"


def question_prefix(name: str) -> str:
    """The text an eval feeds right before the model must produce the answer.

    It repeats the fact's own wording, so answering is exact in-context copying (what induction heads
    do) rather than a paraphrase lookup that tiny models learn far more slowly.
    """
    return f"# recall: the code of {name} is "


def make_retrieval_doc(
    rng: random.Random, filler: str, n_facts: int, lead: str = ""
) -> tuple[str, list[tuple[str, str]]]:
    """Build one retrieval document: ``lead`` text, the facts, ``filler``, then one recall line per fact.

    Returns ``(text, pairs)`` where ``pairs`` lists ``(question_prefix_text, answer)`` in the order
    the questions appear in ``text``. Each question block in ``text`` is exactly
    ``question_prefix_text + answer + "\\n"``, so an eval can cut ``text`` just before a question
    block, append its prefix and score the answer. All randomness comes from ``rng`` so that a
    seeded generator gives reproducible (and, per split, disjoint) facts.
    """
    if n_facts < 1:
        raise ValueError("n_facts must be >= 1")
    names: list[str] = []
    while len(names) < n_facts:  # distinct names within one document
        name = f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"
        if name not in names:
            names.append(name)
    # Five digits, no leading zero, so the answer length is always the same.
    values = [str(rng.randint(10000, 99999)) for _ in names]

    parts = [lead if not lead or lead.endswith("\n") else lead + "\n", FACTS_HEADER]
    parts += [fact_line(n, v) for n, v in zip(names, values)]
    if filler and not filler.endswith("\n"):
        filler += "\n"
    parts.append(filler)

    order = list(range(n_facts))
    rng.shuffle(order)
    pairs = [(question_prefix(names[i]), values[i]) for i in order]
    parts += [q + a + "\n" for q, a in pairs]
    return "".join(parts), pairs
