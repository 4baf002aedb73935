"""Personalized linear regression (AdaPeD App. E): eq. (47)/(48), eq. (52)/(53), objective (54), Algorithm 4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kinds import call_kind

from fedrepro.experiments import RunContext
from fedrepro.papers.adaped import linreg as lr
from fedrepro.papers.adaped.experiments.linreg import adaped_linreg


def _data(m, n, d, seed, st2=0.3, sx2=0.7, mu_std=0.5, x_var=1.3):
    return lr.simulate(m, n, d, st2, sx2, mu_std, x_var, np.random.default_rng(seed))


# --- eq. (47) ---------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 4),
    n=st.integers(1, 7),
    d=st.integers(1, 7),
    seed=st.integers(0, 10**6),
    st2=st.floats(0.05, 5.0),
    sx2=st.floats(0.05, 5.0),
)
def test_eq47_matches_per_client_bruteforce(m, n, d, seed, st2, sx2):
    D = _data(m, n, d, seed, st2, sx2)
    want = np.stack(
        [
            np.linalg.solve(np.eye(d) / st2 + D.X[i].T @ D.X[i] / sx2, D.X[i].T @ D.Y[i] / sx2 + D.mu / st2)
            for i in range(m)
        ]
    )
    np.testing.assert_allclose(lr.known_prior(D.X, D.Y, D.mu, st2, sx2), want, rtol=1e-9, atol=1e-10)
    spec = lr.Spectrum.of(D.X, D.Y)
    np.testing.assert_allclose(spec.posterior(D.mu, sx2 / st2), want, rtol=1e-7, atol=1e-9)
    tr = np.array([np.trace(np.linalg.inv(np.eye(d) / st2 + D.X[i].T @ D.X[i] / sx2)) for i in range(m)])
    np.testing.assert_allclose(spec.trace_inv_M(st2, sx2), tr, rtol=1e-9)
    np.testing.assert_allclose(lr.trace_inv_M(D.X, st2, sx2), tr, rtol=1e-9)
    np.testing.assert_allclose(spec.local_pinv(), np.einsum("mdn,mn->md", np.linalg.pinv(D.X), D.Y), atol=1e-8)


# --- exact MSE identities, by Monte Carlo with fixed designs -----------------------------------------------------


def _repeat_design(k, n, d, reps, x_var, seed):
    rng = np.random.default_rng(seed)
    X0 = math.sqrt(x_var) * rng.standard_normal((k, n, d))
    return X0, np.tile(X0, (reps, 1, 1)), rng


def test_known_prior_mse_equals_trace_inv_M():
    """E_{w,theta} ||theta_hat_i - theta_i||^2 = Tr(M_i^-1) given X_i (eq. 48), n < d and n > d designs."""
    k, reps, st2, sx2 = 4, 20000, 0.3, 0.7
    for n, d in ((3, 5), (8, 3)):
        X0, X, rng = _repeat_design(k, n, d, reps, 1.3, seed=n)
        mu = 0.5 * rng.standard_normal(d)
        theta = mu + math.sqrt(st2) * rng.standard_normal((k * reps, d))
        Y = (X @ theta[:, :, None])[:, :, 0] + math.sqrt(sx2) * rng.standard_normal((k * reps, n))
        err = ((lr.Spectrum.of(X, Y).posterior(mu, sx2 / st2) - theta) ** 2).sum(1).reshape(reps, k)
        se = err.std(axis=0, ddof=1) / math.sqrt(reps)
        tr = lr.trace_inv_M(X0, st2, sx2)
        assert np.all(np.abs(err.mean(axis=0) - tr) <= 4.5 * se), (err.mean(axis=0), tr, se)


def test_local_ols_mse_equals_eq53_when_n_gt_d():
    k, reps, n, d, sx2 = 3, 20000, 9, 4, 0.4
    X0, X, rng = _repeat_design(k, n, d, reps, 0.8, seed=7)
    theta = np.tile(rng.standard_normal((k, d)), (reps, 1))  # any fixed theta: OLS is unbiased
    Y = (X @ theta[:, :, None])[:, :, 0] + math.sqrt(sx2) * rng.standard_normal((k * reps, n))
    spec = lr.Spectrum.of(X, Y)
    err = ((lr.local_estimate(spec, "pinv") - theta) ** 2).sum(1).reshape(reps, k)
    eq53 = sx2 * np.trace(np.linalg.inv(np.swapaxes(X0, 1, 2) @ X0), axis1=1, axis2=2)
    se = err.std(axis=0, ddof=1) / math.sqrt(reps)
    assert np.all(np.abs(err.mean(axis=0) - eq53) <= 4.5 * se), (err.mean(axis=0), eq53, se)
    np.testing.assert_allclose(spec.local_pinv_mse(theta, sx2)[:k], eq53, rtol=1e-8)


def test_fedavg_pooled_ls_is_global_least_squares():
    D = _data(50, 3, 4, seed=1)
    want = np.linalg.lstsq(D.X.reshape(-1, 4), D.Y.reshape(-1), rcond=None)[0]
    np.testing.assert_allclose(lr.fedavg_estimate(D.X, D.Y, "pooled_ls"), want, rtol=1e-9)


# --- objective (54) and Algorithm 4 ------------------------------------------------------------------------------


def test_alg4_gradients_equal_finite_differences_of_eq54():
    m, n, d = 3, 4, 5
    D = _data(m, n, d, seed=2)
    rng = np.random.default_rng(3)
    th, mu, sx2, st2 = D.theta + 0.1 * rng.standard_normal((m, d)), D.mu + 0.2, 0.6, 0.4
    g = lr.client_gradients(D.X, D.Y, th, mu, sx2, st2)
    F = lambda *a: lr.objective(D.X, D.Y, *a)  # noqa: E731
    h = 1e-6
    fd_th = np.zeros_like(th)
    for i in range(m):
        for k in range(d):
            e = np.zeros_like(th)
            e[i, k] = h
            fd_th[i, k] = (F(th + e, mu, sx2, st2) - F(th - e, mu, sx2, st2)) / (2 * h)
    fd_mu = np.array(
        [(F(th, mu + h * np.eye(d)[k], sx2, st2) - F(th, mu - h * np.eye(d)[k], sx2, st2)) / (2 * h) for k in range(d)]
    )
    fd_sx = (F(th, mu, sx2 + h, st2) - F(th, mu, sx2 - h, st2)) / (2 * h)
    fd_st = (F(th, mu, sx2, st2 + h) - F(th, mu, sx2, st2 - h)) / (2 * h)
    np.testing.assert_allclose(g.theta, fd_th, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(g.mu.sum(0), fd_mu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose([g.sigma_x2.sum(), g.sigma_theta2.sum()], [fd_sx, fd_st], rtol=1e-6, atol=1e-6)


def test_alg4_plain_step_is_lines_6_to_13():
    """One plain step: theta_i -= eta dF/dtheta_i; server averages of mu_i, s^2_i = global - eta (1/m) dF/d(.)."""
    D = _data(6, 4, 3, seed=4)
    eta, sx2, st2 = 1e-3, 0.8, 0.5
    r = lr.alg4(D.X, D.Y, 1, eta, step="plain", init_theta="zeros", init_sigma_x2=sx2, init_sigma_theta2=st2)
    th0, mu0 = np.zeros((6, 3)), np.zeros(3)
    res = D.Y  # Y - X theta^0
    np.testing.assert_allclose(r.theta, th0 + eta * (np.einsum("mnd,mn->md", D.X, res) / sx2 + (mu0 - th0) / st2))
    np.testing.assert_allclose(r.mu, mu0)
    np.testing.assert_allclose(r.sigma_x2, sx2 - eta * np.mean(4 / (2 * sx2) - (res**2).sum(1) / (2 * sx2**2)))
    np.testing.assert_allclose(r.sigma_theta2, st2 - eta * (3 / (2 * st2)))


@pytest.mark.parametrize("step,eta,T", [("scaled", 1.0, 200), ("scaled", 0.5, 300), ("plain", 0.02, 3000)])
def test_alg4_converges_to_stationary_point(step, eta, T):
    D = lr.simulate(300, 30, 5, 0.5, 1.0, 1.0, 1.0, np.random.default_rng(3))
    spec = lr.Spectrum.of(D.X, D.Y)
    pts = [p for p in lr.stationary_points(D.X, D.Y, spec) if p.slope < 1]
    assert len(pts) == 1
    p = pts[0]
    g = lr.client_gradients(D.X, D.Y, p.theta, p.mu, p.sigma_x2, p.sigma_theta2)  # it is stationary
    assert (
        max(np.abs(g.theta).max(), np.abs(g.mu.sum(0)).max(), abs(g.sigma_x2.sum()), abs(g.sigma_theta2.sum())) < 1e-8
    )
    r = lr.alg4(D.X, D.Y, T, eta, step=step, spec=spec, record_every=T)
    assert not r.diverged
    np.testing.assert_allclose(r.theta, p.theta, atol=1e-6)
    np.testing.assert_allclose([r.sigma_x2, r.sigma_theta2], [p.sigma_x2, p.sigma_theta2], rtol=1e-6)


# --- the experiment kind -----------------------------------------------------------------------------------------

_P = dict(
    m=400,
    n=10,
    d=20,
    sigma_theta2=0.01,
    sigma_x2=0.05,
    mu_std=0.1,
    x_var=0.05,
    local_estimator="pinv",
    fedavg_estimator="pooled_ls",
    z=4.0,
    stationary_rel_tol=0.01,
    alg4=dict(T=100, eta=0.5, step="scaled", init_theta="local", init_sigma_x2=1.0, init_sigma_theta2=1.0),
)


def _run(seed=0, **over):
    p = {**_P, **over}
    return call_kind("adaped_linreg", p, np.random.default_rng(seed), RunContext("adaped.test", seed))


def test_kind_is_deterministic_and_keys():
    a, b, c = _run(0), _run(0), _run(1)
    assert a.metrics == b.metrics and a.metrics != c.metrics
    assert set(a.metrics) == {"mse", "gain_vs_local_pct", "gain_vs_fedavg_pct", "alt_vs_known_increase_pct", "bound"}
    assert set(a.metrics["mse"]) == {"local", "fedavg", "known", "alternating"}
    mse = a.metrics["mse"]
    assert a.metrics["gain_vs_local_pct"] == pytest.approx(100 * (mse["local"] - mse["alternating"]) / mse["local"])
    assert a.metrics["alt_vs_known_increase_pct"] == pytest.approx(
        100 * (mse["alternating"] - mse["known"]) / mse["known"]
    )
    assert {"t", "objective", "mse"} <= set(a.history.columns)


def test_stationary_check_passes_or_fails_with_the_setting():
    """n < d (the stated setting): the only interior stationary point is a saddle and Alg. 4 leaves it (check fails);
    n > d with informative data: Alg. 4 converges to the attracting one (check passes)."""
    bad = _run(0)
    assert bad.checks["known_mse_matches_trace"].passed
    assert not bad.checks["alg4_reaches_stationary_point"].passed
    good = _run(0, m=300, n=30, d=5, sigma_theta2=0.5, sigma_x2=1.0, mu_std=1.0, x_var=1.0)
    assert good.checks["alg4_reaches_stationary_point"].passed, good.checks["alg4_reaches_stationary_point"].detail


# --- App. K's bounds (the forensics' closed forms) -------------------------------------------------------------


def test_null_space_floor_matches_the_projects_monte_carlo():
    """E||P_null theta_i||^2 = (d - n)/d (||mu||^2 + d s_theta^2): the pinv local estimator's bias (its error in the
    null space of X_i, exact given X_i and theta_i) averaged over the project's simulated clients; and no local
    estimator (pinv, ridge) has a lower MSE."""
    m, n, d, st2 = 20000, 10, 50, 0.01
    D = lr.simulate(m, n, d, st2, 0.05, 0.1, 0.05, np.random.default_rng(4))
    spec = lr.Spectrum.of(D.X, D.Y)
    Vth = spec._V(D.theta)
    bias = (D.theta**2).sum(1) - (Vth**2).sum(1)
    floor = lr.null_space_floor(D.mu, st2, n)
    assert abs(bias.mean() - floor) <= 4 * bias.std(ddof=1) / math.sqrt(m)
    for est in (lr.local_estimate(spec, "pinv"), lr.local_estimate(spec, "ridge", 0.5)):
        assert ((est - D.theta) ** 2).sum(1).mean() >= floor
    assert lr.null_space_floor(D.mu, st2, d + 1) == 0.0


def test_no_personalized_estimator_beats_the_mmse_bound():
    out = _run(0)
    mse, bound = out.metrics["mse"], out.metrics["bound"]
    assert mse["alternating"] > mse["known"]
    assert out.metrics["gain_vs_fedavg_pct"] < bound["gain_vs_fedavg_max_pct"]
    assert out.metrics["gain_vs_local_pct"] < bound["gain_vs_local_max_pct"]


def test_personalized_reading_known_scores_eq47():
    out = _run(0, personalized="known")
    mse = out.metrics["mse"]
    assert out.metrics["gain_vs_fedavg_pct"] == pytest.approx(out.metrics["bound"]["gain_vs_fedavg_max_pct"])
    assert out.metrics["gain_vs_local_pct"] == pytest.approx(100 * (mse["local"] - mse["known"]) / mse["local"])
    assert "alg4_reaches_stationary_point" not in _run(0, stationary_search=False).checks


def test_printed_gain_checks_pass_or_fail():
    from fedrepro.papers.adaped.experiments.linreg import printed_gains_checks

    mse = {"known": 0.468, "fedavg": 0.501, "local": 1.053, "alternating": 0.743}  # App. K d = 50, pooled LS
    paper = printed_gains_checks((8.0, 0.8), (14.8, 1.2), mse, floor=0.797)
    assert not paper["printed_fedavg_gain_within_mmse_bound"].passed  # 14.8 ± 1.2 vs at most 6.6%
    assert not paper["printed_gain_ordering_possible"].passed  # needs FedAvg worse than any local
    fine = printed_gains_checks((50.0, 1.0), (5.0, 1.0), mse, floor=0.797)
    assert all(c.passed for c in fine.values())


def test_the_printed_rows_are_read_from_the_registry():
    from fedrepro.config import load_global, resolve_experiment

    cfg = load_global()
    exp = resolve_experiment(cfg, "adaped.linreg_d50", "quick", {"m": 300, "stationary_search": False})
    out = adaped_linreg(exp.params, np.random.default_rng(0), RunContext(exp.id, 0, config=cfg))
    assert "printed gain vs FedAvg 14.8 ± 1.2" in out.checks["printed_fedavg_gain_within_mmse_bound"].detail
    with pytest.raises(Exception, match="reads the registry"):
        adaped_linreg(exp.params, np.random.default_rng(0), RunContext(exp.id, 0))


def test_a_reused_population_gives_the_same_result_as_a_fresh_one():
    from fedrepro.papers.adaped.experiments import linreg as kind

    first = _run(0, stationary_search=False)
    again = _run(0, stationary_search=False)  # the kept population
    kind._POPULATIONS.clear()
    fresh = _run(0, stationary_search=False)
    assert first.metrics == again.metrics == fresh.metrics
    assert _run(1, stationary_search=False).metrics != first.metrics  # another seed: another population
    other = _run(0, stationary_search=False, mu_std=0.2)  # a parameter of the draw: another population
    assert other.metrics["mse"]["local"] != first.metrics["mse"]["local"]
