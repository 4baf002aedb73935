"""PPSGD-exp (fedrepro.papers.ppsgd.ppsgd_exp): the code's step-size map, the alpha limits, per-user sensitivity, and
one round against a hand-written per-user reference."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrepro.papers.ppsgd import ppsgd_exp
from fedrepro.papers.ppsgd.stepsizes import clip_factors, parse_alpha, step_size_arrays, step_sizes


@pytest.mark.parametrize(
    "alpha, expected",
    [
        (0, (0.0, 0.5)),
        (0.3, (0.15, 0.5)),
        (1, (0.5, 0.5)),
        (3, (0.5, 0.5 / 3)),
        (math.inf, (0.5, 0.0)),
        (-1, (0.5, 0.0)),
        (".inf", (0.5, 0.0)),
    ],
)
def test_step_sizes_follow_the_code(alpha, expected):
    assert step_sizes(0.5, alpha) == pytest.approx(expected)


def test_bad_alpha_and_step_rejected():
    with pytest.raises(ValueError):
        parse_alpha(-2)
    with pytest.raises(ValueError):
        step_sizes(0.0, 1)


def _problem(rng, n=7, d=5, k=3, m=4):
    theta_star = rng.standard_normal((n, d, k))
    X = rng.standard_normal((n, m, d))
    Y = np.einsum("nmd,ndk->nmk", X, theta_star)
    return X, Y


def _run(alphas, sigma=2.0, rounds=4, clip=0.5, seed=0):
    rng = np.random.default_rng(seed)
    n, d, k = 7, 5, 3
    ew, et = step_size_arrays([0.3] * len(alphas), alphas)
    state = ppsgd_exp.State.zeros(n, d, k, len(alphas))
    for _ in range(rounds):
        X, Y = _problem(rng)
        users = rng.permutation(n)[:4]
        ppsgd_exp.round_step(state, users, X[users], Y[users], ew, et, sigma, clip, rng)
    return state


def test_alpha_zero_never_touches_w_and_draws_no_noise():
    state = _run([0.0, 0.0])
    assert np.all(state.w == 0)
    assert np.abs(state.theta).sum() > 0
    rng = np.random.default_rng(1)
    before = rng.bit_generator.state
    X, Y = _problem(np.random.default_rng(2))
    ppsgd_exp.round_step(ppsgd_exp.State.zeros(7, 5, 3, 1), np.arange(7), X, Y, np.zeros(1), np.ones(1), 5.0, 1.0, rng)
    assert rng.bit_generator.state == before  # no DP noise drawn: no privacy spent


def test_alpha_inf_keeps_theta_fixed():
    state = _run([math.inf, -1])
    assert np.all(state.theta == 0)
    assert np.abs(state.w).sum() > 0


def test_mixed_grid_columns_are_independent_of_each_other_in_the_limits():
    state = _run([0.0, 1.0, math.inf])
    assert np.all(state.w[..., 0] == 0)
    assert np.all(state.theta[..., 2] == 0)
    assert np.abs(state.w[..., 1]).sum() > 0 and np.abs(state.theta[..., 1]).sum() > 0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(2, 9),
    clip=st.floats(1e-3, 10.0),
    scale=st.floats(1e-3, 1e3),
    drop=st.integers(0, 100),
)
def test_removing_one_user_moves_the_clipped_sum_by_at_most_C(seed, n, clip, scale, drop):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, 4, 3, 2)) * scale * rng.random((n, 1, 1, 1))
    j = drop % n
    full, _ = ppsgd_exp.clipped_sum(g, clip)
    without, _ = ppsgd_exp.clipped_sum(np.delete(g, j, axis=0), clip)
    diff = np.sqrt(((full - without) ** 2).sum(axis=(0, 1)))  # Frobenius over d x K, per configuration
    assert np.all(diff <= clip * (1 + 1e-9))


def test_clip_factors():
    assert clip_factors(np.array([0.5, 2.0, 4.0]), 2.0) == pytest.approx([1.0, 1.0, 0.5])


def _reference_round(w, theta, users, X, Y, eta_w, eta_theta, sigma, C, noise):
    """Per-user loop, written from the official code's training_priv (notes §2.4), one configuration."""
    w, theta = w.copy(), theta.copy()
    L, m = len(users), X.shape[1]
    clipped = []
    grads = []
    for j, i in enumerate(users):
        P = X[j] @ (w + theta[i])
        g = X[j].T @ (P - Y[j]) / m
        grads.append(g)
        clipped.append(g / max(1.0, np.linalg.norm(g) / C))
    for j, i in enumerate(users):
        theta[i] = theta[i] - eta_theta * grads[j]
    if eta_w > 0:
        w = w - eta_w * (sum(clipped) / L + sigma * C / L * noise)
    return w, theta


@pytest.mark.parametrize("users", [np.array([5, 0, 3]), np.arange(6)])
def test_one_round_equals_per_user_reference(users):
    rng = np.random.default_rng(3)
    n, d, k, m, C, sigma = 6, 4, 2, 5, 0.7, 1.3
    alphas = [0.0, 0.3, 3.0, math.inf]
    ew, et = step_size_arrays([0.2] * 4, alphas)
    state = ppsgd_exp.State(rng.standard_normal((d, k, 4)), rng.standard_normal((n, d, k, 4)))
    X = rng.standard_normal((len(users), m, d))
    Y = rng.standard_normal((len(users), m, k))
    w0, th0 = state.w.copy(), state.theta.copy()
    ppsgd_exp.round_step(state, users, X, Y, ew, et, sigma, C, np.random.default_rng(11))
    noise = np.random.default_rng(11).standard_normal((d, k, 4))
    for c in range(4):
        w_ref, th_ref = _reference_round(w0[..., c], th0[..., c], users, X, Y, ew[c], et[c], sigma, C, noise[..., c])
        np.testing.assert_allclose(state.w[..., c], w_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.theta[..., c], th_ref, rtol=1e-12, atol=1e-12)


def test_duplicate_users_rejected():
    X, Y = _problem(np.random.default_rng(0))
    with pytest.raises(ValueError, match="distinct"):
        ppsgd_exp.round_step(
            ppsgd_exp.State.zeros(7, 5, 3, 1),
            np.array([1, 1]),
            X[:2],
            Y[:2],
            np.ones(1),
            np.ones(1),
            0.0,
            1.0,
            np.random.default_rng(0),
        )
