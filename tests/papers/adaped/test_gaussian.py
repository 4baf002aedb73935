"""Gaussian personalized estimation: closed forms of Thm 1 / eq. (19) against Monte Carlo, at many parameters."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from fedrepro.papers.adaped import gaussian as g


def _mc(m, n, d, s_t, s_x, reps, rng, sigma_q=0.0, a=None):
    errs = []
    for _ in range(reps):
        theta, xbar = g.simulate_means(m, n, d, s_t, s_x, 0.3, rng)
        mu_q = (xbar + sigma_q * rng.standard_normal(xbar.shape)).mean(axis=0)
        errs.append(((g.personalized(xbar, a, mu_q) - theta) ** 2).sum(axis=1).mean())
    errs = np.array(errs)
    return errs.mean(), errs.std(ddof=1) / math.sqrt(reps)


@settings(max_examples=15, deadline=None)
@given(m=st.integers(5, 400), n=st.integers(1, 40), d=st.integers(1, 3),
       s_t=st.floats(0.0, 2.0), s_x=st.floats(0.05, 3.0), seed=st.integers(0, 2**31))
def test_theorem1_mse_matches_monte_carlo(m, n, d, s_t, s_x, seed):
    rng = np.random.default_rng(seed)
    a = g.shrinkage_weight(s_t, s_x, n)
    cf = g.mse_shrinkage(a, s_t, s_x, n, m, 0.0, d)
    s = s_x**2 / n
    assert math.isclose(cf, d * s * (a + (1 - a) / m), rel_tol=1e-12)  # Thm 1 holds with equality
    mc, se = _mc(m, n, d, s_t, s_x, 400, rng, a=a)
    assert abs(mc - cf) <= 5 * se + 1e-12


@settings(max_examples=15, deadline=None)
@given(m=st.integers(5, 300), n=st.integers(1, 20), s_q=st.floats(0.0, 5.0), a=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**31))
def test_eq19_mse_for_any_weight_and_noise(m, n, s_q, a, seed):
    rng = np.random.default_rng(seed)
    cf = g.mse_shrinkage(a, 0.2, 0.7, n, m, s_q, 1)
    mc, se = _mc(m, n, 1, 0.2, 0.7, 600, rng, sigma_q=s_q, a=a)
    assert abs(mc - cf) <= 5 * se + 1e-12


@given(m=st.integers(3, 10**5), n=st.integers(1, 100), s_t=st.floats(1e-3, 3), s_x=st.floats(1e-2, 3),
       s_q=st.floats(1e-3, 50))
def test_eq5_weight_minimises_eq19(m, n, s_t, s_x, s_q):
    a_star = g.shrinkage_weight(s_t, s_x, n, s_q, m)
    best = g.mse_shrinkage(a_star, s_t, s_x, n, m, s_q)
    for a in (a_star - 1e-3, a_star + 1e-3):
        assert g.mse_shrinkage(a, s_t, s_x, n, m, s_q) >= best - 1e-15


def test_ldp_mechanism_noise_and_projection():
    b = g.projection_bound(0.0, 0.1, 0.5, 10**4, 15)
    expected_b = (0.1 + 0.5 / math.sqrt(15)) * math.sqrt(math.log(10**8 * 15))
    assert math.isclose(b, expected_b)
    s = g.ldp_noise_std(b, 0.5, 1e-5)
    assert math.isclose(s**2, 8 * b * b * math.log(2 / 1e-5) / 0.25)
    rng = np.random.default_rng(0)
    x = np.array([[-10.0], [0.2], [10.0]])
    out = np.stack([g.gaussian_ldp(x, b, 0.5, 1e-5, rng) for _ in range(4000)])
    np.testing.assert_allclose(out.mean(axis=0).ravel(), [-b, 0.2, b], atol=5 * s / math.sqrt(4000))
    np.testing.assert_allclose(out.std(axis=0).ravel(), s, rtol=0.05)


def test_remark1_ratio_limits():
    m, n = 1000, 10
    assert math.isclose(g.remark1_ratio(m, n, 2.0, 0.0), 1 / m)  # no heterogeneity: global mean, 1/m
    assert g.remark1_ratio(m, n, 2.0, 1e9) > 0.999  # huge heterogeneity: local estimator
    a = 0.5 / (0.5 + 2.0 / n)
    assert math.isclose(g.remark1_ratio(m, n, 2.0, 0.5), a + (1 - a) / m)
