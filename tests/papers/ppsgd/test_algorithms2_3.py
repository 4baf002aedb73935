"""Algorithms 2 and 3 (fedrepro.papers.ppsgd.algorithms2_3): reductions to Algorithm 1, the sum/mean relation, the alpha
= 0 limit, unsampled users, per-user sensitivity and the sampling rate."""

import numpy as np
import pytest

from fedrepro.papers.ppsgd.algorithm1 import alg1_step
from fedrepro.papers.ppsgd.algorithms2_3 import alg23_step, sample_users, user_gradients


def _data(seed=0, n=6, m=3, d=4, k=2):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((d, k)),
        rng.standard_normal((n, d, k)),
        rng.standard_normal((n, m, d)),
        rng.standard_normal((n, m, k)),
    )


@pytest.mark.parametrize("variant", ["sum", "mean"])
def test_full_participation_single_sample_is_algorithm_1(variant):
    w, th, X, Y = _data(m=1)
    n = th.shape[0]
    ones = np.ones(n, dtype=int)
    for sigma, clip in ((0.0, 1e12), (0.7, 0.3)):
        a = alg23_step(
            w, th, X, Y, ones, np.ones(n, bool), 0.2, 1.5, 1.0, sigma, clip, np.random.default_rng(4), variant
        )
        b = alg1_step(w, th, X[:, 0], Y[:, 0], 0.2, 1.5, sigma, clip, np.random.default_rng(4))
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)


def test_sum_with_equal_batches_and_no_clipping_equals_mean():
    # Alg. 2: theta step eta/(qM) on a sum of m gradients = eta/(qN) on their mean (M = N m): Alg. 3's step
    w, th, X, Y = _data(1)
    n, m = X.shape[:2]
    counts = np.full(n, m)
    picked = np.array([1, 0, 1, 1, 0, 1], bool)
    a = alg23_step(w, th, X, Y, counts, picked, 0.1, 2.0, 0.5, 0.0, np.inf, None, "sum")
    b = alg23_step(w, th, X, Y, counts, picked, 0.1, 2.0, 0.5, 0.0, np.inf, None, "mean")
    np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12)


def test_gradients_ignore_padding_and_match_a_per_user_loop():
    w, th, X, Y = _data(2, m=4)
    counts = np.array([4, 1, 3, 2, 4, 1])
    for variant in ("sum", "mean"):
        g = user_gradients(w, th, X, Y, counts, variant)
        for i, c in enumerate(counts):
            x, y = X[i, :c], Y[i, :c]
            ref = x.T @ (x @ (w + th[i]) - y)
            np.testing.assert_allclose(g[i], ref / (c if variant == "mean" else 1), rtol=1e-12)


def test_alpha_zero_unsampled_users_and_sensitivity():
    w, th, X, Y = _data(3)
    X = X * 50  # large gradients: every user is clipped
    n, m = X.shape[:2]
    counts = np.full(n, m)
    picked = np.array([0, 1, 0, 1, 1, 0], bool)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    w0, th0 = alg23_step(w, th, X, Y, counts, picked, 0.1, 0.0, 0.5, 3.0, 1.0, rng, "mean")
    assert np.array_equal(w0, w) and rng.bit_generator.state == state  # alpha = 0: w fixed, no noise drawn
    assert np.array_equal(th0[~picked], th[~picked]) and not np.array_equal(th0[picked], th[picked])
    # sensitivity: removing one sampled user moves the noiseless w step by at most alpha eta C / (q N)
    eta, alpha, q, C = 0.1, 2.0, 0.5, 1.0
    full = alg23_step(w, th, X, Y, counts, picked, eta, alpha, q, 0.0, C, None, "mean")[0]
    for i in np.flatnonzero(picked):
        less = picked.copy()
        less[i] = False
        moved = np.linalg.norm(full - alg23_step(w, th, X, Y, counts, less, eta, alpha, q, 0.0, C, None, "mean")[0])
        assert moved <= alpha * eta * C / (q * n) * (1 + 1e-12)
        assert moved >= 0.99 * alpha * eta * C / (q * n)  # clipped exactly to C


def test_bernoulli_sampling_rate():
    b = sample_users(100_000, 0.03, np.random.default_rng(0))
    assert abs(b.mean() - 0.03) < 4 * np.sqrt(0.03 * 0.97 / 100_000)
    with pytest.raises(ValueError):
        sample_users(10, 0.0, np.random.default_rng(0))
