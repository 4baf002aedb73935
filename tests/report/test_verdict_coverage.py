"""The tolerance rule's coverage, by simulation: a faithful rebuild is judged *deviates* at most 5 % of the time at
every number of seeds and for every reading of the printed ±, and a printed value 5 standard deviations off is
caught at least 80 % of the time at n = 5. The same simulation shows why the rule reads each side's spread with
Student's t at that side's own degrees of freedom (Banerjee's interval): 1.96 (the old rule) and Welch-Satterthwaite's
degrees of freedom both call a faithful rebuild *deviates* more often than 5 % with two seeds, and Hsu's t at the
smaller df (the rule before Banerjee's) misses a value 4 printed standard errors off when two seeds agree closely."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrepro.report import verdict as v

TRIALS = 4000
# the share judged deviates may exceed 5 % by three Monte-Carlo standard errors at most
BOUND = 0.05 + 3 * math.sqrt(0.05 * 0.95 / TRIALS)
READINGS = (v.SINGLE, "std", "std-unstated", "unknown", "se", "ci95")
MU, SIGMA, R = 50.0, 1.0, 5  # the experiment's mean and per-run std; the paper's runs behind a std ±


def experiment(rng: np.random.Generator, reading: str, n: int, shift: float = 0.0):
    """One synthetic replication: n rebuilt seeds of N(MU, SIGMA^2) and the paper's printed value (and ±) drawn from
    the same experiment, as ``reading`` says the ± is, moved by ``shift`` standard deviations of (rebuilt mean -
    printed value) as the rule reads it. Returns the judge's arguments."""
    x = rng.normal(MU, SIGMA, n)
    mean, std = float(x.mean()), float(x.std(ddof=1))
    se_r = SIGMA / math.sqrt(n)
    if reading == v.SINGLE:  # one run of the same experiment
        value = rng.normal(MU, SIGMA) + shift * math.sqrt(SIGMA**2 + se_r**2)
        return value, None, v.SINGLE, None, mean, std
    if reading in ("std", "std-unstated", "unknown"):  # the mean ± std of the paper's R runs
        y = rng.normal(MU, SIGMA, R)
        runs = R if reading == "std" else None
        # the rule reads the ± as the std over R runs, or (R unstated, or unknown) as the se itself, the widest
        se_read = SIGMA / math.sqrt(R) if reading == "std" else SIGMA
        value = float(y.mean()) + shift * math.sqrt(se_read**2 + se_r**2)
        return value, float(y.std(ddof=1)), reading.removesuffix("-unstated"), runs, mean, std
    se_p = 0.5 * SIGMA  # a standard error or 95% interval the paper states
    value = rng.normal(MU, se_p) + shift * math.sqrt(se_p**2 + se_r**2)
    return value, se_p if reading == "se" else v.Z * se_p, reading, None, mean, std


def deviates_share(reading: str, n: int, shift: float = 0.0, rule=None, seed: int = 0) -> float:
    """The share of TRIALS synthetic replications judged deviates by ``rule`` (default: the project's)."""
    rng = np.random.default_rng([seed, n, READINGS.index(reading)])
    hits = 0
    for _ in range(TRIALS):
        value, pm, reading_, runs, mean, std = experiment(rng, reading, n, shift)
        if rule is None:
            hits += v.judge(value, pm, reading_, runs, 0.0, mean, std, n, False).outcome == v.DEVIATES
        else:
            hits += abs(mean - value) > rule(pm, reading_, runs, std, n)
    return hits / TRIALS


def z_rule(pm, reading, runs, std, n) -> float:
    """The tolerance before Student's t: 1.96 whatever the number of seeds."""
    se_p, _, _ = v.printed_se(pm, reading, runs, std, n)
    return v.Z * math.sqrt(se_p**2 + std**2 / n)


def welch_df(se_p: float, df_p: float, se_r: float, df_r: float) -> float:
    """Welch-Satterthwaite degrees of freedom of se_p^2 + se_r^2 (a side with df inf or se 0 drops out)."""
    den = sum(se**4 / df for se, df in ((se_p, df_p), (se_r, df_r)) if se > 0 and math.isfinite(df))
    return (se_p**2 + se_r**2) ** 2 / den if den > 0 else math.inf


def welch_rule(pm, reading, runs, std, n) -> float:
    """Student's t at the Welch-Satterthwaite degrees of freedom of the two sides."""
    se_p, _, df_p = v.printed_se(pm, reading, runs, std, n)
    df = df_p if reading == v.SINGLE else welch_df(se_p, df_p, std / math.sqrt(n), n - 1)
    return v.t_quantile(df) * math.sqrt(se_p**2 + std**2 / n)


@pytest.mark.parametrize("n", [2, 3, 5, 10])
@pytest.mark.parametrize("reading", READINGS)
def test_a_faithful_rebuild_is_called_deviates_at_most_5_percent_of_the_time(reading, n):
    assert deviates_share(reading, n) <= BOUND


@pytest.mark.parametrize("reading", READINGS)
def test_a_value_5_standard_deviations_off_is_caught_at_n_5(reading):
    assert deviates_share(reading, 5, shift=5.0) >= 0.8


def test_the_rule_without_student_t_fails_the_coverage_check():
    """1.96 with two seeds: a printed single run within the experiment's own spread is called deviates ~30 % of the
    time (P(|t_1| > 1.96 / sqrt(1.5) * sqrt(1.5)) = 0.30); still ~8 % with ten seeds."""
    assert deviates_share(v.SINGLE, 2, rule=z_rule) > 0.25
    assert deviates_share(v.SINGLE, 10, rule=z_rule) > BOUND
    assert deviates_share("se", 2, rule=z_rule) > BOUND


def test_welch_satterthwaite_degrees_of_freedom_fail_the_coverage_check_with_two_seeds():
    """Why the rule takes the smaller side's degrees of freedom: against a printed standard error, two seeds and
    Welch-Satterthwaite's df (~2.3 here) call a faithful rebuild deviates ~9 % of the time."""
    assert deviates_share("se", 2, rule=welch_rule) > BOUND
    assert deviates_share("ci95", 2, rule=welch_rule) > BOUND


def hsu_rule(pm, reading, runs, std, n) -> float:
    """Student's t at the smaller degrees of freedom of the sides that carry an uncertainty, times the combined se."""
    se_p, _, df_p = v.printed_se(pm, reading, runs, std, n)
    df = df_p if reading == v.SINGLE else min((d for se, d in ((se_p, df_p), (std, n - 1)) if se > 0))
    return v.t_quantile(df) * math.sqrt(se_p**2 + std**2 / n)


def test_a_tight_rebuild_against_a_stated_standard_error_keeps_its_power():
    """Two seeds with a tiny spread against a printed standard error: the difference is nearly all the printed
    side's noise, whose 95 % half-width is 1.96 se. A printed value 4 se off is caught most of the time by the
    rule; Hsu's t(1) = 12.7 never catches it."""
    rng = np.random.default_rng(7)
    se_p, sigma, n = 1.0, 0.01, 2
    caught = {"rule": 0, "hsu": 0}
    for _ in range(TRIALS):
        x = rng.normal(MU, sigma, n)
        mean, std = float(x.mean()), float(x.std(ddof=1))
        value = rng.normal(MU, se_p) + 4 * se_p
        caught["rule"] += v.judge(value, se_p, "se", None, 0.0, mean, std, n, False).outcome == v.DEVIATES
        caught["hsu"] += abs(mean - value) > hsu_rule(se_p, "se", None, std, n)
    assert caught["rule"] / TRIALS > 0.9 and caught["hsu"] == 0
