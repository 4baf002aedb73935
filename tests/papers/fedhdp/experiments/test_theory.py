"""FedHDP theory (src/fedrepro/papers/fedhdp): closed forms against Monte Carlo and against each other, at parameter
values other than the figures' ones, and the theory experiment kinds (Figs. 1-4, Table 2) at small sizes."""

import math

import numpy as np
import pytest
from kinds import call_kind

from fedrepro.experiments import RunContext, get_kind
from fedrepro.papers.fedhdp import linear_regression as lr
from fedrepro.papers.fedhdp import point_estimation as pe

POINTS = [(20, 0.05, 1.0, 1.0, 1.0), (30, 0.2, 0.5, 2.0, 0.3), (10, 0.5, 3.0, 0.2, 2.0)]


def _z_ok(mc, se, cf, z=4.5):
    return np.all(np.abs(mc - cf) <= z * se)


@pytest.mark.parametrize("n,rho,a2,t2,g2", POINTS)
def test_server_variance_closed_form_matches_monte_carlo(n, rho, a2, t2, g2):
    rng = np.random.default_rng(11)
    n_np, n_p = pe.split(n, rho)
    noise = np.r_[np.zeros(n_np), np.full(n_p, n_p * g2)]
    sim = pe.simulate_clients(20000, n, 4, a2, t2, noise, rng, phi=3.0)
    r = np.array([0.0, 0.05, 0.3, 1.0, 2.0])
    err = pe.aggregate(sim["psi"], n_np, r) - 3.0
    mc, se = pe.mc_mean_se(err**2)
    assert _z_ok(mc, se, pe.server_variance(r, n, rho, a2 + t2, g2))
    # phi_hat has variance alpha2 around phi_j (eq. 6 with sample noise n_s alpha2)
    assert np.var(sim["phi_hat"] - sim["phi_j"]) == pytest.approx(a2, rel=0.03)


@pytest.mark.parametrize("n,rho,a2,t2,g2", POINTS)
def test_lemma1_and_baselines(n, rho, a2, t2, g2):
    sc = a2 + t2
    rs = pe.r_star(n, rho, sc, g2)
    grid = np.linspace(0, 3, 300001)
    v = pe.server_variance(grid, n, rho, sc, g2)
    assert grid[v.argmin()] == pytest.approx(rs, abs=2e-5)
    assert float(pe.server_variance(rs, n, rho, sc, g2)) == pytest.approx(
        pe.server_variance_opt(n, rho, sc, g2), rel=1e-12
    )
    assert float(pe.server_variance(1.0, n, rho, sc, g2)) == pytest.approx(
        pe.server_variance_hdp(n, rho, sc, g2), rel=1e-12
    )
    gaps = pe.lemma2_gaps(n, rho, sc, g2)
    opt = pe.server_variance_opt(n, rho, sc, g2)
    assert gaps["hdp_minus_opt"] == pytest.approx(pe.server_variance_hdp(n, rho, sc, g2) - opt, rel=1e-10)
    assert gaps["dp_minus_opt"] == pytest.approx(pe.server_variance_dp(n, rho, sc, g2) - opt, rel=1e-10)
    assert gaps["dp_minus_hdp"] == pytest.approx(rho * (1 - rho) * g2, rel=1e-10)


def test_dp_fedavg_server_variance_by_simulation():
    """DP-FedAvg: every client noised with N_p gamma2, uniform average (the Lemma 2 baseline, derived in the notes)."""
    n, rho, a2, t2, g2 = 20, 0.25, 1.0, 0.5, 0.8
    n_p = pe.split(n, rho)[1]
    sim = pe.simulate_clients(40000, n, 3, a2, t2, np.full(n, n_p * g2), np.random.default_rng(3))
    err = sim["psi"].mean(axis=1)
    mc, se = pe.mc_mean_se(err**2)
    assert abs(mc - pe.server_variance_dp(n, rho, a2 + t2, g2)) <= 4.5 * se


@pytest.mark.parametrize("n,rho,a2,t2,g2", POINTS)
@pytest.mark.parametrize("private", [True, False])
def test_personalized_mse_matches_monte_carlo_both_conventions(n, rho, a2, t2, g2, private):
    lam = np.array([0.01, 0.3, 1.0, 5.0])
    for own in ("included", "excluded"):
        for r in (None, 1.0):
            out = pe.opt_out_curves(n, rho, a2, t2, g2, r, lam, 8000, 3, np.random.default_rng(5), private, own)
            ratio = pe.r_star(n, rho, a2 + t2, g2) if r is None else r
            cf = pe.local_mse(lam, *pe.client_setup(n, rho, ratio, a2, t2, g2, private, own), a2, t2)
            assert _z_ok(out["mse"], out["se"], cf), (own, r)


def test_closed_form_fails_against_a_wrong_model():
    """The agreement test can fail: a 10 % error in the noise variance is detected."""
    n, rho, a2, t2, g2 = 20, 0.05, 1.0, 1.0, 1.0
    lam = np.array([0.5, 2.0, 10.0])
    out = pe.opt_out_curves(n, rho, a2, t2, g2, 1.0, lam, 20000, 3, np.random.default_rng(8), True)
    wrong = pe.local_mse(lam, *pe.client_setup(n, rho, 1.0, a2, t2, 1.1 * g2, True), a2, t2)
    assert not _z_ok(out["mse"], out["se"], wrong)


@pytest.mark.parametrize("n,rho,a2,t2,g2", POINTS + [(20, 0.05, 1, 1, 4), (1000, 0.1, 2, 1, 0.1)])
def test_theorem3_lambda_star_is_the_argmin_and_bayes_optimal(n, rho, a2, t2, g2):
    r = pe.r_star(n, rho, a2 + t2, g2)
    lp, lnp = pe.lambda_p_star(n, rho, a2, t2, g2), pe.lambda_np_star(a2, t2)
    assert lp == pytest.approx(pe.lambda_p_star_eq79(n, rho, a2, t2, g2), rel=1e-12)
    assert lp <= lnp
    for private, lam in ((True, lp), (False, lnp)):
        setup = pe.client_setup(n, rho, r, a2, t2, g2, private, "excluded")
        grid = np.geomspace(lam / 3, lam * 3, 20001)
        assert grid[np.argmin(pe.local_mse(grid, *setup, a2, t2))] == pytest.approx(lam, rel=1e-3)
        assert pe.local_mse_argmin(*setup, a2, t2) == pytest.approx(lam, rel=1e-10)
        assert float(pe.local_mse(lam, *setup, a2, t2)) == pytest.approx(
            pe.bayes_local_variance(n, rho, a2, t2, g2, private), rel=1e-10
        )
    # Algorithm 1 read literally (own noisy psi in the global model): a slightly different optimum (notes §7 #3)
    lit = pe.local_mse_argmin(*pe.client_setup(n, rho, r, a2, t2, g2, True, "included"), a2, t2)
    assert lit < lp


def test_notes_example_values_and_literal_reading():
    assert pe.lambda_p_star(20, 0.05, 1, 1, 4) == pytest.approx(0.43284, abs=5e-6)
    assert pe.lambda_p_star(20, 0.5, 1, 3, 1) == pytest.approx(0.31034, abs=5e-6)
    lit = pe.local_mse_argmin(*pe.client_setup(20, 0.05, pe.r_star(20, 0.05, 2, 1), 1, 1, 1, True), 1, 1)
    assert lit == pytest.approx(0.600, abs=5e-4)
    assert pe.lambda_p_star(20, 0.05, 1, 1, 1) == pytest.approx(0.608, abs=5e-4)


def test_lemma7_one_step_client_update():
    rng = np.random.default_rng(0)
    g, start, phi_hat, lam = rng.standard_normal(4)
    lam = abs(lam)
    theta, theta_k = pe.client_update(g, start, phi_hat, lam)
    assert theta == pytest.approx(phi_hat)
    assert theta_k == pytest.approx((phi_hat + lam * g) / (1 + lam))


@pytest.mark.parametrize(
    "n1,n2,g1,g2,a2,t2", [(1, 19, 0.0, 1.0, 0.05, 1.0), (5, 15, 0.3, 2.0, 1.0, 0.5), (30, 70, 0.1, 0.5, 2.0, 1.0)]
)
def test_linear_regression_two_level_closed_forms(n1, n2, g1, g2, a2, t2):
    counts, gam = [n1, n2], [g1, g2]
    r = lr.r_star_levels(counts, gam, a2, t2)
    assert lr.server_variance(counts, gam, r, a2, t2) == pytest.approx(lr.server_variance_opt(counts, gam, a2, t2))
    assert lr.server_variance_opt(counts, gam, a2, t2) == pytest.approx(
        lr.server_variance_opt_two_level(n1, n2, g1, g2, a2, t2), rel=1e-12
    )
    for ratio in (0.5 * r[1], 2 * r[1]):
        assert lr.server_variance(counts, gam, [1, ratio], a2, t2) > lr.server_variance_opt(counts, gam, a2, t2)
    for level, lam in enumerate(lr.lambda_star_two_level(n1, n2, g1, g2, a2, t2)):
        setup = lr.level_setup(counts, gam, r, a2, t2, level, "excluded")
        assert pe.local_mse_argmin(*setup, a2, t2) == pytest.approx(lam, rel=1e-10)
        assert lr.lambda_star_levels(counts, gam, a2, t2, level) == pytest.approx(lam, rel=1e-10)
    # point estimation is the special case gamma_1 = 0 (App. B)
    if g1 == 0:
        assert lr.lambda_star_two_level(n1, n2, 0, g2, a2, t2)[1] == pytest.approx(
            pe.lambda_p_star(n1 + n2, n1 / (n1 + n2), a2, t2, g2), rel=1e-12
        )


def test_three_levels_general_lambda_star():
    counts, gam, a2, t2 = [3, 5, 12], [0.0, 0.2, 1.0], 1.0, 0.7
    r = lr.r_star_levels(counts, gam, a2, t2)
    for level in range(3):
        setup = lr.level_setup(counts, gam, r, a2, t2, level, "excluded")
        assert lr.lambda_star_levels(counts, gam, a2, t2, level) == pytest.approx(
            pe.local_mse_argmin(*setup, a2, t2), rel=1e-10
        )


def test_linear_regression_loss_matches_monte_carlo():
    counts, gam, beta2, n_s, d, t2 = [3, 9], [0.2, 1.5], 2.0, 8, 3, 0.4
    lam = np.array([0.02, 0.3, 3.0])
    out = lr.opt_out_curves(counts, gam, None, lam, 4000, d, n_s, beta2, t2, np.random.default_rng(2), 1)
    cf = lr.local_loss(lam, d, counts, gam, out["r"], beta2 / n_s, t2, 1)
    assert _z_ok(out["loss"], out["se"], cf)
    assert out["alpha2_mc"] == pytest.approx(beta2 / n_s, rel=0.05)
    F = lr.designs(4, n_s, d, np.random.default_rng(0))
    np.testing.assert_allclose(np.einsum("jsa,jsb->jab", F, F), np.broadcast_to(n_s * np.eye(d), (4, d, d)), atol=1e-10)


# ---------------------------------------------------------------------------------------------------- kinds
def _run(kind, params, seed=0):
    return call_kind(kind, params, np.random.default_rng(seed), RunContext("test", seed))


def test_fig1_kind_small():
    p = {
        "N": 20,
        "rho": 0.1,
        "n_s": 3,
        "alpha_share": 0.3,
        "trials": 3000,
        "fwer": 0.001,
        "r_grid": {"start": 0, "stop": 1, "num": 11},
        "panels": [
            {"name": "a", "curves": [{"sigma_c2": 2.0, "gamma2": 0.5}]},
            {"name": "b", "curves": [{"sigma_c2": 0.5, "gamma2": 3.0}]},
        ],
    }
    out = _run("fedhdp_server_variance", p)
    assert all(c.passed for c in out.checks.values()), {k: c.detail for k, c in out.checks.items()}
    assert out.metrics["a.sc2_g0.5"]["r_star"] == pytest.approx(pe.r_star(20, 0.1, 2.0, 0.5))
    assert len(out.history) == 22


@pytest.mark.parametrize("model", ["point", "linreg"])
def test_opt_out_kind_small(model):
    p = {
        "model": model,
        "N": 12,
        "n_np": 2,
        "alpha2": 0.5,
        "tau2": 0.8,
        "gamma2": 0.7,
        "n_s": 4,
        "d": 2,
        "lam_grid": {"start": 0.01, "stop": 10, "num": 6, "log": True},
        "trials": 1500,
        "fwer": 0.001,
    }
    out = _run("fedhdp_opt_out", p)
    assert all(c.passed for c in out.checks.values()), {k: c.detail for k, c in out.checks.items()}
    assert set(out.history["panel"]) == {"hdp", "fedhdp"} and len(out.history) == 24


def test_fig4_kind_small():
    p = {
        "N": 20,
        "sigma_c2": 1.0,
        "gamma2": 2.0,
        "alpha_share": 0.5,
        "n_s": 2,
        "n_np_step": 4,
        "trials": 2000,
        "fwer": 0.001,
        "claim": {"rho": 0.05, "min_ratio": 2.0},
    }
    out = _run("fedhdp_server_variance_vs_rho", p)
    assert all(c.passed for c in out.checks.values()), {k: c.detail for k, c in out.checks.items()}


def test_table2_kind_flags_only_the_inconsistent_cell():
    p = {
        "points": [
            {"N": 20, "alpha2": 4.0, "tau2": 1.0, "gamma2": 0.5, "rho": 0.05},
            {"N": 50, "alpha2": 0.3, "tau2": 2.0, "gamma2": 3.0, "rho": 0.1},
        ],
        "lemma2_limit_N": 10**8,
        "lemma2_rel_tol": 1e-4,
        "mc_point": {"N": 20, "alpha2": 4.0, "gamma2": 1.0},
        "trials": 2000,
        "n_s": 2,
        "fwer": 0.001,
        "examples": {"e": {"N": 20, "rho": 0.05, "alpha2": 1.0, "tau2": 1.0, "gamma2": 4.0}},
    }
    out = _run("fedhdp_table2", p)
    failed = {k for k, c in out.checks.items() if not c.passed}
    assert failed == {"table2_hom_data_hom_priv"}
    assert out.metrics["examples"]["e"]["lam_p_star"] == pytest.approx(0.43284, abs=5e-6)
    # with alpha2 = 1 everywhere the printed 1/gamma2 is right, and the check passes
    p1 = dict(p, points=[dict(q, alpha2=1.0) for q in p["points"]])
    assert _run("fedhdp_table2", p1).checks["table2_hom_data_hom_priv"].passed


def test_theory_experiments_in_config_validate():
    from fedrepro.config import load_global, load_paper, validate

    cfg = load_global()
    exps = load_paper(cfg, "fedhdp")["experiments"]
    for name in ("fig1", "fig2", "fig3", "fig4", "table2"):
        kind = get_kind(exps[name]["kind"])
        validate({**exps[name]["params"], **exps[name].get("quick", {})}, kind.schema, source=name)
        validate(exps[name]["params"], kind.schema, source=name)
    assert math.isclose(exps["fig1"]["params"]["rho"] * exps["fig1"]["params"]["N"], 1)


def test_plots_render_from_kind_histories():
    from fedrepro.plots import get_plot

    fig1 = _run(
        "fedhdp_server_variance",
        {
            "N": 10,
            "rho": 0.1,
            "n_s": 2,
            "alpha_share": 0.5,
            "trials": 300,
            "fwer": 0.001,
            "r_grid": {"start": 0, "stop": 1, "num": 5},
            "panels": [{"name": "l", "curves": [{"sigma_c2": 1.0, "gamma2": 0.5}]}],
        },
    )
    opt = _run(
        "fedhdp_opt_out",
        {
            "model": "point",
            "N": 10,
            "n_np": 1,
            "alpha2": 1.0,
            "tau2": 1.0,
            "gamma2": 1.0,
            "n_s": 2,
            "lam_grid": {"start": 0.01, "stop": 10, "num": 4, "log": True},
            "trials": 300,
            "fwer": 0.001,
        },
    )
    rho = _run(
        "fedhdp_server_variance_vs_rho",
        {
            "N": 10,
            "sigma_c2": 1.0,
            "gamma2": 1.0,
            "alpha_share": 0.5,
            "n_s": 2,
            "n_np_step": 3,
            "trials": 300,
            "fwer": 0.001,
            "claim": {"rho": 0.1, "min_ratio": 1.0},
        },
    )
    for name, out in (
        ("fedhdp_server_variance_vs_r", fig1),
        ("fedhdp_opt_out", opt),
        ("fedhdp_server_variance_vs_rho", rho),
    ):
        fig = get_plot(name)(
            {"artifact": "Figure", "options": {"N": 10, "rho": 0.1, "logy": True}}, {}, [out.history, out.history]
        )
        assert fig.axes
