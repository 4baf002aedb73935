"""The verdict rule (fedrepro.report.verdict): every status with a case that must give it and one that must not."""

import math

import pytest

from fedrepro.config import REPO_ROOT
from fedrepro.report import verdict as v


def judge(mean, std=0.0, n=5, value=10.0, pm=None, reading="", runs=None, floor=0.005, deterministic=False):
    return v.judge(value, pm, reading, runs, floor, mean, std, n, deterministic)


@pytest.mark.parametrize("mean, std", [(math.nan, 0.0), (math.inf, 0.0), (-math.inf, 1.0), (10.0, math.nan)])
def test_a_non_finite_rebuild_is_never_judged(mean, std):
    """NaN fails every comparison: without the guard |NaN - v| > tol is false and the row would be reproduced."""
    for deterministic in (False, True):
        j = judge(mean, std, deterministic=deterministic, floor=1e9)
        assert j.outcome == v.INVALID and "not finite" in j.why
    assert v.not_finite(10.0, 0.1) == "" and "undefined" in v.not_finite(None)


def test_standard_error_not_seed_spread():
    j = judge(10.1, std=0.2, n=4)  # se = 0.1 with 3 degrees of freedom
    assert math.isclose(j.se_rebuilt, 0.1) and math.isclose(j.tol, v.t_quantile(3) * 0.1) and j.df == 3


def test_the_t_quantile_comes_from_scipy_and_shrinks_towards_1_96():
    assert math.isclose(v.t_quantile(1), 12.7062, rel_tol=1e-5) and math.isclose(v.t_quantile(4), 2.7764, rel_tol=1e-4)
    assert math.isclose(v.t_quantile(math.inf), 1.95996, rel_tol=1e-5)
    assert v.t_quantile(2) > v.t_quantile(3) > v.t_quantile(30) > v.t_quantile(math.inf)
    with pytest.raises(ValueError):
        v.t_quantile(0)


def test_each_side_is_read_with_its_own_t():
    """A printed std over 6 runs (5 df) against 3 seeds (2 df): each standard error times its own t, in quadrature; a
    side without uncertainty drops out."""
    j = judge(10.0, std=0.2, n=3, pm=0.3, reading="std", runs=6)
    want = math.hypot(v.t_quantile(5) * 0.3 / math.sqrt(6), v.t_quantile(2) * 0.2 / math.sqrt(3))
    assert math.isclose(j.tol, want) and j.df == 2
    assert math.isclose(j.quantile, want / math.hypot(0.3 / math.sqrt(6), 0.2 / math.sqrt(3)))
    j = judge(10.0, std=0.0, n=3, pm=0.3, reading="std", runs=6, deterministic=True)
    assert math.isclose(j.tol, v.t_quantile(5) * 0.3 / math.sqrt(6))
    j = judge(10.0, std=0.0, n=1, pm=0.3, reading="ci95", deterministic=True)
    assert math.isclose(j.tol, 0.3, rel_tol=1e-4) and j.df == math.inf


def test_a_stated_standard_error_is_not_widened_by_the_seeds_degrees_of_freedom():
    """A printed se of 1 against two seeds that agree to 0.006: the tolerance is ~1.96, the printed side's own 95 %
    half-width. t at the smaller side's df (1) made it 12.7: AdaPeD's T2.r2.c1 (93.32 printed, ~99.0 rebuilt) was
    called reproduced by a two-seed sweep and deviating by the five-seed report."""
    j = judge(16.0, std=0.006 * math.sqrt(2), n=2, pm=1.0, reading="se", floor=0.0)
    assert 1.96 < j.tol < 1.97 and j.outcome == v.DEVIATES
    assert judge(11.9, std=0.006 * math.sqrt(2), n=2, pm=1.0, reading="se", floor=0.0).outcome == v.REPRODUCED


def test_fedhdp_table3_nonprivate_ditto_acc_g_with_two_seeds():
    """Printed 93.8 (a single run), seeds 94.170 ± 0.099 (n = 2): t(1) = 12.7 gives a prediction half-width of 1.54;
    1.96 gave 0.24 and called this faithful rebuild a deviation."""
    j = single(94.17, std=0.099, n=2, value=93.8)
    assert j.tol >= 1.5 and j.outcome != v.DEVIATES and j.df == 1


@pytest.mark.parametrize(
    "reading, runs, se, df",
    [
        ("ci95", None, 0.5 / v.Z, math.inf),
        ("se", None, 0.5, math.inf),
        ("std", 25, 0.1, 24),
        ("std", None, 0.5, math.inf),
        ("unknown", 6, 0.5, math.inf),
    ],
)
def test_printed_pm_read_as_the_paper_says(reading, runs, se, df):
    got, words, got_df = v.printed_se(0.5, reading, runs)
    assert (
        math.isclose(got, se) and "0.5" in words and got_df == df and ("df ∞" if df == math.inf else "df 24") in words
    )


def test_no_pm_and_no_noise_falls_back_to_the_printed_rounding():
    assert judge(10.004, n=1, deterministic=True).outcome == v.REPRODUCED
    assert judge(10.006, n=1, deterministic=True).outcome == v.DEVIATES


def test_reproduced_needs_agreement_within_the_combined_standard_error():
    # tol = sqrt((1.96 * .2)^2 + (t(3) * .1)^2) = 0.505
    assert judge(10.5, std=0.2, n=4, pm=0.2, reading="se").outcome == v.REPRODUCED
    assert judge(10.51, std=0.2, n=4, pm=0.2, reading="se").outcome == v.DEVIATES


def test_a_wildly_wrong_value_with_a_large_seed_std_is_not_reproduced():
    """The old rule widened the tolerance with the seed std: 20 vs 10 with std 30 over 3 seeds passed."""
    j = judge(20.0, std=30.0, n=3)
    assert j.outcome == v.INCONCLUSIVE and "too noisy" in j.why
    assert judge(20.0, std=3.0, n=3).outcome == v.DEVIATES


def test_a_precise_enough_noisy_rebuild_can_be_judged():
    assert judge(10.1, std=0.5, n=5).outcome == v.REPRODUCED  # 1.96*0.22 = 0.44 <= 10% of 10


def test_one_seed_of_a_random_experiment_is_inconclusive_unless_deterministic():
    assert judge(10.0, std=0.0, n=1).outcome == v.INCONCLUSIVE
    assert judge(10.0, std=0.0, n=1, deterministic=True).outcome == v.REPRODUCED


def test_a_95_percent_interval_is_not_read_as_a_std():
    """histograms Table 1: ±0.01 is a 95% interval; as a std it would allow twice the difference (tol 0.0101 vs
    0.0196)."""
    assert judge(1.052, std=0.001, n=5, value=1.036, pm=0.01, reading="ci95", floor=0.0005).outcome == v.DEVIATES
    assert (
        judge(1.052, std=0.001, n=5, value=1.036, pm=0.01, reading="std", runs=1, floor=0.0005).outcome == v.REPRODUCED
    )


# a printed single run (pm_reading single): one draw, judged against the spread of the rebuilt seeds
def single(mean, std, n, value=80.0, floor=0.005, deterministic=False):
    return judge(mean, std=std, n=n, value=value, reading=v.SINGLE, floor=floor, deterministic=deterministic)


def test_a_single_printed_run_is_judged_by_the_prediction_interval_of_one_run():
    """s = 1 over n = 5 seeds: one run lies within t(4)*sqrt(1 + 1/5) = 3.04 of the mean, the mean within 1.24."""
    half = v.t_quantile(4) * 1.0 * math.sqrt(1 + 1 / 5)
    inside = single(82.5, std=1.0, n=5, value=80.0)
    assert inside.outcome == v.REPRODUCED and math.isclose(inside.tol, half) and math.isclose(inside.se_printed, 1.0)
    assert (
        "printed single run judged against the spread of the 5 rebuilt seeds (prediction interval ±3.04, t 2.78 at 4 "
        "df)" in inside.reading
    )
    assert single(83.1, std=1.0, n=5).outcome == v.DEVIATES  # 3.1 > 3.04
    assert single(76.9, std=1.0, n=5).outcome == v.DEVIATES
    # the reading matters: read as a value without ± (the se of the rebuilt mean only), the faithful draw deviates
    assert judge(82.5, std=1.0, n=5, value=80.0).outcome == v.DEVIATES


def test_a_single_printed_run_with_one_seed_is_inconclusive_however_far():
    for mean in (80.0, 95.0):  # no spread: neither agreement nor a deviation can be told
        j = single(mean, std=0.0, n=1)
        assert j.outcome == v.INCONCLUSIVE and j.why.startswith("one seed: no spread to judge a single printed run")
    # a deterministic experiment has no spread to measure: the printed rounding is the tolerance, as for any row
    assert single(80.004, std=0.0, n=1, deterministic=True).outcome == v.REPRODUCED
    assert single(80.006, std=0.0, n=1, deterministic=True).outcome == v.DEVIATES
    assert single(80.006, std=0.0, n=3, deterministic=True).outcome == v.DEVIATES


def test_a_single_printed_run_of_a_too_noisy_experiment_is_inconclusive():
    """Printed 10: a verdict needs the prediction half-width within 10% of it (1.0)."""
    # seed std 1: half-width 3.04 at n = 5, and never below 1.96 however many seeds
    j = single(10.5, std=1.0, n=5, value=10.0)
    assert j.outcome == v.INCONCLUSIVE and "too noisy" in j.why and "more seeds cannot resolve" in j.why
    assert single(10.5, std=1.0, n=1000, value=10.0).outcome == v.INCONCLUSIVE
    # seed std 0.453: 7.05 at n = 2; more seeds would do (t shrinks with n): 1.0035 at n = 15, 0.9953 at n = 16
    j = single(10.5, std=0.453, n=2, value=10.0)
    assert j.outcome == v.INCONCLUSIVE and j.why.endswith(f"run more seeds ({16 - 2} more)")
    assert single(10.5, std=0.453, n=15, value=10.0).outcome == v.INCONCLUSIVE
    assert single(10.5, std=0.453, n=16, value=10.0).outcome == v.REPRODUCED
    # a deviation is told however noisy: outside the prediction interval is outside
    assert single(14.0, std=1.0, n=5, value=10.0).outcome == v.DEVIATES


def test_the_single_reading_in_words():
    se, words, df = v.printed_se(None, v.SINGLE, None, 2.0, 4)
    assert se == 2.0 and df == 3 and f"(prediction interval ±{v.t_quantile(3) * 2.0 * math.sqrt(1.25):.3g}," in words
    assert "no spread" in v.printed_se(None, v.SINGLE, None, 0.0, 1)[1]


def test_the_readme_states_the_rule_of_the_code():
    """README's "Statuses and the tolerance rule" paragraph and the report's RULE_TEXT give the same formulas."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("**Statuses and the tolerance rule**", 1)[1].split("\n\n", 1)[0]
    paragraph = " ".join(paragraph.split())
    for text in (paragraph, v.RULE_TEXT):
        for formula in (
            "√((t_p·se_printed)² + (t_r·se_rebuilt)²)",
            f"{v.RESOLUTION:.0%} of",
            "printed single run",
            "one draw without ±",
            "t(n − 1)·s·√(1 + 1/n)",
            f"max(floor, {v.RESOLUTION:.0%}",
            "own degrees of freedom",
            "Banerjee's interval",
            "Student's t",
        ):
            assert formula in text, formula


def test_the_readme_states_the_conclusion_rule_of_the_code():
    """README's "Forensics" paragraph states the wording rule of forensic conclusions as the code's text does."""
    readme = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert " ".join(v.CONCLUSION_RULE_TEXT.split()) in readme
