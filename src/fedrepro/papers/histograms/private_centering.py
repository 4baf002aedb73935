"""Algorithm 3: Private Centering (replaces step 5 of Algorithm 2 in the private version).

Implementation reading (docs/notes/histograms.md §2.7, G4, G5; add/remove neighbours, G8), per cluster k with n_k
members:

    sigma = sqrt(2 ln(1.25/delta)) / eps                                 (Alg. 3 line 1; fedrepro.privacy)
    a_k   = max(n_k + Lap(1/eps), 1)                                     count, sensitivity 1
    b1_k  = max((sum_{u in k} Q^_u + N(0, sigma^2 I)) / a_k, s)          noise on the SUM (G4a), l2 sensitivity 1
    r_u   = clip((Q^_u - b1_k) / sqrt(b1_k), -c/sqrt(d), c/sqrt(d))      elementwise, so ||r_u||_2 <= c
    b2_k  = sum_{u in k} r_u + N(0, c^2 sigma^2 I)                        l2 sensitivity c
    P_k   = b1_k + sqrt(b1_k) * b2_k / a_k
    P_k   = renormalise(max(P_k, floor))                                 post-processing, not in the paper (G4c)

Theorem 3.1: (3 eps, 2 delta)-DP per call. With ``noise=False`` the Laplace and Gaussian draws are skipped (a_k =
max(n_k, 1)) and with ``clip=None`` nothing is clipped; then P_k = b1 + (mu_k - b1) = mu_k, the exact cluster mean
(docs/notes/histograms.md C7), and an empty cluster gets the uniform histogram (b1 = s everywhere), as Algorithm 2's
step 5.
"""

from __future__ import annotations

import math

import numpy as np

from fedrepro.papers.histograms.kl import CHUNK
from fedrepro.papers.histograms.privacy import gaussian_sigma


def scatter_sum(rows: np.ndarray, labels: np.ndarray, K: int) -> np.ndarray:
    """(K, d) sum of ``rows`` (n, d) per label, as one one-hot product."""
    onehot = np.zeros((len(labels), K))
    onehot[np.arange(len(labels)), labels] = 1.0
    return onehot.T @ rows


def cluster_sums(S: np.ndarray, labels: np.ndarray, K: int) -> np.ndarray:
    """(K, d) sum of the rows of S in each cluster (float64), as one-hot products over user blocks."""
    out = np.zeros((K, S.shape[1]))
    for lo in range(0, S.shape[0], CHUNK):
        out += scatter_sum(np.asarray(S[lo : lo + CHUNK], dtype=np.float64), labels[lo : lo + CHUNK], K)
    return out


def private_centering(
    S: np.ndarray,
    labels: np.ndarray,
    K: int,
    epsilon: float,
    delta: float,
    clip: float | None,
    s: float,
    floor: float,
    rng: np.random.Generator,
    *,
    noise: bool = True,
) -> np.ndarray:
    """(K, d) new centers from the users' histograms S (n, d) and their current clusters ``labels`` (n,)."""
    n, d = S.shape
    counts = np.bincount(labels, minlength=K).astype(np.float64)
    sums = cluster_sums(S, labels, K)
    if noise:
        if clip is None:
            raise ValueError("private centering with noise needs a clipping threshold c (the b2 sensitivity)")
        sigma = gaussian_sigma(epsilon, delta)
        a = np.maximum(counts + rng.laplace(scale=1.0 / epsilon, size=K), 1.0)
        sums = sums + sigma * rng.standard_normal((K, d))
    else:
        sigma = 0.0
        a = np.maximum(counts, 1.0)
    b1 = np.maximum(sums / a[:, None], s)
    root = np.sqrt(b1)
    bound = None if clip is None else clip / math.sqrt(d)
    b2 = np.zeros((K, d))
    for lo in range(0, n, CHUNK):
        lab = labels[lo : lo + CHUNK]
        r = (np.asarray(S[lo : lo + CHUNK], dtype=np.float64) - b1[lab]) / root[lab]
        if bound is not None:
            np.clip(r, -bound, bound, out=r)
        b2 += scatter_sum(r, lab, K)
    if noise:
        b2 += clip * sigma * rng.standard_normal((K, d))
    P = b1 + root * b2 / a[:, None]
    P = np.maximum(P, floor)
    return P / P.sum(axis=1, keepdims=True)
