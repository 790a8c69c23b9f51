"""`hf-fold eval --task retrieval`: prompt construction, scoring, data hygiene and the command end to end."""

import json
import random

import pytest

from heterofold_hub.data.texts import read_texts
from heterofold_hub.errors import HeteroFoldError, UsageError
from heterofold_hub.base_models.loading import Side
from heterofold_hub.evaluation.retrieval import (FACT_RE, FACTS_HEADER, digit_accuracy, exact_match, filler_texts, known_facts,
                                      make_prompt, make_prompts, qualifying_lengths, summarise)
from heterofold_hub.zoo import DEMO_PAIR
from heterofold_hub.zoo.retrieval import fact_line, question_prefix

from helpers import hf_fold


@pytest.fixture(scope="module")
def receiver():
    return Side.load(DEMO_PAIR[1], with_model=False)  # tokenizer and KV layout only


@pytest.fixture(scope="module")
def fillers():
    return filler_texts(read_texts("bundled:heldout"))


@pytest.fixture(scope="module")
def prompts(receiver, fillers):
    return make_prompts(fillers, receiver, [512, 1024], 12, seed=0)


def n_tokens(receiver, text):
    return len(receiver.tokenizer(text)["input_ids"])


def test_prompt_length_is_the_target_in_receiver_tokens(receiver, prompts):
    for target, group in prompts.items():
        assert len(group) == 12
        for p in group:
            assert p.tokens == n_tokens(receiver, p.prompt) and p.target == target
            assert target - 3 <= p.tokens <= target  # filler trimmed to the character: never over, at most 3 short


def test_facts_come_first_and_the_prompt_ends_with_the_question(receiver, prompts):
    for target, group in prompts.items():
        for p in group:
            assert p.prompt.startswith(FACTS_HEADER)
            facts = p.prompt[: p.facts_end]
            assert len(FACT_RE.findall(facts)) == p.n_facts and 4 <= p.n_facts <= 6
            assert n_tokens(receiver, facts) <= target / 3  # early: within the first third (a fifth at 1024)
            assert p.question == question_prefix(p.name) and p.prompt.endswith(p.question)
            assert p.prompt.count("# recall:") == 1  # one question, the last line
            assert facts.splitlines(keepends=True)[1 + p.fact_index] == fact_line(p.name, p.answer)
            # the answer occurs exactly once: in its fact line, never in the filler or the question
            assert p.prompt.count(p.answer) == 1 and p.prompt.index(p.answer) < p.facts_end
            assert len(p.answer) == 5 and p.answer.isdigit()
    asked = {p.fact_index for group in prompts.values() for p in group}
    assert len(asked) >= 3  # the asked fact's position varies


def test_prompts_are_reproducible_and_lengths_independent(receiver, fillers, prompts):
    again = make_prompts(fillers, receiver, [1024], 3, seed=0)
    assert again[1024] == prompts[1024][:3]
    other = make_prompts(fillers, receiver, [1024], 3, seed=1)
    assert [p.prompt for p in other[1024]] != [p.prompt for p in again[1024]]


def test_eval_text_is_disjoint_from_fitting_and_training_text(fillers, prompts):
    calib, train = read_texts("bundled:calib"), read_texts("bundled:train")
    heldout = read_texts("bundled:heldout")
    assert fillers and set(fillers) <= set(heldout)
    assert not set(fillers) & set(calib) and not set(fillers) & set(train)  # filler files never fitted/trained on
    assert not known_facts(fillers)  # filler holds no facts of its own
    seen = known_facts(calib) | known_facts(train)
    assert len(seen) > 1000  # the regex does find the facts of the synthetic documents
    for group in prompts.values():
        for p in group:
            lines = known_facts([p.prompt[: p.facts_end]])
            assert len(lines) == p.n_facts and not lines & seen
            for text in calib + train:
                assert fact_line(p.name, p.answer) not in text


def test_excluded_facts_are_drawn_again(receiver, fillers):
    first = make_prompt(random.Random(7), fillers, receiver, 300)
    banned = known_facts([first.prompt[: first.facts_end]])
    second = make_prompt(random.Random(7), fillers, receiver, 300, exclude=banned)
    assert not known_facts([second.prompt[: second.facts_end]]) & banned


def test_too_short_a_length_is_a_clear_error(receiver, fillers):
    with pytest.raises(HeteroFoldError, match="cannot hold"):
        make_prompt(random.Random(0), fillers, receiver, 40)


@pytest.mark.parametrize("decoded, right", [
    ("73914\n# recall", True), ("73914", True), (" 73914\n", True), ("73914 # trailing words", True),
    ("739140", False), ("7391\n", False), ("73915\n", False), ("x73914", False), ("", False), ("\n73914", True),
    ("# 73914", False),
])
def test_exact_match(decoded, right):
    assert exact_match(decoded, "73914") is right


def test_digit_accuracy_and_summary():
    assert digit_accuracy("73914\n", "73914") == 1 and digit_accuracy("73000", "73914") == 0.4
    assert digit_accuracy("abc", "73914") == 0 and digit_accuracy("7391", "73914") == 0.8
    answers = {512: ["11111", "22222", "33333", "44444"]}
    decoded = {"native": {512: ["11111", "22222", "3", "0"]}, "no-context": {512: ["0", "0", "0", "0"]},
               "m": {512: ["11111", "0", "0", "0"]}}
    table = summarise(decoded, answers)
    assert table["native"]["512"]["accuracy"] == 0.5 and table["native"]["512"]["accuracy_se"] == pytest.approx(0.25)
    assert table["m"]["512"]["kept"] == 0.5 and table["m"]["512"]["correct"] == 1 and table["m"]["512"]["n"] == 4
    assert qualifying_lengths(table) == [512]
    none = summarise({"native": {512: ["0"]}, "no-context": {512: ["0"]}, "m": {512: ["1"]}}, {512: ["1"]})
    assert none["m"]["512"]["kept"] is None and qualifying_lengths(none) == []  # native 0: no kept share


def test_summary_of_hand_scored_answers():
    """Every figure of a two-length table, scored by hand from the strings (the comments give the reasoning)."""
    answers = {256: ["12345", "67890", "24680"], 512: ["11111", "22222"]}
    decoded = {
        # 256: right, right (digits end at the space), wrong in the last digit; 512: right, one digit short
        "native": {256: ["12345\n", " 67890 # x", "24681"], 512: ["11111", "2222"]},
        # 256: nothing right; 512: right, then a letter before the digits (no digit run at the start: 0 digits)
        "no-context": {256: ["0", "", "abc"], 512: ["11111", "x22222"]},
        # 256: right, a six-digit run (wrong, though its first five digits match), right after a newline; 512: none
        "m": {256: ["12345", "678901", "\n24680"], 512: ["0", "0"]},
    }
    expected = {  # (correct, n, digit accuracy, kept)
        "native": {"256": (2, 3, (1 + 1 + 0.8) / 3, 1.0), "512": (1, 2, (1 + 0.8) / 2, 1.0)},
        "no-context": {"256": (0, 3, 0.0, 0.0), "512": (1, 2, (1 + 0) / 2, 1.0)},
        "m": {"256": (2, 3, 1.0, 1.0), "512": (0, 2, 0.0, 0.0)},
    }
    table = summarise(decoded, answers)
    assert {name: set(rows) for name, rows in table.items()} == {name: {"256", "512"} for name in expected}
    for name, rows in expected.items():
        for length, (correct, n, digits, kept) in rows.items():
            row, accuracy = table[name][length], correct / n
            assert (row["correct"], row["n"]) == (correct, n) and row["accuracy"] == accuracy, (name, length, row)
            assert row["accuracy_se"] == pytest.approx((accuracy * (1 - accuracy) / n) ** 0.5, abs=1e-12)
            assert row["digit_accuracy"] == pytest.approx(digits, abs=1e-12) and row["kept"] == pytest.approx(kept)
    assert table["native"]["256"]["accuracy_se"] == pytest.approx(0.27217, abs=1e-5)  # sqrt(2/27)
    assert qualifying_lengths(table) == [256]  # native beats no-context by 2/3 at 256, by 0 at 512


def test_cli_retrieval_end_to_end(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    run = hf_fold("eval", "--task", "retrieval", "--lengths", "256,320", "--docs", "3", "--methods", "recolor",
                  "--calib-windows", "4", "--context-tokens", "128", "--continuation-tokens", "16",
                  "--json", str(out), "--plot", str(png))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["task"] == "retrieval" and result["lengths"] == [256, 320] and result["docs"] == 3
    assert (result["sender"], result["receiver"]) == DEMO_PAIR
    assert set(result["methods"]) == {"native", "no-context", "recolor", "heterofold"}  # + the registered adapter
    records = result["provenance"]["adapters"]
    assert records["heterofold"]["source"] == result["adapters"]["heterofold"] and "@v" in records["heterofold"]["source"]
    assert records["recolor"]["source"] == "fitted in this run" and result["provenance"]["git"]["commit"]
    # --docs 3: the JSON's examples hold every decoded answer, so each row is scored again here from them
    assert all(set(rows) == {"256", "320"} for rows in result["methods"].values())
    gaps = {}
    for length in ("256", "320"):
        examples = result["examples"][length]
        assert len(examples) == 3 and all(len(e["answer"]) == 5 for e in examples)
        scored = {name: [exact_match(e[name], e["answer"]) for e in examples] for name in result["methods"]}
        for name, rows in result["methods"].items():
            row, accuracy = rows[length], sum(scored[name]) / 3
            native = sum(scored["native"]) / 3
            assert (row["n"], row["correct"], row["accuracy"]) == (3, sum(scored[name]), accuracy), (name, length)
            assert row["accuracy_se"] == pytest.approx((accuracy * (1 - accuracy) / 3) ** 0.5)
            assert row["digit_accuracy"] == pytest.approx(sum(digit_accuracy(e[name], e["answer"]) for e in examples) / 3)
            assert row["kept"] == (pytest.approx(accuracy / native) if native else None)
        gaps[int(length)] = (sum(scored["native"]) - sum(scored["no-context"])) / 3
    assert result["qualifying_lengths"] == [n for n, gap in gaps.items() if gap >= 0.2 - 1e-12]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "native" in run.stdout and "no-context" in run.stdout and "320 tok" in run.stdout


@pytest.mark.parametrize("args, flags", [
    (["--task", "nope"], ["--task", "fidelity, retrieval"]),
    (["--task", "retrieval", "--lengths", "0"], ["--lengths", "0"]),
    (["--task", "retrieval", "--lengths", "abc"], ["--lengths", "abc"]),
])
def test_bad_arguments_exit_with_one_clear_message(args, flags):
    run = hf_fold("eval", *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.count("error:") == 1 and run.stdout == ""
    for flag in flags:
        assert flag in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


@pytest.mark.parametrize("args, flags", [
    (["--task", "retrieval", "--lengths", "512,x,64", "--docs", "0", "--methods", "magic", "--plot", "a.pdf"],
     ["--lengths: x, 64", "--docs", "--methods", "--plot"]),
    (["--task", "retrieval", "--lengths", "512,512"], ["repeats"]),
    (["--lengths", "512", "--plot", "a.png"], ["--lengths, --plot only apply to --task retrieval"]),
    (["--task", "retrieval", "--windows", "8"], ["--windows: only for --task fidelity"]),
    (["--task", "retrieval", "--dtype", "bfloat16"], ["--dtype: only for --task fidelity"]),
])
def test_argument_problems_are_gathered_before_any_model_loads(args, flags, monkeypatch):
    from typer.testing import CliRunner

    from heterofold_hub import cli
    from heterofold_hub.base_models import loading as models

    monkeypatch.setattr(models.Side, "load", lambda *a, **k: pytest.fail("a model was loaded"))
    result = CliRunner().invoke(cli.app, ["eval", *args])
    assert isinstance(result.exception, UsageError), result.output
    message = str(result.exception)
    for flag in flags:
        assert flag in message


def test_help_shows_a_retrieval_example():
    from typer.testing import CliRunner

    from heterofold_hub import cli

    result = CliRunner().invoke(cli.app, ["eval", "--help"], terminal_width=200)
    assert result.exit_code == 0 and "hf-fold eval --task retrieval" in result.output
