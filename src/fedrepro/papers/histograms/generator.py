"""The stylised generative model of Sec. 2.1: a mixture of K Dirichlets Dir(alpha P_k).

c_u ~ Categorical(w); Q_u ~ Dir(alpha P_{c_u}); x_u ~ Multinomial(Q_u, m) (train tokens, Q^_u = x_u / m), plus
optional test and validation token counts from the same Q_u. Centers (docs/notes/histograms.md §6, a default, not from
the paper):
P_k = normalise(Zipf(s) base * exp(gamma g_k)), g_k ~ N(0, I_d): a shared heavy-tailed vocabulary whose clusters
differ by log-normal tilts (gamma sets the separation).

Users are drawn in blocks (float64 Dirichlet and multinomial draws; stored in the requested dtype) so the paper's
scale (10^5 users x 10^3 tokens) stays at a few hundred MB per matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 10_000


@dataclass(frozen=True)
class Mixture:
    centers: np.ndarray  # (K, d), rows on the simplex
    weights: np.ndarray  # (K,)
    alpha: float

    @property
    def K(self) -> int:
        return self.centers.shape[0]

    @property
    def d(self) -> int:
        return self.centers.shape[1]


@dataclass(frozen=True)
class Users:
    clusters: np.ndarray  # (n,) true c_u
    Q: np.ndarray  # (n, d) true histograms
    train: np.ndarray  # (n, d) train token counts (int32)
    test: np.ndarray | None  # (n, d) test token counts, or None


def make_centers(d: int, K: int, zipf: float, gamma: float, rng: np.random.Generator) -> np.ndarray:
    base = 1.0 / np.arange(1, d + 1) ** zipf
    P = base[None, :] * np.exp(gamma * rng.standard_normal((K, d)))
    return P / P.sum(axis=1, keepdims=True)


def make_mixture(
    d: int, K: int, alpha: float, zipf: float, gamma: float, rng: np.random.Generator, weights: np.ndarray | None = None
) -> Mixture:
    w = np.full(K, 1.0 / K) if weights is None else np.asarray(weights, dtype=float) / np.sum(weights)
    return Mixture(make_centers(d, K, zipf, gamma, rng), w, float(alpha))


def dirichlet_rows(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One Dirichlet draw per row of the parameter matrix a (n, d), via normalised gammas."""
    g = rng.standard_gamma(a)
    s = g.sum(axis=1, keepdims=True)
    return g / np.where(s > 0, s, 1.0)


def multinomial_rows(m: int, Q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One Multinomial(m, Q_u) count vector per row (int32)."""
    return rng.multinomial(m, Q / Q.sum(axis=1, keepdims=True)).astype(np.int32)


def sample_users(mix: Mixture, n: int, m: int, m_test: int, rng: np.random.Generator, dtype=np.float32) -> Users:
    c = rng.choice(mix.K, size=n, p=mix.weights)
    Q = np.empty((n, mix.d), dtype=dtype)
    train = np.empty((n, mix.d), dtype=np.int32)
    test = np.empty((n, mix.d), dtype=np.int32) if m_test > 0 else None
    for lo in range(0, n, BLOCK):
        q = dirichlet_rows(mix.alpha * mix.centers[c[lo : lo + BLOCK]], rng)
        Q[lo : lo + BLOCK] = q
        train[lo : lo + BLOCK] = multinomial_rows(m, q, rng)
        if test is not None:
            test[lo : lo + BLOCK] = multinomial_rows(m_test, q, rng)
    return Users(c, Q, train, test)
