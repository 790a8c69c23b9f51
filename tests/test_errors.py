"""Bad input gets the project's own error, naming the value and the fix."""

import os
import subprocess
import sys

import pytest
import torch

from heterofold_hub.errors import AlignmentError, HeteroFoldError, PairMismatchError
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side, load_model
from heterofold_hub.transfer.pipeline import TransferPipeline

from conftest import tiny_model
from helpers import small_calibration, texts


@pytest.fixture(scope="module")
def pipe(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    _, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    return TransferPipeline(get_method("kv-ridge").fit(calib), sender, receiver)


def prefill(side, text):
    with torch.no_grad():
        return side.model(**side.tokenizer(text, return_tensors="pt"), use_cache=True).cache


@pytest.mark.parametrize("context", ["", "<s>", "<s></s><s>"])
def test_context_without_content_is_refused(pipe, context):
    cache = prefill(pipe.sender, context)
    with pytest.raises(AlignmentError, match="no characters|no tokens|longer context"):
        pipe.transfer(cache, context)


def test_context_longer_than_receiver_positions(pipe):
    text = texts(n=1, size=100_000)[0] * 3
    tokens = len(pipe.receiver.tokenizer(text).input_ids)
    assert tokens > pipe.receiver.spec.max_positions
    spec = pipe.sender.spec
    fake = [(torch.zeros(1, spec.kv_heads, len(pipe.sender.tokenizer(text).input_ids), spec.head_dim),) * 2] * spec.num_layers
    with pytest.raises(HeteroFoldError, match="allows 512 positions"):
        pipe.transfer(fake, text)


def test_cache_from_another_model_is_refused(pipe, unigram):
    text = texts()[0][:200]
    other = prefill(pipe.receiver, text)  # the receiver's own cache passed as the sender's
    with pytest.raises(PairMismatchError, match="does not come from the declared sender"):
        pipe.transfer(other, text)


def test_cache_of_integers_or_with_a_bad_layer_is_refused(pipe):
    text = texts()[0][:200]
    layers = [(l.keys, l.values) for l in prefill(pipe.sender, text).layers]
    with pytest.raises(PairMismatchError, match="holds torch.int64 tensors"):
        pipe.transfer([(k.long(), v.long()) for k, v in layers], text)
    used = max(s for sources in pipe.adapter.config.layer_sources for s in sources)  # a layer the map reads
    broken = list(layers)
    broken[used] = (layers[used][0][:, :, :-2], layers[used][1][:, :, :-2])  # one layer shorter than the rest
    with pytest.raises(PairMismatchError, match=f"Sender layer {used} keys have shape"):
        pipe.transfer(broken, text)


def test_cache_of_other_text_is_refused(pipe):
    cache = prefill(pipe.sender, texts()[0][:200])
    with pytest.raises(PairMismatchError, match="tokenizes the 1 text"):
        pipe.transfer(cache, texts()[0][:120])


def test_adapter_for_another_pair_is_refused(pipe, bpe):
    stranger = Side.from_model(tiny_model("gpt_neox", len(bpe), layers=2, seed=3), bpe)
    with pytest.raises(PairMismatchError, match="fitted for sender"):
        TransferPipeline(pipe.adapter, stranger, pipe.receiver)


def test_missing_local_model_folder():
    with pytest.raises(HeteroFoldError, match="does not exist"):
        load_model("./no/such/model")


def test_unknown_hub_id_offline_gives_one_clear_cli_error():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    run = subprocess.run([sys.executable, "cli.py", "eval", "--sender", "no-such-org/no-such-model", "--windows", "2"],
                         capture_output=True, text=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert run.returncode == 1 and run.stdout == ""  # a failure (no such model), on stderr
    assert "no-such-org/no-such-model" in run.stderr and "Traceback" not in run.stderr
