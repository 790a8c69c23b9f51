"""Every supported family as sender and as receiver: transfer runs and the receiver generates from it."""

import pytest
import torch
import transformers

from heterofold_hub.base_models.arch import SUPPORTED_ARCHITECTURES, Rope, kv_spec
from heterofold_hub.transfer.kvcache import full_cache
from heterofold_hub.errors import UnsupportedArchitectureError
from heterofold_hub.methods import get_method
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline

from conftest import tiny_model
from helpers import assert_same_cache, reference_layers, small_calibration, texts

ARCHS = sorted(SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize("receiver_arch", ARCHS)
@pytest.mark.parametrize("sender_arch", ARCHS)
def test_transfer_matrix(sender_arch, receiver_arch, bpe, unigram):
    sender = Side.from_model(tiny_model(sender_arch, len(bpe), layers=3, seed=1), bpe)
    receiver = Side.from_model(tiny_model(receiver_arch, len(unigram), layers=2, seed=2), unigram)
    _, calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
    pipe = TransferPipeline(get_method("recolor").fit(calib), sender, receiver)
    context = texts()[2][:200]
    with torch.no_grad():  # every position of every layer (Gemma 3's default cache drops sliding layers' past)
        sender_cache = sender.model(**bpe(context, return_tensors="pt"), use_cache=True, cache=full_cache()).cache
    result = pipe.transfer(sender_cache, context)
    # values, not only shapes: the fast path equals the reference path training differentiates through
    assert_same_cache(result.cache, reference_layers(pipe, sender_cache, pipe.plan(context)))
    receiver_tokens = len(unigram(context).input_ids)
    for layer, window in zip(result.cache.layers, receiver.spec.windows, strict=True):
        kept = receiver_tokens - 1 if window is None else window  # a sliding layer keeps only its window
        assert layer.keys.shape == (1, receiver.spec.kv_heads, kept, receiver.spec.head_dim)
    assert all(torch.isfinite(l.keys).all() and torch.isfinite(l.values).all() for l in result.cache.layers)
    # min_new_tokens: a random receiver may well pick its end-of-text token first
    new = pipe.generate(result, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert new.shape == (1, 3)


@pytest.mark.parametrize("arch", ARCHS)
def test_rope_round_trip_with_the_models_own_tables(arch):
    model = tiny_model(arch, 100)
    rope, spec = Rope(model), kv_spec(model)
    x = torch.randn(2, 7, spec.kv_heads, spec.head_dim)
    per_layer = rope.tables_per_layer(torch.arange(3, 10).expand(2, -1), torch.float32)
    tables = per_layer[0]
    if spec.layer_types is not None:  # Gemma 3: local and global layers turn by different tables
        full = per_layer[spec.full_layers[0]]
        assert not torch.allclose(full[1], tables[1])
        assert torch.allclose(Rope.unrotate(Rope.rotate(x, full), full), x, atol=1e-5)
    assert torch.allclose(Rope.unrotate(Rope.rotate(x, tables), tables), x, atol=1e-5)
    if spec.rope == "absolute":
        assert tables is None
    else:
        assert not torch.allclose(Rope.rotate(x, tables), x)
        if arch in ("phi3", "gpt_neox"):  # partial rotary: the tail of each head passes through
            rd = tables[0].shape[-1]
            assert rd < spec.head_dim and torch.equal(Rope.rotate(x, tables)[..., rd:], x[..., rd:])


@pytest.mark.parametrize("config", [
    transformers.GPTJConfig(n_embd=32, n_layer=1, n_head=2, vocab_size=50),
    transformers.BloomConfig(hidden_size=32, n_layer=1, n_head=2, vocab_size=50),
])
def test_unsupported_architecture_is_named(config):
    with pytest.raises(UnsupportedArchitectureError, match=repr(config.model_type)):
        kv_spec(config)


@pytest.mark.parametrize("arch", ARCHS)
def test_rope_from_config_alone_matches_the_loaded_model(arch):
    """A sender whose weights are never loaded (HeteroFoldModel's default) still un-rotates exactly."""
    model = tiny_model(arch, 100)
    positions = torch.arange(5, 40).expand(2, -1)
    from_model = Rope(model).tables_per_layer(positions, torch.float32)
    from_config = Rope(model.config).tables_per_layer(positions, torch.float32)
    for by_model, by_config in zip(from_model, from_config, strict=True):
        if by_model is None:
            assert by_config is None
        else:
            assert all(torch.equal(a, b) for a, b in zip(by_model, by_config))
