"""The top-k teacher: the KL over the teacher's k most likely tokens and the rest, and that calibration runs the
receiver's prefill once per batch with it (every step without it)."""

import pytest
import torch

from heterofold_hub.base_models.loading import Side
from heterofold_hub.data.windows import make_windows
from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.methods.features import collect
from heterofold_hub.trainers.calibrate import calibrate
from heterofold_hub.trainers.module import kl_to_teacher
from heterofold_hub.trainers.teacher import TopKTeacher, kl_top_k
from heterofold_hub.trainers.train import TrainArgs
from heterofold_hub.transfer.batches import prepare_batch

from conftest import tiny_model


def test_with_the_whole_vocabulary_kept_it_is_the_full_kl_and_its_gradient():
    torch.manual_seed(0)
    teacher = torch.randn(2, 3, 11) * 3
    student = torch.randn(2, 3, 11, requires_grad=True)
    weights = torch.tensor([[1.0, 4.0, 1.0], [4.0, 4.0, 1.0]])
    for w in (None, weights):
        full = kl_to_teacher(student, teacher, w)
        kept = kl_top_k(student, TopKTeacher.from_logits(teacher, 11), w)
        assert torch.allclose(kept, full, atol=1e-6)
        assert torch.allclose(torch.autograd.grad(kept, student)[0], torch.autograd.grad(full, student)[0], atol=1e-6)
    assert TopKTeacher.from_logits(teacher, 50).ids.shape == (2, 3, 11)  # k above the vocabulary: all of it


def test_fewer_tokens_kept_give_a_coarser_kl_that_still_sees_the_rest():
    torch.manual_seed(1)
    teacher, student = torch.randn(2, 3, 40) * 2, torch.randn(2, 3, 40) * 2
    full = kl_to_teacher(student, teacher)
    coarse = [kl_top_k(student, TopKTeacher.from_logits(teacher, k)) for k in (1, 4, 16, 39)]
    assert all(0 < c <= full + 1e-6 for c in coarse)  # coarse-graining never raises a KL
    assert coarse == sorted(coarse)  # each finer split of the outcomes keeps more of it
    # the rest bucket counts: a student that moves mass from the rest into the kept tokens pays for it
    top = TopKTeacher.from_logits(teacher, 4)
    greedy = torch.full_like(student, -30.0).scatter(-1, top.ids, teacher.gather(-1, top.ids))
    assert kl_top_k(greedy, top) > 1.0


def test_an_empty_rest_stays_finite():
    teacher = torch.full((1, 2, 5), -200.0)
    teacher[..., 0] = 0.0  # all mass on one token, the rest underflows
    student = torch.randn(1, 2, 5, requires_grad=True)
    loss = kl_top_k(student, TopKTeacher.from_logits(teacher, 1))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(student.grad).all()


@pytest.fixture(scope="module")
def tiny(bpe, unigram):
    sender = Side.from_model(tiny_model("llama", len(bpe), layers=2, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=2, seed=2), unigram)
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(200))
    windows = make_windows([text], receiver, context_tokens=48, continuation_tokens=16, max_windows=4)
    calib = collect(sender, receiver, windows, progress=False)
    batches = [prepare_batch(windows[i : i + 2], sender, receiver) for i in range(0, 4, 2)]
    return receiver, calib, batches


@pytest.mark.filterwarnings(r"ignore:.*isinstance\(treespec, LeafSpec\)")
def test_the_receiver_prefills_each_batch_once_with_a_top_k_teacher(tiny):
    receiver, calib, batches = tiny
    native_length = batches[0].native_ids.shape[1]
    prefills = []
    hook = receiver.model.register_forward_pre_hook(
        lambda module, args, kwargs: prefills.append(kwargs["input_ids"].shape[1] == native_length), with_kwargs=True)
    try:
        kw = dict(steps=6, lr=3e-3, progress=False, init="recolor")
        full = calibrate(calib, batches, receiver, **kw)
        full_prefills, prefills[:] = sum(prefills), []
        whole = calibrate(calib, batches, receiver, teacher_top_k=len(receiver.tokenizer) + 10, **kw)
        kept_prefills, prefills[:] = sum(prefills), []
        few = calibrate(calib, batches, receiver, teacher_top_k=4, **kw)
    finally:
        hook.remove()
    assert full_prefills == 6 and kept_prefills == len(batches) == 2
    assert few.config.extra["calibration_steps"] == 6  # recorded: --max-minutes can stop a run short of its steps
    # the whole vocabulary kept is the full KL: the same fit; 4 kept tokens fit something else
    for name, value in full.state_dict().items():
        assert torch.allclose(whole.state_dict()[name], value, atol=1e-5), name
    assert any(not torch.allclose(few.state_dict()[n], v, atol=1e-5) for n, v in full.state_dict().items())


def test_a_negative_top_k_is_refused_by_flag_and_by_option(tmp_path):
    with pytest.raises(HeteroFoldError, match=r"--teacher-top-k: -3 must be 0"):
        TrainArgs(sender="a", receiver="b", out=tmp_path / "out", teacher_top_k=-3).validate()
    with pytest.raises(HeteroFoldError, match=r"--teacher-top-k: only for --method heterofold"):
        TrainArgs(sender="a", receiver="b", out=tmp_path / "out", teacher_top_k=8, method="kv-ridge").validate()
    with pytest.raises(HeteroFoldError, match=r"teacher_top_k=-3; give 0"):
        calibrate(None, teacher_top_k=-3)
