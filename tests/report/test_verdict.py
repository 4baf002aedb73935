"""The verdict rule (fedrepro.report.verdict): every status with a case that must give it and one that must not."""

import math

import pytest

from fedrepro.report import verdict as v


def judge(mean, std=0.0, n=5, value=10.0, pm=None, reading="", runs=None, floor=0.005, deterministic=False):
    return v.judge(value, pm, reading, runs, floor, mean, std, n, deterministic)


def test_standard_error_not_seed_spread():
    j = judge(10.1, std=0.2, n=4)  # se = 0.1
    assert math.isclose(j.se_rebuilt, 0.1) and math.isclose(j.tol, v.Z * 0.1)


@pytest.mark.parametrize(
    "reading, runs, se",
    [("ci95", None, 0.5 / v.Z), ("se", None, 0.5), ("std", 25, 0.1), ("std", None, 0.5), ("unknown", 6, 0.5)],
)
def test_printed_pm_read_as_the_paper_says(reading, runs, se):
    got, words = v.printed_se(0.5, reading, runs)
    assert math.isclose(got, se) and "0.5" in words


def test_no_pm_and_no_noise_falls_back_to_the_printed_rounding():
    assert judge(10.004, n=1, deterministic=True).outcome == v.REPRODUCED
    assert judge(10.006, n=1, deterministic=True).outcome == v.DEVIATES


def test_reproduced_needs_agreement_within_the_combined_standard_error():
    assert judge(10.3, std=0.2, n=4, pm=0.2, reading="se").outcome == v.REPRODUCED  # tol = 1.96*sqrt(.04+.01)
    assert judge(10.5, std=0.2, n=4, pm=0.2, reading="se").outcome == v.DEVIATES


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
    """histograms Table 1: ±0.01 is a 95% interval; as a std it would allow twice the difference."""
    assert judge(1.05, std=0.001, n=5, value=1.036, pm=0.01, reading="ci95", floor=0.0005).outcome == v.DEVIATES
    assert (
        judge(1.05, std=0.001, n=5, value=1.036, pm=0.01, reading="std", runs=1, floor=0.0005).outcome == v.REPRODUCED
    )
