"""Bernoulli personalized estimators (fedrepro.papers.adaped.bernoulli) and the App. K experiment kind."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrepro.experiments import RunContext, get_kind
from fedrepro.papers.adaped import bernoulli as b
from fedrepro.papers.adaped.experiments.bernoulli import prior_moments, sample_prior

EPS0 = st.floats(min_value=0.01, max_value=10.0)
UNIT = st.floats(min_value=0.0, max_value=1.0)


# ---------------------------------------------------------------- q_priv (eq. 7)
@given(x=UNIT, eps0=EPS0)
def test_q_priv_is_unbiased_exactly(x, eps0):
    lo, hi = b.q_priv_levels(eps0)
    ph = float(b.q_priv_prob_high(x, eps0))
    assert 0.0 <= ph <= 1.0
    assert lo * (1.0 - ph) + hi * ph == pytest.approx(x, abs=1e-9 * max(1.0, hi))


@given(x=UNIT, x2=UNIT, eps0=EPS0)
def test_q_priv_likelihood_ratio_at_most_e_eps0(x, x2, eps0):
    ph, ph2 = float(b.q_priv_prob_high(x, eps0)), float(b.q_priv_prob_high(x2, eps0))
    bound = math.exp(eps0) * (1.0 + 1e-12)
    for p, q in ((ph, ph2), (1.0 - ph, 1.0 - ph2)):  # both outputs
        assert p <= bound * q


@pytest.mark.parametrize("eps0", [0.1, 1.0, 3.0])
def test_q_priv_ratio_is_attained_at_the_endpoints(eps0):
    # the mechanism is exactly eps0-LDP, not more private: P(hi|1)/P(hi|0) = P(lo|0)/P(lo|1) = e^eps0
    p1, p0 = float(b.q_priv_prob_high(1.0, eps0)), float(b.q_priv_prob_high(0.0, eps0))
    assert p1 / p0 == pytest.approx(math.exp(eps0), rel=1e-12)
    assert (1 - p0) / (1 - p1) == pytest.approx(math.exp(eps0), rel=1e-12)


def test_q_priv_sampler_follows_its_probabilities():
    rng = np.random.default_rng(0)
    eps0, x = 0.7, np.repeat([0.0, 0.3, 1.0], 200_000)
    out = b.q_priv(x, eps0, rng)
    lo, hi = b.q_priv_levels(eps0)
    assert set(np.unique(out)) <= {lo, hi}
    for v in (0.0, 0.3, 1.0):
        sel = out[x == v]
        p = float(b.q_priv_prob_high(v, eps0))
        assert abs((sel == hi).mean() - p) < 5 * math.sqrt(p * (1 - p) / sel.size)
        assert abs(sel.mean() - v) < 5 * (hi - lo) * math.sqrt(p * (1 - p) / sel.size)
    with pytest.raises(ValueError):
        b.q_priv(np.array([1.2]), eps0, rng)


# ---------------------------------------------------------------- known prior (eq. 31)
@settings(max_examples=60)
@given(alpha=st.floats(0.2, 20), beta=st.floats(0.2, 20), n=st.integers(1, 30), data=st.data())
def test_posterior_mean_is_mean_of_beta_posterior(alpha, beta, n, data):
    z = data.draw(st.integers(0, n))
    pm = float(b.posterior_mean(z, n, alpha, beta))
    assert pm == pytest.approx((alpha + z) / (alpha + beta + n), rel=1e-12)
    assert pm == pytest.approx(stats.beta(alpha + z, beta + n - z).mean(), rel=1e-10)
    a = b.known_prior_weight(n, alpha, beta)
    assert pm == pytest.approx(a * z / n + (1 - a) * alpha / (alpha + beta), rel=1e-10)


@pytest.mark.parametrize("alpha,beta,n", [(2.0, 3.0, 5), (4.0, 4.0, 14), (0.7, 1.5, 1)])
def test_bayes_risk_equals_exact_beta_binomial_sum(alpha, beta, n):
    # E (p_hat - p)^2 = sum_z P(z) Var(p | z) with P(z) beta-binomial and p | z ~ Beta(alpha+z, beta+n-z)
    zs = np.arange(n + 1)
    pz = stats.betabinom(n, alpha, beta).pmf(zs)
    exact = float(np.sum(pz * stats.beta(alpha + zs, beta + n - zs).var()))
    assert b.bayes_risk_posterior_mean(n, alpha, beta) == pytest.approx(exact, rel=1e-10)
    # and the local estimator's risk E p(1-p)/n
    mu, var = b.beta_moments(alpha, beta)
    assert b.bayes_risk_local(n, alpha, beta) == pytest.approx((mu * (1 - mu) - var) / n, rel=1e-12)


def test_bayes_risk_matches_monte_carlo():
    rng = np.random.default_rng(1)
    alpha, beta, n, m = 3.0, 5.0, 10, 400_000
    p = rng.beta(alpha, beta, m)
    z = rng.binomial(n, p)
    for errs, cf in (
        ((b.posterior_mean(z, n, alpha, beta) - p) ** 2, b.bayes_risk_posterior_mean(n, alpha, beta)),
        ((b.local_estimate(z, n) - p) ** 2, b.bayes_risk_local(n, alpha, beta)),
    ):
        assert abs(errs.mean() - cf) < 4 * errs.std() / math.sqrt(m)


# ---------------------------------------------------------------- leave-one-out moments (eq. 6)
def _brute_force(x, n, minus_one, centre):
    """Literal O(m^2) loop over clients, straight from the printed formulas."""
    m = len(x)
    mu = np.array([sum(x[l] for l in range(m) if l != i) / (m - 1) for i in range(m)])
    s2 = np.empty(m)
    for i in range(m):
        c = (lambda l: mu[l]) if centre == "mu_l" else (lambda l, i=i: mu[i])
        s2[i] = sum((x[l] - c(l)) ** 2 for l in range(m) if l != i) / (m - 2)
    a = np.empty(m)
    for i in range(m):
        if s2[i] == 0:  # documented rule: no spread among the others -> the population mean
            a[i] = 0.0
            continue
        den = mu[i] * (1 - mu[i]) / s2[i] - (1 if minus_one else 0) + n
        a[i] = 1.0 if den == 0 else n / den  # documented rule: no Beta prior fits -> the local estimate
    return mu, s2, a, a * np.asarray(x) + (1 - a) * mu


@settings(max_examples=50, deadline=None)
@given(
    data=st.data(),
    m=st.integers(3, 20),
    n=st.integers(1, 20),
    minus_one=st.booleans(),
    centre=st.sampled_from(b.CENTRES),
)
def test_loo_estimate_equals_brute_force(data, m, n, minus_one, centre):
    z = np.array(data.draw(st.lists(st.integers(0, n), min_size=m, max_size=m)))
    x = z / n
    mu, s2, a, ph = _brute_force(list(x), n, minus_one, centre)
    est = b.loo_estimate(x, n, minus_one=minus_one, centre=centre)
    np.testing.assert_allclose(est["mu_hat"], mu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est["sigma2_hat"], s2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(est["a_hat"], a, rtol=1e-8, atol=1e-12)  # round-off zero vs 6e-31 is equal
    np.testing.assert_allclose(est["p_hat"], ph, rtol=1e-8, atol=1e-12)


def test_loo_is_vectorized_over_leading_axes():
    rng = np.random.default_rng(2)
    x = rng.binomial(7, rng.random((4, 50))) / 7
    batched = b.loo_estimate(x, 7)
    for r in range(4):
        np.testing.assert_allclose(batched["p_hat"][r], b.loo_estimate(x[r], 7)["p_hat"], rtol=1e-12)


def test_loo_centres_match_hand_computed_values():
    x = np.array([0.0, 1.0, 0.5, 0.25])
    m = x.size
    _, s2_i = b.loo_moments(x, "mu_i")
    _, s2_l = b.loo_moments(x, "mu_l")
    # client 0, App. C.2: others {1, .5, .25} centred at their mean 7/12, divided by m - 2 = 2
    assert s2_i[0] == pytest.approx(((1 - 7 / 12) ** 2 + (0.5 - 7 / 12) ** 2 + (0.25 - 7 / 12) ** 2) / 2, rel=1e-12)
    # client 0, Sec. 2.2 as printed: x_l - mu_l = m/(m-1) (x_l - mean(x))
    xb = x.mean()
    expected = (m / (m - 1)) ** 2 * sum((v - xb) ** 2 for v in x[1:]) / (m - 2)
    assert s2_l[0] == pytest.approx(expected, rel=1e-12)
    assert s2_l[0] != pytest.approx(s2_i[0], rel=1e-3)


def test_zero_variance_rule_gives_the_population_mean_without_nan():
    x = np.full(10, 0.3)
    x[0] = 0.9  # client 0 sees others all equal -> sigma2_0 = 0
    est = b.loo_estimate(x, 5)
    assert est["sigma2_hat"][0] == 0.0
    assert est["a_hat"][0] == 0.0 and est["p_hat"][0] == pytest.approx(0.3)
    assert np.all(np.isfinite(est["p_hat"]))
    assert np.all(est["a_hat"][1:] > 0)  # the others see the 0.9 and keep some weight on their own data
    # all-equal data including mu in {0, 1}: 0/0 is guarded too
    assert np.all(b.loo_estimate(np.zeros(6), 3)["p_hat"] == 0.0)


def test_weight_is_not_clipped():
    # n = 1 with maximal dispersion: mu(1-mu)/sigma2 < 1, so eq. (6) with "-1" gives a > 1 -- kept as printed
    x = np.array([0.0, 1.0] * 50)
    est = b.loo_estimate(x, 1)
    mu, s2 = est["mu_hat"], est["sigma2_hat"]
    np.testing.assert_allclose(est["a_hat"], 1.0 / (mu * (1 - mu) / s2), rtol=1e-12)
    assert np.all(est["a_hat"] > 1.0)
    # the App. C.2 form (no "-1") stays in [0, 1]
    assert np.all(b.loo_estimate(x, 1, minus_one=False)["a_hat"] <= 1.0)


def test_zero_denominator_rule_falls_back_to_local():
    a = b.shrinkage_weight(np.array([0.0, 0.5]), np.array([0.1, 0.1]), n=1, minus_one=True)
    assert a[0] == 1.0  # 0*(1-0)/0.1 - 1 + 1 = 0
    assert a[1] == pytest.approx(1.0 / 2.5)


def test_loo_needs_three_clients():
    with pytest.raises(ValueError):
        b.loo_moments(np.array([0.1, 0.2]))


# ---------------------------------------------------------------- large-m limit and the private estimator
@pytest.mark.parametrize("alpha,beta,n", [(4.0, 4.0, 14), (2.0, 8.0, 5)])
def test_large_m_limit_formula_reproduces_bayes_risk_at_the_oracle_weight(alpha, beta, n):
    # MSE(a) = a^2 (mu(1-mu)-var)/n + (1-a)^2 var at a = n/(alpha+beta+n) must equal the eq. (31) Bayes risk
    mu, var = b.beta_moments(alpha, beta)
    a = b.known_prior_weight(n, alpha, beta)
    lim = b.eq6_large_m_limit(mu, var, n)
    assert a * a * lim["mse_local"] + (1 - a) ** 2 * var == pytest.approx(b.bayes_risk_posterior_mean(n, alpha, beta))
    # literal eq. (6) uses Var(Xbar) = var + E p(1-p)/n, so its limiting weight is larger than the oracle's
    assert lim["a"] > a and lim["mse_personalized"] > b.bayes_risk_posterior_mean(n, alpha, beta)


def test_private_moments_are_unbiased_and_include_mechanism_noise():
    rng = np.random.default_rng(3)
    n, m, eps0 = 14, 20_000, 1.0
    p = rng.beta(4, 4, m)
    x = rng.binomial(n, p) / n
    est = b.private_estimate(x, n, eps0, rng)
    lo, hi = b.q_priv_levels(eps0)
    pi = b.q_priv_prob_high(x, eps0)
    expected_var = x.var() + np.mean((hi - lo) ** 2 * pi * (1 - pi))
    assert abs(est["mu_hat"].mean() - x.mean()) < 5 * (hi - lo) * 0.5 / math.sqrt(m)
    assert est["sigma2_hat"].mean() == pytest.approx(expected_var, rel=0.05)
    mu, s2 = est["mu_hat"], est["sigma2_hat"]
    np.testing.assert_allclose(est["a_hat"], n / (mu * (1 - mu) / s2 + n), rtol=1e-12)  # no "-1" (as printed)


# ---------------------------------------------------------------- the experiment kind
PARAMS = dict(
    m=2000,
    n=14,
    reps=3,
    normal_mean=0.5,
    normal_std=0.15,
    normal_support="truncate",
    spikes=[0.25, 0.5, 0.75],
    beta_alpha=4.0,
    beta_beta=4.0,
    minus_one=True,
    centre="mu_i",
    z=4.0,
)


def _run(seed, **over):
    kind = get_kind("bernoulli_synthetic")
    return kind.fn({**PARAMS, **over}, np.random.default_rng(seed), RunContext("test.bernoulli", seed))


def test_kind_metric_keys_and_checks_pass_at_small_scale():
    out = _run(0)
    for group in ("gain_pct", "mse_local", "mse_personalized"):
        assert set(out.metrics[group]) == {"normal", "uniform", "spike3", "beta"}
    for prior in out.metrics["gain_pct"]:
        ml, mp = out.metrics["mse_local"][prior], out.metrics["mse_personalized"][prior]
        assert out.metrics["gain_pct"][prior] == pytest.approx(100 * (ml - mp) / ml)
    failed = {k: c.detail for k, c in out.checks.items() if not c.passed}
    assert not failed, failed
    assert len(out.history) == 4 * PARAMS["reps"]


def test_kind_is_deterministic_for_a_seed():
    a, b2, c = _run(5), _run(5), _run(6)
    assert a.metrics == b2.metrics
    assert a.metrics["gain_pct"] != c.metrics["gain_pct"]


def test_checks_fail_when_the_closed_form_is_wrong(monkeypatch):
    import fedrepro.papers.adaped.experiments.bernoulli as mod

    orig = mod.prior_moments
    # pretend the normal prior's variance were 3x its true value: the Monte Carlo must disagree with it
    monkeypatch.setattr(
        mod, "prior_moments", lambda name, p: (0.5, 3.0 * orig(name, p)[1]) if name == "normal" else orig(name, p)
    )
    bad = _run(0)
    assert not bad.checks["normal_local_matches_closed_form"].passed
    assert not bad.checks["normal_mse_decrease_matches_large_m_limit"].passed
    assert bad.checks["beta_local_matches_closed_form"].passed


def test_prior_samplers_match_their_moments():
    rng = np.random.default_rng(4)
    for name, over in (
        ("normal", {}),
        ("normal", {"normal_support": "clip", "normal_std": 0.4}),
        ("uniform", {}),
        ("spike3", {}),
        ("beta", {}),
    ):
        p = {**PARAMS, **over}
        x = sample_prior(name, p, 400_000, rng)
        assert x.min() >= 0.0 and x.max() <= 1.0
        mu, var = prior_moments(name, p)
        assert abs(x.mean() - mu) < 5 * math.sqrt(var / x.size)
        assert x.var() == pytest.approx(var, rel=0.02)
    p = {**PARAMS, "normal_support": "clip", "normal_std": 0.4}
    assert np.mean(sample_prior("normal", p, 100_000, rng) == 1.0) > 0.05  # clip puts atoms at the ends
