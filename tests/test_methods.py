"""The fits themselves: ridge, moment matching, layer choice, Dense Latent training, method registry."""

import pytest
import torch

from heterofold_hub.base_models.arch import KVSpec
from heterofold_hub.methods.features import CalibrationSet
from heterofold_hub.errors import HeteroFoldError, TrainingError
from heterofold_hub.methods import METHODS, PairAdapter, get_method, register_method
from heterofold_hub.methods.affine import AffineAdapter, fit_affine
from heterofold_hub.methods.dense_latent import _descend
from heterofold_hub.methods.kv_ridge import best_correlated_layers
from heterofold_hub.methods.stats import moment_match, ridge
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline

from conftest import tiny_model
from helpers import assert_same_cache, reference_layers, small_calibration, texts


def correlated(n=4000, din=12, dout=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, din, generator=g) @ torch.randn(din, din, generator=g) + 3
    a = torch.randn(din, dout, generator=g)
    return x, a


def test_ridge_recovers_a_linear_map():
    x, a = correlated()
    w, b = ridge(x, x @ a + 0.5, lam=1e-8)
    assert torch.allclose(w, a, atol=1e-3) and torch.allclose(b, torch.full((8,), 0.5), atol=1e-2)


def test_moment_matching_gives_the_receivers_mean_and_covariance():
    x, a = correlated()
    y = torch.tanh(x @ a) * 4 + torch.randn(len(x), 8) - 1  # not linear in x
    w, b = moment_match(x, y, eps=1e-9)
    out = x @ w + b
    assert torch.allclose(out.mean(0), y.mean(0), atol=1e-3)
    assert torch.allclose(torch.cov(out.T), torch.cov(y.T), rtol=1e-2, atol=1e-2)
    # ridge shrinks the output variance on the same data: the paper's argument for recoloring
    wr, br = ridge(x, y)
    assert torch.cov((x @ wr + br).T).trace() < 0.95 * torch.cov(y.T).trace()


def synthetic_calibration(n=3000):
    g = torch.Generator().manual_seed(1)
    spec_s = KVSpec("llama", 4, 2, 4, "rotate_half", 64)
    spec_r = KVSpec("qwen2", 2, 1, 4, "rotate_half", 64)
    sender = [(torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)) for _ in range(4)]
    mix = torch.randn(8, 4, generator=g)
    receiver = [(sender[0][0] @ mix, sender[0][1] @ mix), (sender[3][0] @ mix, sender[3][1] @ mix)]
    return CalibrationSet("s", "r", spec_s, spec_r, sender, receiver)


def test_kv_ridge_picks_the_correlated_sender_layer():
    calib = synthetic_calibration()
    assert best_correlated_layers(calib, k=1, lam=0.01) == [[0], [3]]
    adapter = get_method("kv-ridge").fit(calib)
    x = torch.cat([calib.sender[s][0] for s in adapter.config.layer_sources[0]], -1)
    k, _ = adapter.map_layer(0, x[None], x[None])
    target = calib.receiver[0][0]
    assert (k[0] - target).pow(2).mean() < 0.01 * target.var()  # ridge shrinks a little, never much


def test_dense_latent_learns_to_reconstruct():
    calib = synthetic_calibration()
    untrained = get_method("dense-latent").fit(calib, mse_steps=0, progress=False)
    trained = get_method("dense-latent").fit(calib, mse_steps=150, progress=False)

    def error(adapter):
        src = adapter.config.layer_sources[0]
        k, v = adapter.map_layer(0, torch.cat([calib.sender[s][0] for s in src], -1), torch.cat([calib.sender[s][1] for s in src], -1))
        return (k - calib.receiver[0][0]).pow(2).mean() / calib.receiver[0][0].var()

    assert error(trained) < 0.5 * error(untrained)



def test_dense_latent_stops_at_the_first_step_that_diverges():
    with pytest.raises(TrainingError, match=r"MSE step 1 made the loss (nan|inf) \(lr=1e\+30\)\. Lower the learning rate, e.g. lr=1e\+29"):
        get_method("dense-latent").fit(synthetic_calibration(200), mse_steps=5, lr=1e30, progress=False)
    calib = synthetic_calibration(200)
    calib.receiver[1][0][7, 2] = float("nan")
    with pytest.raises(TrainingError, match=r"MSE step 0 made the loss nan"):
        get_method("dense-latent").fit(calib, mse_steps=5, progress=False)
    # A finite loss whose update leaves inf weights (SGD with an infinite rate) is caught before the next step.
    layer = torch.nn.Linear(3, 1)
    loss = layer(torch.ones(2, 3)).pow(2).mean()
    with pytest.raises(TrainingError, match=r"receiver NLL step 4 left NaN/inf in the weights \['weight'"):
        _descend(torch.optim.SGD(layer.parameters(), lr=float("inf")), loss, layer, phase="receiver NLL", step=4, lr=1.0)


def test_unknown_method_lists_valid_ones():
    with pytest.raises(HeteroFoldError, match="kv-ridge"):
        get_method("kv-rigde")


def test_a_new_method_is_one_registered_class(tmp_path, bpe, unigram):
    """One decorated class is a whole method: found by name, fitted, saved, and loaded back by its name as that
    class, mapping the receiver's K/V as fitted (bit-identical to the adapter in memory) and transferring a real
    sender's cache with the values of the reference path."""

    @register_method("test-plain-ridge")
    class PlainRidge(AffineAdapter):
        @classmethod
        def fit(cls, calib, **options):
            return fit_affine(cls, calib, "test-plain-ridge", [[0], [3]], lambda x, y: ridge(x, y, lam=1e-8))

    try:
        assert get_method("test-plain-ridge") is PlainRidge and PlainRidge.method == "test-plain-ridge"
        calib = synthetic_calibration(500)
        fitted = get_method("test-plain-ridge").fit(calib)
        folder = fitted.save_pretrained(tmp_path / "plain")
        loaded = PairAdapter.from_pretrained(folder)
        assert type(loaded) is PlainRidge and loaded.config.layer_sources == [[0], [3]]
        # receiver layers 0 and 1 are sender layers 0 and 3 times one fixed matrix: the loaded maps reproduce them,
        # bit for bit as the adapter in memory does
        for layer, source in enumerate([0, 3]):
            k, v = loaded.map_layer(layer, *calib.sender[source])
            assert torch.allclose(k, calib.receiver[layer][0], atol=1e-4)
            assert torch.allclose(v, calib.receiver[layer][1], atol=1e-4)
            k_fitted, v_fitted = fitted.map_layer(layer, *calib.sender[source])
            assert torch.equal(k, k_fitted) and torch.equal(v, v_fitted)
        # on real models, saved and loaded, it transfers with the reference path's values on the fitted adapter
        sender = Side.from_model(tiny_model("llama", len(unigram), layers=4, seed=1), unigram)
        receiver = Side.from_model(tiny_model("qwen2", len(bpe), layers=2, seed=2), bpe)
        _, pair_calib = small_calibration(sender, receiver, context_tokens=32, windows=4)
        fitted = PlainRidge.fit(pair_calib)
        loaded = PairAdapter.from_pretrained(fitted.save_pretrained(tmp_path / "pair"))
        pipe = TransferPipeline(loaded, sender, receiver)
        text = texts(1, 600)[0]
        with torch.no_grad():
            cache = sender.model(**sender.tokenizer(text, return_tensors="pt"), use_cache=True).cache
        plan = pipe.plan(text)
        reference = reference_layers(TransferPipeline(fitted, sender, receiver), cache, plan)
        assert_same_cache(pipe.transfer(cache, plan=plan).cache, reference)
    finally:
        METHODS.pop("test-plain-ridge")
    with pytest.raises(HeteroFoldError, match="Unknown method 'test-plain-ridge'"):  # unregistered: no longer loads
        PairAdapter.from_pretrained(folder)
