"""The histogram algorithms (Setlur et al.): FedAvg, Alg. 1, Alg. 2, Alg. 3, DimRed, IFCA, against independent
references (direct loops, exact means, finite differences) and the notes' exact properties (§8 C1, C2, C7, C10)."""

import numpy as np
import pytest
from scipy.special import rel_entr

from fedrepro.papers.histograms import dimred as dr
from fedrepro.papers.histograms.fedavg import fedavg, private_fedavg
from fedrepro.papers.histograms.generator import make_mixture, sample_users
from fedrepro.papers.histograms.ifca import ifca, softmax
from fedrepro.papers.histograms.kl import assign, kl_rows, kl_to_centers, smooth
from fedrepro.papers.histograms.kmeanspp_init import kl_init, sampling_probabilities
from fedrepro.papers.histograms.lloyd import lloyd, mean_recenter
from fedrepro.papers.histograms.pipeline import misclustering
from fedrepro.papers.histograms.private_centering import private_centering


def _data(n=600, d=30, K=4, m=60, gamma=1.5, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    mix = make_mixture(d, K, 50.0, 1.0, gamma, rng)
    u = sample_users(mix, n, m, 0, rng, dtype=dtype)
    return mix, u, (u.train / m).astype(dtype), rng


def test_kl_to_centers_and_assignment_match_a_direct_loop():
    _, _, S, rng = _data(n=50)
    P = rng.dirichlet(np.ones(S.shape[1]), size=5)
    ref = np.array([[rel_entr(s, p).sum() for p in P] for s in S])
    np.testing.assert_allclose(kl_to_centers(S, P, 0.0), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(assign(S, P, 0.0), ref.argmin(axis=1))
    np.testing.assert_allclose(kl_rows(S, P[np.zeros(len(S), int)]), ref[:, 0], rtol=1e-10, atol=1e-12)
    assert np.isinf(kl_rows(np.array([[0.5, 0.5]]), np.array([[1.0, 0.0]])))[0]


def test_fedavg_is_the_mean_and_the_kl_minimiser():
    """Lemma 2.1 / C1: the mean minimises sum_u KL(Q^_u || Q); any simplex perturbation increases it."""
    _, _, S, rng = _data(n=200)
    q = fedavg(S)
    np.testing.assert_array_equal(q, S.mean(axis=0))
    obj = lambda c: kl_to_centers(S, c[None, :], 0.0).sum()  # noqa: E731
    for _ in range(5):
        v = rng.standard_normal(S.shape[1])
        v -= v.mean()
        for t in (1e-4, -1e-4):
            assert obj(q + t * v / np.abs(v).max() * q.min()) > obj(q)


def test_private_centering_without_noise_or_clipping_is_the_exact_mean():
    """Acceptance / C7: noise and clipping off -> the cluster means (and uniform for an empty cluster)."""
    _, u, S, rng = _data(n=400)
    K = 6
    labels = rng.integers(0, K - 1, size=len(S))  # cluster K-1 stays empty
    P = private_centering(S, labels, K, 0.5, 1e-6, None, 1e-9, 0.0, rng, noise=False)
    for k in range(K - 1):
        np.testing.assert_allclose(P[k], S[labels == k].mean(axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(P[K - 1], np.full(S.shape[1], 1 / S.shape[1]), rtol=1e-12)
    np.testing.assert_allclose(P, mean_recenter(S, labels, K), rtol=1e-12, atol=1e-15)
    # the same with a clipping threshold that never binds, and with b1 far from the mean (s large): b1 cancels
    np.testing.assert_allclose(
        private_centering(S, labels, K, 0.5, 1e-6, 1e6, 1e-9, 0.0, rng, noise=False)[: K - 1],
        P[: K - 1],
        rtol=1e-12,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        private_centering(S, labels, K, 0.5, 1e-6, None, 0.2, 0.0, rng, noise=False)[: K - 1],
        P[: K - 1],
        rtol=1e-10,
        atol=1e-13,
    )


def test_private_centering_clipping_binds_and_noise_is_on_the_sum():
    _, _, S, rng = _data(n=400)
    labels = np.zeros(len(S), dtype=int)
    mean = S.mean(axis=0)
    # a binding clip pulls the estimate from the mean towards b1 (here b1 = s everywhere, far above the mean)
    clipped = private_centering(S, labels, 1, 0.5, 1e-6, 1e-3, 0.5, 0.0, rng, noise=False)[0]
    assert np.abs(clipped - mean).max() > 1e-3
    with pytest.raises(ValueError, match="clipping threshold"):
        private_centering(S, labels, 1, 0.5, 1e-6, None, 1e-3, 0.0, rng)
    # noise sigma = sqrt(2 ln(1.25/delta))/eps is added to the SUM: with 10^5 users it is small on the mean
    # (a clip that never binds: the estimate's error is then the noise alone)
    big = np.tile(S, (250, 1))
    n, d = big.shape
    c = 2 * np.sqrt(d) * np.abs((S - mean) / np.sqrt(mean)).max()
    est = private_fedavg(big, 0.5, 1e-6, c, 1e-4, 1e-12, np.random.default_rng(1))
    sigma = np.sqrt(2 * np.log(1.25 / 1e-6)) / 0.5
    scale = sigma / n + np.sqrt(mean) * c * sigma / n  # b1's noise (cancelled to first order) + b2's noise
    assert np.all(np.abs(est - mean) < 5 * scale + 1e-3 * mean)
    assert np.abs(est - mean).max() > 0.05 * scale.min()  # and the noise is there
    assert est.sum() == pytest.approx(1.0)


def test_lloyd_objective_never_increases_and_ends_at_a_fixed_point():
    """Acceptance / C2, from poor (random-row) initializations on overlapping clusters."""
    for seed in range(4):
        _, u, S, rng = _data(n=500, gamma=0.4, seed=seed)
        P0 = S[rng.choice(len(S), 6, replace=False)]
        res = lloyd(S, P0, 100, 1e-12)
        obj = np.array(res.objective)
        assert np.all(np.diff(obj) <= 1e-12 * obj[0]), np.diff(obj).max()
        assert res.changed[-1] == 0 and res.iterations < 100
        np.testing.assert_allclose(res.centers, mean_recenter(S, res.labels, 6), rtol=1e-12)
        # the objective is the mean KL to the assigned center (direct loop)
        direct = np.mean([rel_entr(s, res.centers[k]).sum() for s, k in zip(S, res.labels)])
        assert obj[-1] == pytest.approx(direct, rel=1e-9)


def test_lloyd_objective_is_float64_exact_on_float32_histograms():
    """The assignment may run in float32; the objective may not: a float32 product rounds at ~1e-7 of a term, above
    the objective's changes near convergence (histograms.x_synthetic seed 1 once rose by 9e-9 of 7 in float32)."""
    _, _, S, rng = _data(n=3000, d=400, m=500, gamma=0.4, seed=5, dtype=np.float32)
    res = lloyd(S, S[rng.choice(len(S), 6, replace=False)], 3, 1e-12, stop_when_stable=False)
    P = res.centers
    direct = np.mean([rel_entr(s, P[k]).sum() for s, k in zip(S.astype(np.float64), res.labels)])
    assert res.objective[-1] == pytest.approx(direct, rel=1e-13, abs=0)


def test_lloyd_with_private_centering_noise_off_reproduces_lloyd():
    _, _, S, rng = _data(n=300)
    P0 = kl_init(S, 4, 0.5, 1e-12, rng)
    a = lloyd(S, P0, 10, 1e-12, stop_when_stable=False)
    b = lloyd(
        S,
        P0,
        10,
        1e-12,
        stop_when_stable=False,
        recenter=lambda S_, lab, K: private_centering(S_, lab, K, 0.1, 1e-6, None, 1e-12, 0.0, rng, noise=False),
    )
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_allclose(a.centers, b.centers, rtol=1e-10, atol=1e-14)


def test_alg1_plus_alg2_recover_well_separated_clusters():
    _, u, S, rng = _data(n=1000, gamma=2.0, m=200, seed=3)
    P0 = kl_init(S, 4, 0.5, 1e-12, rng)
    res = lloyd(S, P0, 50, 1e-12)
    assert misclustering(u.clusters, res.labels, 4) <= 0.25  # Alg. 1 can merge two clusters at tau = 0.5
    best = min(
        misclustering(u.clusters, lloyd(S, kl_init(S, 4, 50.0, 1e-12, rng), 50, 1e-12).labels, 4) for _ in range(3)
    )
    assert best == 0.0


def test_alg1_temperature_limits():
    """C10: tau = 0 samples uniformly; a large tau picks the user farthest (in KL) from the chosen centers."""
    np.testing.assert_allclose(sampling_probabilities(np.array([0.0, 5.0, 100.0]), 0.0), 1 / 3)
    d = 10
    S = np.tile(np.full(d, 1 / d), (50, 1))
    S[17] = np.r_[0.91, np.full(d - 1, 0.01)]
    for seed in range(5):
        _, idx = kl_init(S, 2, 1e4, 1e-12, np.random.default_rng(seed), return_index=True)
        assert idx[1] == 17 or idx[0] == 17
    p = sampling_probabilities(np.array([1.0, 2.0, 3.0]), 0.5)
    np.testing.assert_allclose(p, np.exp([0.5, 1.0, 1.5]) / np.exp([0.5, 1.0, 1.5]).sum())


def test_dimred_keeps_the_tokens_that_separate_clusters():
    rng = np.random.default_rng(4)
    d, K, n, m = 40, 3, 3000, 200
    base = np.full(d, 1 / d)
    P = np.tile(base, (K, 1))
    P[:, :6] *= np.exp(1.5 * rng.standard_normal((K, 6)))  # clusters differ only on tokens 0..5
    P /= P.sum(axis=1, keepdims=True)
    from fedrepro.papers.histograms.generator import Mixture

    u = sample_users(Mixture(P, np.full(K, 1 / K), 100.0), n, m, 0, rng, dtype=np.float64)
    S = u.train / m
    q, M = dr.second_moment(S)
    V = (S - S.mean(0)) / np.sqrt(S.mean(0))
    np.testing.assert_allclose(M, V.T @ V / n, rtol=1e-10, atol=1e-13)
    keep = dr.select_tokens(dr.token_scores(S, K - 1), keep_tokens=6)
    assert len(set(keep) & set(range(6))) >= 5
    with pytest.raises(ValueError):
        dr.select_tokens(np.ones(3), threshold=2.0)


def test_ifca_step_is_a_gradient_step_on_the_mean_kl():
    """One IFCA round with one cluster: theta <- theta - lr * grad mean_u KL(Q^_u || softmax theta) (finite diffs)."""
    _, _, S, rng = _data(n=100, d=8)
    P0 = rng.dirichlet(np.ones(8))[None, :]
    lr = 0.7
    res = ifca(S, P0, 1, lr, 1e-12)
    theta = np.log(P0[0])
    f = lambda th: np.mean([rel_entr(s, softmax(th[None, :])[0]).sum() for s in S])  # noqa: E731
    h = 1e-6
    grad = np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(8)])
    np.testing.assert_allclose(res.centers[0], softmax((theta - lr * grad)[None, :])[0], rtol=1e-6)
    # many rounds converge to the mean (the exact minimiser Alg. 2 jumps to in one step)
    far = ifca(S, P0, 400, 2.0, 1e-12)
    np.testing.assert_allclose(far.centers[0], S.mean(axis=0), atol=1e-6)


def test_private_ifca_and_smoothing_run_and_stay_on_the_simplex():
    _, _, S, rng = _data(n=300)
    P0 = kl_init(S, 3, 0.5, 1e-12, rng)
    res = ifca(S, P0, 5, 1.0, 1e-12, init_mix=0.5, private=True, epsilon=0.5, delta=1e-6, clip=1.0, rng=rng)
    np.testing.assert_allclose(res.centers.sum(axis=1), 1.0)
    sm = smooth(np.array([[0.5, 0.5, 0.0]]), 1e-3)
    assert sm.min() > 0 and sm.sum() == pytest.approx(1.0)
