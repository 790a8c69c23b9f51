"""The agent benchmarks (issue: agents, item 6) on the tiny pair: the hidden-profile episode's texts are the receiver's
rendered template, every condition continues one cached prefix, the statistics are the paired ones; a conversation's
caches hold the rendered turns in order and the native reference scores as native."""

from __future__ import annotations

import random

import pytest
import torch

from heterofold_hub.data.texts import read_texts
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.evaluation import conversation as conv
from heterofold_hub.evaluation.handoff import make_handoff_prompts
from heterofold_hub.evaluation.hidden_profile import (CONDITIONS, episode_segments, evaluate_hidden_profile,
                                                      make_episode, paired_ratio, summarise_runs)
from heterofold_hub.evaluation.retrieval import filler_texts
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.transfer.config import TransferConfig

TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[/{{ m['role'] }}]\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")


@pytest.fixture(scope="module")
def pair():
    a_to_b = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code", load_sender=True)
    b_to_a = HeteroFoldModel.from_pretrained("heterofold/tiny-qwen-code", "heterofold/tiny-llama-code", load_sender=True)
    return a_to_b, b_to_a


@pytest.fixture(scope="module")
def prompts(pair):
    fillers = filler_texts(read_texts("bundled:unseen"))
    return {fmt: make_handoff_prompts(fillers, pair[0].receiver, 256, 4, fmt=fmt) for fmt in ("code", "prose")}


def rendered(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, chat_template=TEMPLATE)


@pytest.mark.parametrize("fmt", ["code", "prose"])
def test_an_episode_asks_each_side_in_turn_about_a_fact_only_that_side_holds(prompts, fmt):
    rng = random.Random(0)
    for i, prompt in enumerate(prompts[fmt]):
        episode = make_episode(rng, prompt, i)
        holder, other = ((episode.document, episode.notes) if i % 2 == 0 else (episode.notes, episode.document))
        assert episode.side == ("sender" if i % 2 == 0 else "receiver")
        assert holder.count(episode.answer) == 1 and episode.answer not in other
        name = episode.answer_prefix.split(" of ")[1].removesuffix(" is ")
        assert name in holder and name not in other and name in episode.question


def test_every_condition_reads_the_receivers_rendered_template_after_one_cached_prefix(pair, prompts):
    model = pair[0]
    tok = model.receiver.tokenizer
    episode = make_episode(random.Random(0), prompts["code"][0], 0)
    parts = episode_segments(model, episode, TEMPLATE)
    system = {"role": "system", "content": parts["prefix"][0].text.split("[system]")[1].split("[/system]")[0]}
    assert episode.notes in system["content"]
    with_document = rendered(tok, [system, {"role": "user", "content": episode.document + "\n\n" + episode.question}])
    alone = rendered(tok, [system, {"role": "user", "content": episode.question}])
    prefix = parts["prefix"][0].text
    assert prefix + parts["text"][0].text == with_document + episode.answer_prefix
    assert prefix + episode.document + parts["kv"][0].text == with_document + episode.answer_prefix
    assert prefix + parts["no communication"][0].text == alone + episode.answer_prefix


def test_the_hidden_profile_runs_every_condition_on_every_episode(pair, prompts):
    model = pair[0]
    config = TransferConfig(recompute=0.1, select="statement")
    logged = []
    extra = {"kv tail@0.1 k0.5": TransferConfig(recompute=0.1, select="tail", mapped_key_scale=0.5)}
    result = evaluate_hidden_profile(model, prompts["code"], config, chat_template=TEMPLATE, extra=extra,
                                     log=logged.append)
    assert result["sides"] == ["sender", "receiver", "sender", "receiver"]
    assert list(result["conditions"]) == [*CONDITIONS, *extra] and logged == [logged[0]] and logged[0].startswith("4/4")
    again = evaluate_hidden_profile(model, prompts["code"], config, chat_template=TEMPLATE)  # the same episodes
    assert all(again["conditions"][c]["hits"] == result["conditions"][c]["hits"] for c in CONDITIONS)
    text = result["conditions"]["text"]
    assert text["vs_text"]["mcnemar_p"] == 1.0 and text["ttft_speedup_vs_text"] == 1.0
    for name, row in result["conditions"].items():
        assert row["n"] == 4 and len(row["hits"]) == 4 and row["correct"] == sum(row["hits"])
        runs = [run[name] for run in result["runs"]]
        assert all(r["exchange_s"] > r["ttft_s"] > 0 for r in runs if name != "no communication")


def test_paired_statistics():
    assert paired_ratio([1, 1, 1, 1], [1, 1, 1, 1]) == {"ratio": 1.0, "interval": (1.0, 1.0)}
    half = paired_ratio([1, 0] * 20, [1, 1] * 20)
    assert half["ratio"] == 0.5 and half["interval"][0] < 0.5 < half["interval"][1]
    assert paired_ratio([1, 0], [0, 0]) == {"ratio": None, "interval": None}
    with pytest.raises(HeteroFoldError, match="one non-zero length"):
        paired_ratio([1], [1, 0])
    run = lambda kv, text: {c: {"hit": text if c == "text" else kv, "decoded": "", "ttft_s": 1.0 if c == "text" else 0.25,  # noqa: E731
                                "exchange_s": 2.0} for c in CONDITIONS}
    rows = summarise_runs(["sender", "receiver"] * 5, [run(1, 0)] * 10)
    kv = rows["kv pure"]
    assert kv["exact_match"] == 1.0 and rows["text"]["exact_match"] == 0.0
    assert kv["vs_text"]["mcnemar_p"] == pytest.approx(2 / 2 ** 10) and kv["ttft_speedup_vs_text"] == 4.0
    assert kv["by_side"]["sender"]["n"] == 5 and kv["vs_text"]["ratio"] is None


def test_turn_pieces_rebuild_the_rendered_conversation(pair):
    tok = pair[0].receiver.tokenizer
    messages = [{"role": "system", "content": "the document"}, {"role": "user", "content": "turn one"},
                {"role": "assistant", "content": "turn two"}]
    pieces = conv.turn_pieces(tok, messages, TEMPLATE)
    assert [c for _, c in pieces] == ["the document", "turn one", "turn two", "[/assistant]\n"]
    assert "".join(h + c for h, c in pieces) == tok.apply_chat_template(messages, tokenize=False,
                                                                       chat_template=TEMPLATE)
    with pytest.raises(HeteroFoldError, match="changes the turns' text"):
        conv.turn_pieces(tok, messages, TEMPLATE.replace("m['content']", "m['content'] | upper"))


def test_a_conversation_keeps_each_agents_turns_in_order_and_scores_native_as_native(pair):
    a_to_b, b_to_a = pair
    settings = {"kv pure": TransferConfig(), "kv tail@0.1": TransferConfig(recompute=0.1, select="tail")}
    text = read_texts("bundled:unseen")[0]
    rows = conv.run_conversation(a_to_b, b_to_a, text, settings, document_tokens=48, turn_tokens=40, turns=3,
                                 score_tokens=16, templates={"a": TEMPLATE, "b": TEMPLATE})
    assert [(r["turn"], r["speaker"], r["listener"]) for r in rows] == [(1, "a", "b"), (2, "b", "a"), (3, "a", "b")]
    assert all(r2["history_tokens"] > r1["history_tokens"] for r1, r2 in zip(rows, rows[1:]))
    for row in rows:
        assert row["measures"]["native"]["kl"] == 0.0 and row["measures"]["native"]["top1"] == 1.0
        assert set(row["measures"]) == {"native", "without", *settings, *map(conv.last_only_name, settings)}
        assert all(torch.isfinite(torch.tensor(m["nll"])) for m in row["measures"].values())
    # each listener's first hand-off has no earlier mapped turn, so a setting equals its control there; by turn 3
    # agent B's history holds turn 1 mapped, which the control reads natively
    for name in settings:
        control = conv.last_only_name(name)
        assert [rows[k]["measures"][name] == rows[k]["measures"][control] for k in range(3)] == [True, True, False]


def test_the_listeners_native_cache_is_the_rendered_conversation(pair):
    """An agent's native cache after its turns is the receiver reading the rendered conversation's pieces in order."""
    _, b_to_a = pair
    tok = b_to_a.receiver.tokenizer
    messages = [{"role": "user", "content": "a shared document"}, {"role": "assistant", "content": "my turn"},
                {"role": "user", "content": "their turn"}]
    pieces = conv.turn_pieces(tok, messages, TEMPLATE)
    agent = conv.Agent(b_to_a, pieces, {})
    agent.own_turn(1)
    agent.hear(2, b_to_a, None)  # no setting: only the native read
    expected = tok(pieces[0][0] + pieces[0][1], add_special_tokens=False)["input_ids"]
    for head, content in pieces[1:3]:
        expected += tok(head, add_special_tokens=False)["input_ids"] + tok(content, add_special_tokens=False)["input_ids"]
    assert agent.native.input_ids[0].tolist() == expected
    assert agent.before.input_ids.shape[1] < agent.native.input_ids.shape[1]


def test_a_conversation_refuses_a_select_that_reads_a_question_and_a_mismatched_pair(pair):
    a_to_b, b_to_a = pair
    kw = dict(conversations=1, document_tokens=32, turn_tokens=32, turns=2, score_tokens=8, templates={})
    with pytest.raises(HeteroFoldError, match="reads the receiver's question"):
        conv.evaluate_conversation(a_to_b, b_to_a, ["x"], {"s": TransferConfig(recompute=0.05, select="statement")}, **kw)
    with pytest.raises(HeteroFoldError, match="one pair both ways"):
        conv.evaluate_conversation(a_to_b, a_to_b, ["x"], {}, **kw)


def test_continuation_logits_are_the_receivers_own_over_the_whole_text(pair):
    """Teacher-forced logits read after a cached result equal one forward over the whole token sequence."""
    model = pair[0]
    tok, receiver = model.receiver.tokenizer, model.receiver.model
    result = model.compose([conv.Native("def add(a, b):\n")])
    ids = torch.tensor(tok("    return a + b\n", add_special_tokens=False)["input_ids"])
    got = conv.continuation_logits(receiver, result, ids)
    whole = torch.cat([result.input_ids[0], ids])
    with torch.no_grad():
        reference = receiver(input_ids=whole[None]).logits[0, result.input_ids.shape[1] - 1:-1].float()
    assert got.shape == reference.shape and torch.allclose(got, reference, atol=1e-4)


def test_the_conversation_table_and_plot_show_each_setting_beside_its_control(pair, tmp_path):
    """The benchmark's table and plot read every turn's setting and its last-turn-only control."""
    from benchmarks.agents import conversation_plot, conversation_table

    a_to_b, b_to_a = pair
    settings = {"kv pure": TransferConfig(), "kv tail@0.1": TransferConfig(recompute=0.1, select="tail")}
    result = conv.evaluate_conversation(a_to_b, b_to_a, read_texts("bundled:unseen"), settings, conversations=2,
                                        document_tokens=48, turn_tokens=40, turns=3, score_tokens=16,
                                        templates={"a": TEMPLATE, "b": TEMPLATE})
    result |= {"agent_a": a_to_b.sender.name, "agent_b": a_to_b.receiver.name}
    first = result["per_turn"][0]
    assert first["last_turn_only"] == first["settings"]  # no earlier mapped turn yet: the control is the setting
    table = conversation_table(result)
    assert [c.header for c in table.columns][-4:] == ["prefill", "kv pure hand-off", "kv tail@0.1 hand-off",
                                                      "sender's prefill"]
    assert "kv tail@0.1 KL, last turn only" in [c.header for c in table.columns] and table.row_count == 3
    conversation_plot(result, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
