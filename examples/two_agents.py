"""Two agents of different families pass a conversation back and forth as KV caches (runs on the shipped real pair).

The planner (Gemma 3 270M) reads a document and hands it to the reviewer (SmolLM2-135M-Instruct) inside the
reviewer's own chat template: the template's scaffolding is computed natively, the document is mapped from the
planner's cache. The reviewer's reply goes back the other way and is appended to the planner's cache as a new turn,
without reading the document again. The planner's prefill is saved and loaded as a file on the way, as it would be
between two processes. Run it: ``.venv/bin/python examples/two_agents.py``.
"""

import tempfile

from heterofold_hub import HeteroFoldModel, Native, SenderPrefill
from heterofold_hub.transfer.segments import Mapped, chat

GEMMA, SMOL = "gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1"
DOCUMENT = ("# inventory service\n# the code of amber-falcon is 73914\n# the code of quiet-river is 50218\n\n"
            + "".join(f"def restock_{i}(items):\n    return [item * {i} for item in items]\n\n" for i in range(2, 14)))

to_reviewer = HeteroFoldModel.from_pretrained(GEMMA, SMOL, load_sender=True)  # maps Gemma 3 caches into SmolLM2
to_planner = HeteroFoldModel.from_pretrained(SMOL, GEMMA, load_sender=True)  # and back
greedy = dict(max_new_tokens=24, do_sample=False)

# 1. The planner prefills the document (it would anyway, to work on it) and ships its cache as a file.
planner_cache = to_reviewer.prefill_sender(DOCUMENT)
with tempfile.TemporaryDirectory() as folder:
    path = planner_cache.save_pretrained(folder)
    shipped = SenderPrefill.from_pretrained(path, sender=to_reviewer.sender)  # refuses another model's file
print(f"planner's prefill: {len(DOCUMENT)} characters, file {path.name}")

# 2. The reviewer reads it inside its chat template: scaffolding native, document mapped. No prefill of the document.
segments = chat(to_reviewer.receiver, shipped, system="You review code. Be brief.")
reviewer = to_reviewer.compose(segments)
print(f"reviewer's cache: {[part['segment'] for part in reviewer.segments]}")
reply_ids = to_reviewer.generate(reviewer, prompt="Review:", **greedy)
reply = "Review:" + to_reviewer.receiver.tokenizer.decode(reply_ids[0], skip_special_tokens=True)
print(f"reviewer (SmolLM2) wrote: {reply!r}")

# 3. The reply goes back: the planner keeps its own cache of the document and appends the reviewer's turn, mapped
#    from the reviewer's prefill of it. Only the new turn is mapped.
planner = to_planner.compose([Native(DOCUMENT)])  # the planner's own cache of what it wrote
reply_cache = to_planner.prefill_sender(reply)
planner = to_planner.append(planner, Native("\n# review:\n"), Mapped(reply_cache))
print(f"planner's cache: {[part['segment'] for part in planner.segments]}")
answer = to_planner.generate(planner, prompt="\n# the code of quiet-river is ", max_new_tokens=6, do_sample=False)
print(f"planner (Gemma 3) recalls: {to_planner.receiver.tokenizer.decode(answer[0], skip_special_tokens=True)!r}")
