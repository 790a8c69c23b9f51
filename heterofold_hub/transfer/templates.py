"""A handed-over message inside the receiver's chat template: which text is the template's (the receiver computes it
natively) and which is the message (mapped from the sender's cache).

    segments = chat_segments(receiver, document, system="You review code.")
    # [("native", "<|im_start|>system\\nYou review code.<|im_end|>\\n<|im_start|>user\\n"),
    #  ("content", document),
    #  ("native", "<|im_end|>\\n<|im_start|>assistant\\n")]
    assert "".join(text for _, text in segments) == receiver.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)

The message is located by rendering the template with a unique sentinel in its place, so any template works whose
output holds the message verbatim. A template that changes the message (Gemma 3's trims whitespace around each turn)
is refused with the fix, never split at a guessed place. The native segments carry the template's special tokens as
text (``<bos>``, ``<|im_start|>``): tokenize them without adding the tokenizer's own special tokens again.
"""

from __future__ import annotations

import secrets

from heterofold_hub.errors import HeteroFoldError

ROLES = ("user", "assistant")

# The chat template Google publishes with the Gemma 3 instruction-tuned models (google/gemma-3-*-it). The Gemma 3
# 270M GGUF shipped here (the pretrained model) carries no template; its vocabulary holds these turn tokens. Never
# applied implicitly (it would change the tokenizer's fingerprint, which adapters record): pass it as chat_template=.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- else -%}{{ raise_exception(\"Invalid content type\") }}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def chat_messages(message: str, *, role: str = "user", system: str | None = None,
                  history: list[dict] | None = None) -> list[dict]:
    """The conversation ``chat_segments`` renders: the system prompt, the earlier turns, then the handed-over one."""
    if role not in ROLES:
        raise HeteroFoldError(f"role={role!r}: a handed-over message is a {' or an '.join(ROLES)} turn (a document "
                              "given to the receiver, or the other agent's reply).")
    if not isinstance(message, str) or not message:
        raise HeteroFoldError(f"The handed-over message is {message!r}; pass the non-empty text the sender prefilled.")
    turns = [] if system is None else [{"role": "system", "content": system}]
    return turns + [dict(turn) for turn in history or []] + [{"role": role, "content": message}]


def chat_segments(receiver, message: str, *, role: str = "user", system: str | None = None,
                  history: list[dict] | None = None, chat_template: str | None = None, before: str = "",
                  after: str = "") -> list[tuple[str, str]]:
    """The receiver's chat template rendered around ``message``, split into ``("native", text)`` and one
    ``("content", message)``, whose texts concatenate to exactly ``apply_chat_template(messages, tokenize=False,
    add_generation_prompt=True)``, the receiver's turn open after it.

    ``receiver``: a :class:`~heterofold_hub.base_models.loading.Side` or a tokenizer; ``role``: ``"user"`` (a
    document handed to the receiver) or ``"assistant"`` (the other agent's reply, as the receiver's own turn);
    ``system``: the receiver's system prompt; ``history``: earlier turns (``{"role", "content"}``) before it;
    ``chat_template``: a Jinja template to use instead of the tokenizer's (e.g. :data:`GEMMA3_CHAT_TEMPLATE`);
    ``before`` / ``after``: native text inside the same turn around the message (``after="\\n\\nQuestion: ..."``
    asks about a handed-over document in the turn that carries it). Empty native texts are left out."""
    tokenizer = getattr(receiver, "tokenizer", receiver)
    name = getattr(receiver, "name", None) or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise HeteroFoldError(
            f"The receiver {name!r} has no chat template (its tokenizer carries none; the Gemma 3 270M GGUF shipped "
            "here is the pretrained model and has none). Pass chat_template= (a Jinja chat template, e.g. "
            "heterofold_hub.transfer.templates.GEMMA3_CHAT_TEMPLATE for the Gemma 3 family), or hand the text over "
            "without a template.")
    for label, text in (("before", before), ("after", after)):
        if not isinstance(text, str):
            raise HeteroFoldError(f"{label}={text!r}: pass the native text around the message as a string ('' for none).")
    messages = chat_messages(message, role=role, system=system, history=history)
    messages[-1]["content"] = before + message + after
    sentinel = _sentinel(template, messages)
    marked = _render(tokenizer, name, messages[:-1] + [{"role": role, "content": before + sentinel + after}],
                     template)
    if marked.count(sentinel) != 1:
        raise HeteroFoldError(f"The chat template of {name!r} renders the {role} turn's content "
                              f"{marked.count(sentinel)} times, not once (it drops, repeats or rewrites it); a "
                              "handed-over message must appear exactly once, as it is. Pass a chat_template= that "
                              "renders each turn's content once.")
    head, tail = marked.split(sentinel)
    whole = _render(tokenizer, name, messages, template)
    if whole != head + message + tail:
        trims = whole == head + message.strip() + tail
        why = ("it trims whitespace around a turn's content; pass the message stripped (message.strip()) and "
               "prefill the sender with that text" if trims else
               "it changes the content (escapes, filters or reformats it); pass a chat_template= that inserts a "
               "turn's content as it is")
        raise HeteroFoldError(f"The chat template of {name!r} does not keep the {role} message verbatim, so the "
                              f"mapped text would not be the text the receiver reads: {why}.")
    pieces = [("native", head), ("content", message), ("native", tail)]
    return [(kind, text) for kind, text in pieces if text]


def _sentinel(template: str, messages: list[dict]) -> str:
    """A marker that occurs in neither the template nor any message (letters and digits: no filter changes it)."""
    seen = template + "".join(str(m.get("content")) for m in messages)
    while True:
        sentinel = f"HEXFOLDCONTENT{secrets.token_hex(8).upper()}X"
        if sentinel not in seen:
            return sentinel


def turn_pieces(tokenizer, messages: list[dict], chat_template: str | None = None) -> list[tuple[str, str]]:
    """A whole conversation cut at each message: ``[(scaffolding before message i, message i), ...]`` plus a last
    ``("", closing scaffolding)``, whose texts concatenate to exactly ``apply_chat_template(messages)`` (no
    generation prompt). Turn by turn, a receiver reads piece i's scaffolding natively and its message natively or
    mapped. Refuses a template that does not render every message once, verbatim."""
    name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise HeteroFoldError(f"The tokenizer {name!r} has no chat template; pass chat_template= (e.g. "
                              "GEMMA3_CHAT_TEMPLATE for the Gemma 3 family).")
    base = _sentinel(template, messages)
    marks = [f"{base}{i}Y" for i in range(len(messages))]
    rest = _render(tokenizer, name, [{**m, "content": mark} for m, mark in zip(messages, marks)], template,
                   generation_prompt=False)
    pieces = []
    for message, mark in zip(messages, marks):
        head, found, rest = rest.partition(mark)
        if not found or mark in rest:
            raise HeteroFoldError(f"The chat template of {name!r} does not render each message once; pass a "
                                  "chat_template= that renders every turn's content once.")
        pieces.append((head, message["content"]))
    pieces.append(("", rest))
    if "".join(h + c for h, c in pieces) != _render(tokenizer, name, messages, template, generation_prompt=False):
        raise HeteroFoldError(f"The chat template of {name!r} changes the turns' text (it trims or reformats it): "
                              "strip the turns, or pass a chat_template= that inserts them as they are.")
    return pieces


def _render(tokenizer, name: str, messages: list[dict], template: str, *, generation_prompt: bool = True) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                             chat_template=template)
    except Exception as err:  # jinja2's TemplateError, and what a template raises itself (raise_exception)
        raise HeteroFoldError(f"The chat template of {name!r} refused this conversation ({type(err).__name__}: "
                              f"{err}). Roles given: {[m['role'] for m in messages]}; give the turns the template "
                              "accepts (many alternate user/assistant after an optional system prompt).") from err
