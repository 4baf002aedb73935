"""The one Monte Carlo vs closed form check: draws against a number, draws against their per-draw closed forms
(paired), and a grid of estimates with their standard errors; each passes within z SE and fails outside."""

import numpy as np
import pytest

from fedrepro.experiments.montecarlo import matches_closed_form


def test_draws_against_a_number_pass_within_z_standard_errors_and_fail_outside():
    errs = np.random.default_rng(0).exponential(1.0, 5000)  # mean 1, SE ~ 0.014
    ok = matches_closed_form("local", errs, 1.0, 4.0)
    assert ok.passed and ok.value == pytest.approx(errs.mean()) and ok.expected == 1.0
    assert ok.tolerance == pytest.approx(4.0 * errs.std(ddof=1) / np.sqrt(errs.size))
    assert ok.detail.startswith("local: MC ") and " vs closed form 1 " in ok.detail
    bad = matches_closed_form("local", errs, 1.2, 4.0)
    assert not bad.passed and abs(bad.value - bad.expected) > bad.tolerance


def test_per_draw_closed_forms_take_the_standard_error_of_the_paired_differences():
    rng = np.random.default_rng(1)
    exact = rng.uniform(1.0, 100.0, 4000)  # each draw's own expectation, widely spread
    errs = exact + rng.normal(0.0, 0.1, exact.size)
    ok = matches_closed_form("known", errs, exact, 4.0, what="exact")
    assert ok.passed and " vs exact " in ok.detail
    assert ok.tolerance == pytest.approx(4.0 * (errs - exact).std(ddof=1) / np.sqrt(exact.size))
    # the spread of the draws themselves (~29) would hide an offset the paired SE (~0.0016) finds
    assert not matches_closed_form("known", errs, exact + 0.05, 4.0, what="exact").passed


def test_a_grid_passes_when_every_point_is_within_z_of_its_own_standard_error():
    cf = np.array([1.0, 2.0, 3.0])
    se = np.array([0.1, 0.1, 0.01])
    ok = matches_closed_form("curve", cf + [0.3, -0.2, 0.0], cf, 3.5, se=se)
    assert ok.passed and ok.value == pytest.approx(3.0) and (ok.expected, ok.tolerance) == (0.0, 3.5)
    assert "at 3 grid points, max |diff|/SE = 3.00" in ok.detail
    bad = matches_closed_form("curve", cf + [0.0, 0.0, 0.05], cf, 3.5, se=se)  # 5 SE at the third point only
    assert not bad.passed and bad.value == pytest.approx(5.0) and "(MC 3.05 vs 3)" in bad.detail
