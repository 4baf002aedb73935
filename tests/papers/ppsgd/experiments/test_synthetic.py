"""PPSGD Fig. 1a (kind ppsgd_synthetic): the excess-risk closed forms, the crossing rule and a small run."""

import math

import numpy as np
import pytest
from kinds import call_kind

from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext
from fedrepro.papers.ppsgd import ppsgd_exp
from fedrepro.papers.ppsgd.experiments import synthetic as syn

SMALL = {
    "n_users": 30,
    "d": 8,
    "n_personal": 2,
    "theta0_std": 10.0,
    "personal_std": 0.01,
    "noise_std": 0.01,
    "m": 10,
    "niter": 25,
    "steps": [0.1, 0.5],
    "alphas": [0, 1, ".inf"],
    "sigmas": [0, 100.0],
    "clip": 1.0,
    "delta": 1e-4,
    "accountants": ["opacus_rdp", "rdp"],
    "eps_every": 10,
    "select": "min_over_steps_per_iteration",
    "crossing": {"sigmas": [100.0], "window": [1, 25]},
    "z": 4,
    "dtype": "float64",
}


def test_risk_at_init_equals_closed_form_per_user_loop():
    rng = np.random.default_rng(0)
    theta0, theta_star, lam = syn.draw_problem(SMALL, rng)
    state = ppsgd_exp.State.zeros(SMALL["n_users"], SMALL["d"], 1, 3)
    r = syn.excess_risk(state.w, state.theta, theta_star, lam)
    by_hand = np.mean(
        [sum(theta_star[i, k] ** 2 / (k + 1) for k in range(SMALL["d"])) for i in range(SMALL["n_users"])]
    )
    np.testing.assert_allclose(r, by_hand, rtol=1e-12)
    assert syn.init_risk_closed_form(theta_star, lam) == pytest.approx(by_hand, rel=1e-12)


def test_risk_of_a_moved_state_matches_sigma_norm():
    rng = np.random.default_rng(1)
    _, theta_star, lam = syn.draw_problem(SMALL, rng)
    w = rng.standard_normal((SMALL["d"], 1, 1))
    theta = rng.standard_normal((SMALL["n_users"], SMALL["d"], 1, 1))
    u = w[None, :, 0, 0] + theta[:, :, 0, 0] - theta_star
    expected = np.mean([ui @ np.diag(lam) @ ui for ui in u])
    assert syn.excess_risk(w, theta, theta_star, lam)[0] == pytest.approx(expected, rel=1e-12)


def test_init_risk_expectation_over_theta0():
    """E R(0,0) = theta0_std^2 H_d + s^2 sum_(personal) 1/k (notes §8.5: 518.7378 at the paper's settings)."""
    p = dict(SMALL, d=100, n_personal=5, n_users=4)
    lam = 1 / np.arange(1, 101)
    ev = p["theta0_std"] ** 2 * lam.sum() + p["personal_std"] ** 2 * lam[95:].sum()
    assert ev == pytest.approx(518.7378, abs=1e-4)
    rng = np.random.default_rng(2)
    draws = [syn.init_risk_closed_form(syn.draw_problem(p, rng)[1], lam) for _ in range(4000)]
    se = np.std(draws, ddof=1) / math.sqrt(len(draws))
    assert abs(np.mean(draws) - ev) <= 4 * se


def test_global_floor_is_min_over_w():
    rng = np.random.default_rng(3)
    _, theta_star, lam = syn.draw_problem(dict(SMALL, personal_std=0.1), rng)
    floor = syn.global_floor(theta_star, lam)
    w_best = theta_star.mean(axis=0)[:, None, None]
    zero = np.zeros((SMALL["n_users"], SMALL["d"], 1, 1))
    assert syn.excess_risk(w_best, zero, theta_star, lam)[0] == pytest.approx(floor, rel=1e-10)
    assert syn.excess_risk(w_best * 1.001, zero, theta_star, lam)[0] > floor


def test_first_crossing_and_selection():
    local = np.array([9.0, 8, 5, 2, 1])
    others = np.array([[9.0, 4, 3, 3, 0.5], [9.0, 7, 6, 2.5, 2]])
    assert syn.first_crossing(local, others) == 3
    assert syn.first_crossing(local, others - 100) is None
    risk = np.array([[3.0, 1.0], [1.0, 2.0], [0.5, 0.1]])
    assert syn.select_over_steps(risk, "min_over_steps_per_iteration")[0].tolist() == [1.0, 1.0, 0.1]
    assert syn.select_over_steps(risk, "min_over_steps_final")[1].tolist() == [1, 1, 1]


def test_small_run_checks_metrics_and_history():
    out = call_kind("ppsgd_synthetic", SMALL, np.random.default_rng(0), RunContext("ppsgd.t", 0))
    assert out.checks["init_risk_matches_closed_form"].passed
    assert out.checks["init_risk_matches_expectation"].passed
    h = out.history
    assert set(h["alpha_label"]) == {"0", "1", "inf"}
    assert len(h) == 2 * 3 * (SMALL["niter"] + 1)
    local = h[h["alpha"] == 0]
    assert (local["epsilon_opacus_rdp"] == 0).all()  # alpha = 0 spends no privacy
    priv = h[(h["alpha"] == 1) & (h["sigma"] == 100.0)].sort_values("iteration")
    e = priv["epsilon_opacus_rdp"].to_numpy()
    assert e[0] == 0 and np.all(np.diff(e) > 0)
    r = priv["epsilon_rdp"].to_numpy()
    assert r[10] == pytest.approx(e[10], rel=1e-3) and math.isnan(r[5])
    # the sigma = 0 global-only curve decreases from its closed-form start
    g = h[(h["alpha"] == math.inf) & (h["sigma"] == 0)].sort_values("iteration")["excess_risk"].to_numpy()
    assert g[-1] < g[0]
    assert "s100" in out.metrics["crossing_iteration"]
    assert out.metrics["final_epsilon"]["s100"]["opacus_rdp"] == pytest.approx(e[-1])


def test_misscaled_generator_fails_the_expectation_check():
    """The run check compares R(0,0) with E[R(0,0) | theta_0]; a wrong personal scale in the data must fail it."""
    rng = np.random.default_rng(4)
    p = dict(SMALL, n_users=2000, personal_std=1.0, theta0_std=0.1)
    theta0, theta_star, lam = syn.draw_problem(p, rng)
    r0 = syn.init_risk_closed_form(theta_star, lam)
    wrong = syn.expected_init_risk(theta0, lam, p["n_personal"], 0.01)
    se = (theta_star**2 @ lam).std(ddof=1) / math.sqrt(p["n_users"])
    assert abs(r0 - wrong) > 4 * se


def test_fig1a_text_claim_checks():
    global_fastest_early, global_stops_improving = syn.global_fastest_early, syn.global_stops_improving
    t = np.arange(101, dtype=float)
    glob = 100 * np.exp(-t / 5) + 1.0  # fast, then a plateau at 1
    pers = 100 * np.exp(-t / 20) + 0.01  # slower, lower floor
    best = {(0.0, math.inf): glob, (0.0, 1.0): pers, (0.0, 0.0): pers + 5}
    assert global_fastest_early(best, [0.0, 1.0, math.inf], [0.0], 10).passed
    assert not global_fastest_early(best, [0.0, 1.0, math.inf], [0.0], 100).passed  # late: personalized lower
    assert global_stops_improving(best, [0.0, 1.0, math.inf], 1.0).passed
    best[(0.0, math.inf)] = 100 * np.exp(-t / 5)  # no plateau within reach
    assert not global_stops_improving(best, [0.0, 1.0, math.inf], 0.0).passed


def test_dominates_from_needs_local_below_through_the_end():
    local = np.array([9.0, 8, 5, 2, 1, 0.5])
    others = np.array([[9.0, 4, 6, 1, 3, 2], [9.0, 9, 9, 9, 9, 9]])
    assert syn.first_crossing(local, others) == 2  # below at t = 2, above again at t = 3
    assert syn.dominates_from(local, others) == 4  # below at every t >= 4
    others[0, -1] = 0.1  # above at the last iteration: never dominates
    assert syn.dominates_from(local, others) is None
    assert syn.dominates_from(np.zeros(4), np.ones((2, 4))) == 1


def test_compare_alphas_restricts_the_claims_to_the_plotted_curves():
    t = np.arange(31, dtype=float)
    glob = 100 * np.exp(-t / 5) + 1.0
    best = {
        (0.0, math.inf): glob,
        (0.0, 30.0): glob - 0.5,
        (0.0, 1.0): 100 * np.exp(-t / 20) + 0.01,
        (0.0, 0.0): 100 * np.exp(-t / 25),
    }
    alphas = [0.0, 1.0, 30.0, math.inf]
    assert not syn.global_fastest_early(best, alphas, [0.0], 10).passed  # alpha 30 is lower
    plotted = syn.compared_alphas({"compare_alphas": [0, 1, ".inf"]}, alphas)
    assert plotted == [0.0, 1.0, math.inf]
    assert syn.global_fastest_early(best, plotted, [0.0], 10).passed
    assert syn.compared_alphas({"compare_alphas": None}, alphas) == alphas
    with pytest.raises(ConfigError, match="compare_alphas"):
        syn.compared_alphas({"compare_alphas": [0, 3]}, alphas)


def test_stall_requires_global_to_have_stopped_improving():
    t = np.arange(101, dtype=float)
    still_falling = 100 * np.exp(-t / 50) + 0.5
    best = {(0.0, math.inf): still_falling, (0.0, 1.0): 100 * np.exp(-t / 10) + 0.01}
    alphas = [0.0, 1.0, math.inf]
    assert syn.global_stops_improving(best, alphas, 0.5).passed  # later-better part only
    stall = {"window": 20, "max_drop": 0.1}
    assert not syn.global_stops_improving(best, alphas, 0.5, stall).passed  # still 32% lower
    c = syn.global_stops_improving(best, alphas, 0.5, stall)
    assert c.value / c.tolerance > 3  # its distance for forensics: a 32% drop vs 10% allowed
    best[(0.0, math.inf)] = 100 * np.exp(-t / 5) + 0.5  # flat at 0.5 by the end
    c = syn.global_stops_improving(best, alphas, 0.5, stall)
    assert c.passed and c.value / c.tolerance < 1


def test_small_run_with_the_claim_readings():
    p = dict(
        SMALL,
        alphas=[0, 1, 3, ".inf"],
        compare_alphas=[0, 1, ".inf"],
        stall={"window": 5, "max_drop": 0.5},
        crossing={"sigmas": [100.0], "window": [1, 25], "rule": "dominates_from"},
    )
    out = call_kind("ppsgd_synthetic", p, np.random.default_rng(0), RunContext("ppsgd.t", 0))
    assert "3" not in out.checks["local_overtakes_joint_at_large_noise"].detail.split("curve (")[1].split(";")[0]
    assert "need < 50%" in out.checks["global_stops_improving_without_noise"].detail
    with pytest.raises(ConfigError):
        call_kind(
            "ppsgd_synthetic", dict(p, compare_alphas=[0, 10]), np.random.default_rng(0), RunContext("ppsgd.t", 0)
        )


def test_the_crossing_check_states_its_distance_to_the_window():
    p = dict(SMALL, crossing={"sigmas": [100.0], "window": [1, 25], "rule": "dominates_from"})
    c = call_kind("ppsgd_synthetic", p, np.random.default_rng(0), RunContext("ppsgd.t", 0)).checks[
        "local_overtakes_joint_at_large_noise"
    ]
    assert (c.expected, c.tolerance) == (13.0, 12.0) and (abs(c.value - 13) <= 12) == c.passed
    far = call_kind(
        "ppsgd_synthetic",
        dict(p, crossing=dict(p["crossing"], window=[200, 300])),
        np.random.default_rng(0),
        RunContext("ppsgd.t", 0),
    ).checks["local_overtakes_joint_at_large_noise"]
    assert not far.passed and abs(far.value - far.expected) > far.tolerance
