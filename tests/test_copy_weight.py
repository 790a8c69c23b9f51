"""Copy-weighted calibration: which continuation targets count as copies of the context, the weighted KL, and
that ``copy_weight`` reaches the training loss."""

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.batches import Batch, prepare_batch
from heterofold_hub.data.windows import make_windows
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods.features import collect
from heterofold_hub.trainers.calibrate import calibrate
from heterofold_hub.trainers.module import copy_weights, kl_to_teacher
from heterofold_hub.trainers.train import TrainArgs

from conftest import tiny_model


def token_batch(context: list[int], continuation: list[int], prefix: list[int] = (2,)) -> Batch:
    """A one-window batch with only the token fields ``copied_targets`` reads."""
    prefix, context, continuation = (torch.tensor(list(x)) for x in (prefix, context, continuation))
    native = torch.cat([prefix, context, continuation[:-1]])[None]
    query = torch.cat([context[-1:], continuation[:-1]])[None]
    return Batch(alignment=None, features=None, query=query, targets=continuation[None], native_ids=native, prefix=prefix)


def test_a_target_is_a_copy_when_it_and_the_three_tokens_before_it_occur_in_the_context():
    context = [10, 11, 12, 13, 14, 15, 16, 17]
    # 4-grams ending at each target: (15,16,17,10) (16,17,10,11) (17,10,11,12) no; (10,11,12,13) (11,12,13,14) yes
    assert token_batch(context, [10, 11, 12, 13, 14]).copied_targets()[0].tolist() == [False, False, False, True, True]
    # a run continued after a new token: only once the 4-gram (14,15,16,17) is whole again
    assert token_batch(context, [99, 14, 15, 16, 17]).copied_targets()[0].tolist() == [False] * 4 + [True]
    assert not token_batch(context, [20, 21, 22, 23, 24]).copied_targets().any()
    # the first target's 4-gram is the context's last 3 tokens and itself: (3, 16, 17, 5) opens this context
    assert token_batch([3, 16, 17, 5, 8, 9, 3, 16, 17], [5, 6]).copied_targets()[0].tolist() == [True, False]
    assert token_batch([10, 11, 12, 13], [11, 12, 13]).copied_targets(ngram=2)[0].tolist() == [False, True, True]


@pytest.fixture(scope="module")
def repeated(bpe, unigram):
    """A tiny pair and 4 windows of text whose function repeats while its block numbers do not."""
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=2, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    line = "def scale(values, factor):\n    return [v * factor for v in values]\n"
    text = "".join(f"# block {i}\n{line}" for i in range(90))
    windows = make_windows([text], receiver, context_tokens=48, continuation_tokens=16, max_windows=4)
    return sender, receiver, windows


def test_copy_weights_mark_real_windows_of_repeated_text(repeated):
    sender, receiver, windows = repeated
    batch = prepare_batch(windows[:2], sender, receiver)
    copied = batch.copied_targets()
    assert copied.shape == batch.targets.shape
    # the function repeats (copies), the block numbers do not (this tokenizer spends several tokens on each)
    assert 0.3 < copied.float().mean() < 1.0, copied
    weights = copy_weights(batch, 3.0)
    assert set(weights.unique().tolist()) == {1.0, 4.0}
    assert torch.equal(weights == 4.0, copied)
    assert copy_weights(batch, 0.0) is None


def test_weighted_kl_is_the_weighted_mean_of_per_token_kl():
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    t = teacher.log_softmax(-1)
    per_token = (t.exp() * (t - student.log_softmax(-1))).sum(-1)
    weights = torch.tensor([[1.0, 4.0, 1.0], [4.0, 4.0, 1.0]])
    assert torch.allclose(kl_to_teacher(student, teacher, weights), (per_token * weights).sum() / weights.sum())
    assert torch.allclose(kl_to_teacher(student, teacher, torch.ones(2, 3)), kl_to_teacher(student, teacher))
    assert not torch.allclose(kl_to_teacher(student, teacher, weights), kl_to_teacher(student, teacher))


def test_copy_weight_changes_what_calibration_learns(repeated):
    sender, receiver, windows = repeated
    calib = collect(sender, receiver, windows, progress=False)
    batches = [prepare_batch(windows[i : i + 2], sender, receiver) for i in range(0, 4, 2)]
    kw = dict(steps=3, lr=3e-3, progress=False, init="recolor")
    plain, weighted = (calibrate(calib, batches, receiver, copy_weight=w, **kw) for w in (0.0, 3.0))
    assert any(not torch.equal(v, weighted.state_dict()[k]) for k, v in plain.state_dict().items())


@pytest.mark.parametrize("changes, message", [
    ({"copy_weight": -1.0}, "--copy-weight: -1.0 must be 0"),
    ({"copy_weight": 2.0, "method": "kv-ridge"}, "--copy-weight weights heterofold's calibration loss; --method is 'kv-ridge'"),
])
def test_bad_copy_weights_are_refused_by_flag(tmp_path, changes, message):
    args = TrainArgs(sender="a", receiver="b", out=tmp_path / "out", **changes)
    with pytest.raises(HeteroFoldError, match=message.replace("(", r"\(").replace(".", r"\.")):
        args.validate()
    with pytest.raises(HeteroFoldError, match="copy_weight=-1"):
        calibrate(None, copy_weight=-1.0)
