"""Known-answer tests for the metric arithmetic (issue 13, item 1).

Every expected number below is worked out by hand (in comments, or with plain ``math`` on Python floats),
never by calling the function under test twice:

- ``evaluate.token_measures``: the KL direction (KL(reference || logits), not the reverse), the NLL of
  known targets and the top-1 agreement fraction;
- ``evaluate.summarise``: ``recovered`` on window means and ``<measure>_se`` = sample std / sqrt(n);
- ``evaluate._jackknife_se``: equals s / sqrt(n) for the mean, and matches an explicit leave-one-window-out
  loop for ``recovered``;
- ``retrieval.summarise``: exact-match accuracy, its binomial standard error sqrt(p (1 - p) / n), ``kept``
  and the mean digit accuracy.
"""

import math

import pytest
import torch

from heterofold_hub.evaluation.fidelity import (_jackknife_se, paired_difference, paired_rows, summarise,
                                                token_measures)
from heterofold_hub.evaluation.retrieval import summarise as retrieval_summarise

TOL = 1e-9  # all tensors are float64


def t(values):
    return torch.tensor(values, dtype=torch.float64)


# ---------------------------------------------------------------- token_measures


def test_kl_is_reference_to_logits_and_its_direction_matters():
    # One window, one token, vocabulary of 2: reference p = (0.9, 0.1), method q = (0.5, 0.5).
    reference = t([[[math.log(0.9), math.log(0.1)]]])  # [B=1, T=1, V=2]
    logits = t([[[0.0, 0.0]]])
    # KL(p || q) = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5) = 0.9 * 0.5877867 - 0.1 * 1.6094379 = 0.3680642
    # KL(q || p) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = -0.5 * 0.5877867 + 0.5 * 1.6094379 = 0.5108256
    kl_p_q = 0.9 * math.log(1.8) + 0.1 * math.log(0.2)
    kl_q_p = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(5.0)
    assert kl_p_q == pytest.approx(0.3680642, abs=1e-6)
    assert kl_q_p == pytest.approx(0.5108256, abs=1e-6)

    out = token_measures(logits, reference, torch.tensor([[0]]))
    assert out["kl"].shape == (1,)
    assert out["kl"].item() == pytest.approx(kl_p_q, abs=TOL)
    assert out["kl"].item() != pytest.approx(kl_q_p, abs=1e-3)
    # Swapping the roles gives the other direction.
    swapped = token_measures(reference, logits, torch.tensor([[0]]))
    assert swapped["kl"].item() == pytest.approx(kl_q_p, abs=TOL)


def test_nll_kl_and_top1_are_per_window_means_over_tokens():
    # Two windows, two tokens each, vocabulary 2.
    # Method logits: window 0 both tokens (ln 3, 0) -> probs (0.75, 0.25);
    #                window 1 tokens (0, ln 4) -> (0.2, 0.8) and (ln 4, 0) -> (0.8, 0.2).
    logits = t([[[math.log(3), 0.0], [math.log(3), 0.0]],
                [[0.0, math.log(4)], [math.log(4), 0.0]]])
    # Reference: window 0 both tokens (0.9, 0.1) -> argmax 0, 0; window 1 (0.9, 0.1) and (0.1, 0.9) -> argmax 0, 1.
    p, r = [math.log(0.9), math.log(0.1)], [math.log(0.1), math.log(0.9)]
    reference = t([[p, p], [p, r]])
    targets = torch.tensor([[0, 1], [1, 1]])

    out = token_measures(logits, reference, targets)

    # nll, window 0: targets 0 then 1 under (0.75, 0.25): (ln(4/3) + ln 4) / 2 = (0.2876821 + 1.3862944) / 2
    # nll, window 1: target 1 under (0.2, 0.8) then target 1 under (0.8, 0.2): (ln(1.25) + ln 5) / 2
    assert out["nll"].tolist() == pytest.approx([(math.log(4 / 3) + math.log(4)) / 2,
                                                 (math.log(1.25) + math.log(5)) / 2], abs=TOL)
    assert out["nll"].tolist() == pytest.approx([0.8369882, 0.9162907], abs=1e-6)

    # top1, window 0: method argmax 0, 0 vs reference 0, 0 -> 1.0
    #       window 1: method argmax 1, 0 vs reference 0, 1 -> 0.0
    assert out["top1"].tolist() == [1.0, 0.0]

    # kl, window 0: KL((0.9,0.1) || (0.75,0.25)) on both tokens
    kl0 = 0.9 * math.log(0.9 / 0.75) + 0.1 * math.log(0.1 / 0.25)
    # kl, window 1: KL((0.9,0.1) || (0.2,0.8)) and KL((0.1,0.9) || (0.8,0.2)) -- equal by symmetry
    kl1 = 0.9 * math.log(0.9 / 0.2) + 0.1 * math.log(0.1 / 0.8)
    assert out["kl"].tolist() == pytest.approx([kl0, kl1], abs=TOL)


def test_top1_agreement_is_the_fraction_of_matching_argmax_tokens():
    # One window, four tokens; reference argmax 0, 0, 1, 1; method argmax 0, 0, 1, 0 -> 3 of 4 agree.
    a, b = [2.0, 0.0], [0.0, 2.0]
    reference = t([[a, a, b, b]])
    logits = t([[a, a, b, a]])
    out = token_measures(logits, reference, torch.zeros(1, 4, dtype=torch.long))
    assert out["top1"].item() == pytest.approx(0.75, abs=TOL)


# ---------------------------------------------------------------- summarise / _jackknife_se

NONE = [2.0, 4.0, 3.0, 3.0]    # mean 3.0
NATIVE = [1.0, 1.0, 0.5, 1.5]  # mean 1.0
METHOD = [1.0, 2.0, 1.5, 1.5]  # mean 1.5 -> recovered = (3.0 - 1.5) / (3.0 - 1.0) = 0.75


def per_window():
    return {"no-context": {"nll": t(NONE)}, "native": {"nll": t(NATIVE)},
            "m": {"nll": t(METHOD), "top1": t([1.0, 1.0, 0.0, 1.0])}}


def test_summarise_recovered_and_means_have_known_values():
    s = summarise(per_window())
    assert s["m"]["recovered"] == pytest.approx(0.75, abs=TOL)
    assert s["native"]["recovered"] == pytest.approx(1.0, abs=TOL)
    assert s["no-context"]["recovered"] == pytest.approx(0.0, abs=TOL)
    assert s["m"]["nll"] == pytest.approx(1.5, abs=TOL)
    assert s["m"]["top1"] == pytest.approx(0.75, abs=TOL)


def test_summarise_se_is_sample_std_over_sqrt_n():
    s = summarise(per_window())
    # METHOD deviations from 1.5: -0.5, 0.5, 0, 0 -> sum of squares 0.5; s^2 = 0.5 / 3 (n - 1 = 3);
    # se = sqrt(s^2 / 4) = sqrt(1 / 24) = 0.2041241
    assert s["m"]["nll_se"] == pytest.approx(math.sqrt(1 / 24), abs=TOL)
    assert s["m"]["nll_se"] == pytest.approx(0.2041241, abs=1e-6)
    # top1 [1, 1, 0, 1]: deviations from 0.75: .25, .25, -.75, .25 -> SS 0.75; s^2 = 0.25; se = 0.5 / 2 = 0.25
    assert s["m"]["top1_se"] == pytest.approx(0.25, abs=TOL)
    # NONE deviations from 3: -1, 1, 0, 0 -> SS 2; s^2 = 2/3; se = sqrt(2/3 / 4) = sqrt(1/6)
    assert s["no-context"]["nll_se"] == pytest.approx(math.sqrt(1 / 6), abs=TOL)


def test_jackknife_se_of_the_mean_is_the_ordinary_standard_error():
    x = [1.0, 2.0, 4.0, 7.0]
    # mean 3.5; deviations -2.5, -1.5, 0.5, 3.5 -> SS = 6.25 + 2.25 + 0.25 + 12.25 = 21;
    # s^2 = 21 / 3 = 7; s / sqrt(n) = sqrt(7 / 4) = 1.3228757
    assert _jackknife_se(t(x), lambda v: v.mean()) == pytest.approx(math.sqrt(7 / 4), abs=TOL)
    assert math.isnan(_jackknife_se(t([5.0]), lambda v: v.mean()))


def test_recovered_se_matches_an_explicit_leave_one_out_loop():
    # Hand values of recovered with window i left out (means over the other three windows):
    #   i=0: none 10/3, native 1,     method 5/3 -> (5/3) / (7/3)     = 5/7
    #   i=1: none 8/3,  native 1,     method 4/3 -> (4/3) / (5/3)     = 4/5
    #   i=2: none 3,    native 3.5/3, method 1.5 -> 1.5 / (5.5/3)     = 9/11
    #   i=3: none 3,    native 2.5/3, method 1.5 -> 1.5 / (6.5/3)     = 9/13
    by_hand = [5 / 7, 4 / 5, 9 / 11, 9 / 13]

    n = len(NONE)
    loop = []
    for i in range(n):
        keep = [j for j in range(n) if j != i]
        none = sum(NONE[j] for j in keep) / (n - 1)
        native = sum(NATIVE[j] for j in keep) / (n - 1)
        method = sum(METHOD[j] for j in keep) / (n - 1)
        loop.append((none - method) / (none - native))
    assert loop == pytest.approx(by_hand, abs=1e-12)

    mean = sum(loop) / n
    expected = math.sqrt((n - 1) / n * sum((r - mean) ** 2 for r in loop))  # jackknife variance formula
    assert expected == pytest.approx(0.0932707, abs=1e-6)
    assert summarise(per_window())["m"]["recovered_se"] == pytest.approx(expected, abs=TOL)


def test_a_paired_difference_is_the_difference_of_recovered_with_a_smaller_error_on_shared_difficulty():
    # b is a worse than m by 0.2 nats on every window: recovered 0.75 - 0.65 = +0.10 with no spread at all
    windows = per_window()
    windows["m"]["kl"] = t([0.2, 0.4, 0.3, 0.3])
    windows["b"] = {"nll": t(METHOD) + 0.2, "kl": t([0.3, 0.5, 0.3, 0.5])}
    d = paired_difference(windows, "m", "b")
    assert d["recovered"] == pytest.approx(0.75 - summarise(windows)["b"]["recovered"], abs=TOL)
    assert d["recovered"] == pytest.approx(0.2 / 2.0, abs=TOL)
    assert d["kl"] == pytest.approx(0.3 - 0.4, abs=TOL) and d["windows_better"] == 4 and d["windows"] == 4
    # the windows' shared difficulty cancels in the pair, not in either row's own error
    assert d["recovered_se"] < summarise(windows)["m"]["recovered_se"]
    assert d["kl_se"] == pytest.approx(_jackknife_se(t([-0.1, -0.1, 0.0, -0.2]), lambda v: v.mean()), abs=TOL)
    assert list(paired_rows(windows)) == ["m - b"]  # every two transfer rows, in order; references left out


# ---------------------------------------------------------------- retrieval accuracy


def test_retrieval_accuracy_binomial_se_kept_and_digits():
    answers = {512: ["73914", "11111", "22222", "33333"], 1024: ["12345", "67890"]}
    decoded = {
        # 512: right, right (leading space skipped), right (digit run stops at the space), wrong (4 of 5 digits)
        "native": {512: ["73914\n", " 11111", "22222 is", "33334"], 1024: ["00000", "1"]},
        # 512: nothing right; digits 0, 0, 1/5 ("12345" vs "22222": second digit), 0
        "no-context": {512: ["00000", "", "12345", "99999"], 1024: ["", ""]},
        # 512: right, wrong (run "111110" too long), wrong (starts with "x"), right
        #   digit_accuracy: "111110" vs "11111" compares the first 5 places -> 1.0; "x22222" -> no run -> 0
        # 1024: right, wrong
        "m": {512: ["73914", "111110", "x22222", "33333"], 1024: ["12345", "6789"]},
    }
    table = retrieval_summarise(decoded, answers)

    native, none, m = table["native"]["512"], table["no-context"]["512"], table["m"]["512"]
    # native 3 of 4: p = 0.75, se = sqrt(0.75 * 0.25 / 4) = sqrt(0.046875) = 0.2165064
    assert (native["correct"], native["n"]) == (3, 4)
    assert native["accuracy"] == pytest.approx(0.75, abs=TOL)
    assert native["accuracy_se"] == pytest.approx(0.2165064, abs=1e-6)
    assert native["kept"] == pytest.approx(1.0, abs=TOL)
    assert native["digit_accuracy"] == pytest.approx((1 + 1 + 1 + 0.8) / 4, abs=TOL)  # 0.95
    # method 2 of 4: p = 0.5, se = sqrt(0.25 / 4) = 0.25; kept = 0.5 / 0.75 = 2/3
    assert m["correct"] == 2
    assert m["accuracy"] == pytest.approx(0.5, abs=TOL)
    assert m["accuracy_se"] == pytest.approx(0.25, abs=TOL)
    assert m["kept"] == pytest.approx(2 / 3, abs=TOL)
    assert m["digit_accuracy"] == pytest.approx((1 + 1 + 0 + 1) / 4, abs=TOL)  # 0.75
    # no-context 0 of 4: the documented Wald formula gives se = sqrt(0 * 1 / 4) = 0 exactly
    assert none["accuracy"] == 0.0 and none["accuracy_se"] == 0.0 and none["kept"] == 0.0
    assert none["digit_accuracy"] == pytest.approx((0 + 0 + 0.2 + 0) / 4, abs=TOL)  # 0.05

    # 1024: native 0 of 2 -> kept is None; method 1 of 2 -> se = sqrt(0.5 * 0.5 / 2) = 0.3535534
    assert table["native"]["1024"]["accuracy"] == 0.0
    assert table["m"]["1024"]["kept"] is None
    assert table["m"]["1024"]["accuracy"] == pytest.approx(0.5, abs=TOL)
    assert table["m"]["1024"]["accuracy_se"] == pytest.approx(0.3535534, abs=1e-6)
    # "6789" vs "67890": the first 4 places match -> 4/5; mean over 2 docs = (1 + 0.8) / 2 = 0.9
    assert table["m"]["1024"]["digit_accuracy"] == pytest.approx(0.9, abs=TOL)


def test_caveats_flag_an_unstable_benefit_and_recovered_above_one():
    from heterofold_hub.evaluation.fidelity import caveats

    row = lambda r, se, kl: {"recovered": r, "recovered_se": se, "kl": kl}
    steady = {"benefit": 1.0, "benefit_se": 0.1, "methods": {"native": row(1, 0, 0), "a": row(0.7, 0.05, 0.3)}}
    assert caveats(steady) == []
    noisy = {**steady, "benefit": 0.05, "benefit_se": 0.04,
             "methods": {**steady["methods"], "dense-latent": row(7.96, 2.0, 0.88)}}
    notes = caveats(noisy)
    assert len(notes) == 2
    assert "0.050 ± 0.040 nats/token) is within two standard errors of zero" in notes[0]
    assert notes[1].startswith("dense-latent: recovered 7.96 > 1 means a lower NLL") and "(0.880)" in notes[1]
    within = {**steady, "methods": {"a": row(1.05, 0.04, 0.01)}}  # 1 is inside two standard errors: no note
    assert caveats(within) == []
