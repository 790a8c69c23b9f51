"""A sender prefill that travels: saved to one safetensors file in one process, loaded in another, it transfers bit
for bit as the prefill it was, and everything that cannot be that prefill is refused with the file and the fix named.

The file is written by a real separate process (a subprocess), read back here, and compared with the same prefill
made in this process: the tiny pair for every property, the real pair (SmolLM2 -> Gemma 3) once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from heterofold_hub import HeteroFoldModel
from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.texts import read_texts
from heterofold_hub.errors import HeteroFoldError, IntegrityError, PairMismatchError
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.transfer.sender import SenderPrefill
from heterofold_hub.zoo import DEMO_PAIR, resolve_demo

from helpers import ROOT

TEXTS = ["def scale(values, factor):\n    return [v * factor for v in values]\n",
         "import os\nfor name in sorted(os.listdir('.')):\n    print(name)\n"]
SMOL, GEMMA = "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"


def write_in_another_process(sender: str, texts: list[str], path, *, surprisal: bool = False, dtype: str = "None"):
    """A fresh Python process loads ``sender``, prefills ``texts`` and saves the prefill to ``path``."""
    code = f"""
import torch
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.sender import prefill_sender
side = Side.load({sender!r}, local_files_only=True)
prefill_sender(side, {texts!r}, surprisal={surprisal}).save_pretrained({str(path)!r}, dtype={dtype})
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert run.returncode == 0, run.stderr[-3000:]
    return path


def assert_same_caches(a, b):
    for x, y in zip(a.layers, b.layers, strict=True):
        assert type(x) is type(y)
        assert torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)


@pytest.fixture(scope="module")
def tiny():
    return HeteroFoldModel.from_pretrained(*DEMO_PAIR, load_sender=True, local_files_only=True)


@pytest.fixture(scope="module")
def saved(tiny, tmp_path_factory):
    """The tiny sender's prefill of TEXTS (with surprisal), written by another process."""
    return write_in_another_process(DEMO_PAIR[0], TEXTS, tmp_path_factory.mktemp("wire") / "notes.safetensors",
                                    surprisal=True)


def test_a_prefill_from_another_process_transfers_bit_for_bit(tiny, saved):
    loaded = SenderPrefill.from_pretrained(saved, sender=tiny.sender)
    here = tiny.prefill_sender(TEXTS, surprisal=True)
    assert loaded.texts == here.texts and loaded.sender == here.sender and loaded.wire_dtype is None
    for (k, v), (k2, v2) in zip(loaded.layers, here.layers, strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    assert torch.equal(loaded.input_ids, here.input_ids) and torch.equal(loaded.attention_mask, here.attention_mask)
    assert all(torch.equal(a, b) for a, b in zip(loaded.offsets, here.offsets, strict=True))
    assert torch.equal(loaded.surprisal, here.surprisal)
    assert_same_caches(loaded.cache, here.cache)
    for settings in ({"recompute": 0}, {"recompute": 0.3, "select": "content"}):  # "content" reads the surprisal
        there, ours = tiny.transfer(loaded, TEXTS, **settings), tiny.transfer(here, TEXTS, **settings)
        assert_same_caches(there.cache, ours.cache)
        assert there.identity == ours.identity and there.cache_key() == ours.cache_key()


def test_a_loaded_prefill_refuses_another_text_exactly_as_in_process(tiny, saved):
    loaded, here = SenderPrefill.from_pretrained(saved), tiny.prefill_sender(TEXTS)
    other = [TEXTS[0], TEXTS[1].replace("sorted", "reversed")]
    with pytest.raises(PairMismatchError) as there:
        tiny.transfer(loaded, other)
    with pytest.raises(PairMismatchError) as ours:
        tiny.transfer(here, other)
    assert str(there.value) == str(ours.value) and str(there.value).startswith("Row 1 ")
    with pytest.raises(PairMismatchError, match="computed from another text"):
        tiny.transfer(loaded, TEXTS[::-1])


def test_a_prefill_from_another_model_is_refused_on_load_and_in_transfer(tiny, saved, tmp_path):
    """A copy of the sender under another name has the same KV layout, so only the recorded maker tells them
    apart (revisions unknown: a local folder); the receiver, as a sender, differs in layout."""
    copy = Side.load(str(shutil.copytree(resolve_demo(DEMO_PAIR[0]), tmp_path / "other-llama")), local_files_only=True)
    assert copy.spec == tiny.sender.spec
    with pytest.raises(PairMismatchError, match=r"made by 'heterofold/tiny-llama-code'.*sender here is '.*other-llama'"):
        SenderPrefill.from_pretrained(saved, sender=copy)
    with pytest.raises(PairMismatchError, match="KV layout"):
        SenderPrefill.from_pretrained(saved, sender=tiny.receiver)
    pipeline = TransferPipeline(tiny.pipeline.adapter, copy, tiny.receiver)
    with pytest.raises(PairMismatchError, match="not a cache of the pair's sender: it was made by 'heterofold/tiny"):
        pipeline.transfer(SenderPrefill.from_pretrained(saved), TEXTS)


def test_a_truncated_or_corrupted_file_is_refused_naming_it_and_the_fix(saved, tmp_path):
    data = saved.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(IntegrityError, match=rf"{cut}.*truncated or corrupted.*save_pretrained"):
        SenderPrefill.from_pretrained(cut)
    flipped = bytearray(data)
    flipped[-100] ^= 0x01  # one bit of one tensor (the data follow the JSON header)
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(IntegrityError, match=rf"{bad}.*do not match the checksum"):
        SenderPrefill.from_pretrained(bad)
    with pytest.raises(HeteroFoldError, match="No sender prefill file at"):
        SenderPrefill.from_pretrained(tmp_path / "nothing.safetensors")


def rewrite(source, target, **changes):
    with safe_open(str(source), framework="pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    save_file(tensors, str(target), metadata={**metadata, **changes})
    return target


def test_another_format_version_or_another_kind_of_file_is_refused(saved, tmp_path):
    newer = rewrite(saved, tmp_path / "v2.safetensors", format_version="2")
    with pytest.raises(IntegrityError, match="format version 2, but this heterofold-hub reads version 1. Upgrade"):
        SenderPrefill.from_pretrained(newer)
    adapter = tmp_path / "weights.safetensors"
    save_file({"w": torch.zeros(2)}, str(adapter))
    with pytest.raises(IntegrityError, match=r"not a heterofold.sender_prefill file"):
        SenderPrefill.from_pretrained(adapter)
    lying = rewrite(saved, tmp_path / "lying.safetensors", texts=json.dumps(["another text", TEXTS[1]]))
    with pytest.raises(IntegrityError, match="text 0 does not match its recorded digest"):
        SenderPrefill.from_pretrained(lying)


def test_bfloat16_on_the_wire_halves_the_file_and_says_so_in_the_identity(tiny, tmp_path):
    here = tiny.prefill_sender(TEXTS)
    wide = here.save_pretrained(tmp_path / "f32")  # a folder: sender_prefill.safetensors inside
    narrow = here.save_pretrained(tmp_path / "bf16.safetensors", dtype=torch.bfloat16)
    assert wide == tmp_path / "f32" / "sender_prefill.safetensors"
    kv = sum(k.numel() + v.numel() for k, v in here.layers)
    assert abs(wide.stat().st_size - narrow.stat().st_size - 2 * kv) < 64  # the headers differ by a few bytes
    loaded = SenderPrefill.from_pretrained(narrow, sender=tiny.sender)
    assert loaded.wire_dtype == "bfloat16"
    for (k, v), (k2, v2) in zip(loaded.layers, here.layers, strict=True):
        assert k.dtype is torch.float32 and torch.equal(k, k2.bfloat16().float()) and torch.equal(v, v2.bfloat16().float())
    made = tiny.transfer(loaded, TEXTS, recompute=0)
    assert made.identity["dtypes"]["sender_wire"] == "bfloat16"
    assert made.cache_key() != tiny.transfer(SenderPrefill.from_pretrained(tmp_path / "f32"), TEXTS, recompute=0).cache_key()
    with pytest.raises(HeteroFoldError, match="torch.float32, torch.bfloat16, torch.float16"):
        here.save_pretrained(tmp_path / "x.safetensors", dtype=torch.int8)


def test_the_real_pair_transfers_a_prefill_from_another_process_bit_for_bit(smol, gemma, tmp_path):
    """SmolLM2 prefills in a subprocess; Gemma 3 receives here, across its 512-token sliding window."""
    text = read_texts("bundled:unseen-code")[0][:2400]
    saved = write_in_another_process(SMOL, [text], tmp_path / "smol.safetensors")
    model = HeteroFoldModel.from_pretrained(smol, gemma, local_files_only=True)
    loaded = SenderPrefill.from_pretrained(saved, sender=smol)
    here = TransferPipeline(model.pipeline.adapter, smol, gemma)  # the same adapter, a fresh plan cache
    assert_same_caches(loaded.cache, model.prefill_sender(text).cache)
    there, ours = model.transfer(loaded, text, recompute=0), here.transfer(model.prefill_sender(text), text)
    assert there.input_ids.shape[1] > 512
    assert_same_caches(there.cache, ours.cache)
    with pytest.raises(PairMismatchError, match="Row 0"):
        model.transfer(loaded, text[:-1])
    with pytest.raises(PairMismatchError, match="revision sha256:b179"):
        SenderPrefill.from_pretrained(saved, sender=Side(name=GEMMA, tokenizer=smol.tokenizer, spec=smol.spec,
                                                         rope=smol.rope, source_revision=gemma.revision))
