"""Algorithm 1 (fedrepro.papers.ppsgd.algorithm1): the preconditioned-SGD form (eqs. 17-19) and the alpha = 0 limit."""

import numpy as np

from fedrepro.papers.ppsgd.algorithm1 import alg1_step


def _data(seed=0, n=5, d=4, k=2):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((d, k)),
        rng.standard_normal((n, d, k)),
        rng.standard_normal((n, d)),
        rng.standard_normal((n, k)),
    )


def test_no_clip_no_noise_is_preconditioned_gradient_step():
    w, th, X, Y = _data()
    eta, alpha = 0.3, 2.5

    def f(w, th):
        return 0.5 * np.mean(((np.einsum("nd,ndk->nk", X, th + w[None]) - Y) ** 2).sum(axis=1))

    # numerical gradient of the objective f = (1/N) sum_i f_i
    h = 1e-6
    gw = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[idx] = h
        gw[idx] = (f(w + e, th) - f(w - e, th)) / (2 * h)
    gth = np.zeros_like(th)
    for idx in np.ndindex(th.shape):
        e = np.zeros_like(th)
        e[idx] = h
        gth[idx] = (f(w, th + e) - f(w, th - e)) / (2 * h)
    w1, th1 = alg1_step(w, th, X, Y, eta, alpha, 0.0, 1e12, np.random.default_rng(0))
    np.testing.assert_allclose(w1, w - alpha * eta * gw, rtol=1e-6, atol=1e-8)  # H^{-1} = alpha on w
    np.testing.assert_allclose(th1, th - eta * gth, rtol=1e-6, atol=1e-8)  # grad_theta_i f = g_i / N


def test_alpha_zero_keeps_w_and_draws_nothing():
    w, th, X, Y = _data(1)
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    w1, th1 = alg1_step(w, th, X, Y, 0.3, 0.0, 10.0, 1.0, rng)
    assert np.array_equal(w1, w) and not np.array_equal(th1, th)
    assert rng.bit_generator.state == before


def test_clipped_w_step_is_bounded():
    w, th, X, Y = _data(2)
    X = X * 100
    w1, _ = alg1_step(w, th, X, Y, 0.1, 1.0, 0.0, 0.5, np.random.default_rng(0))
    assert np.linalg.norm(w1 - w) <= 0.1 * 0.5 * (1 + 1e-12)
