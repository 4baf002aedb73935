"""FedAvg: one global histogram, Q_fa = argmin_Q sum_u KL(Q^_u || Q) = (1/n) sum_u Q^_u (Eq. 2, Lemma 2.1: the
Bregman centroid). Its private version is unspecified in the paper (G7); the default is one call of Algorithm 3
with K = 1 (every user in one cluster) at Alg. 3's per-step budget, i.e. the same mechanism a clustering iteration
uses per cluster (:func:`private_fedavg`)."""

from __future__ import annotations

import numpy as np

from fedrepro.papers.histograms.private_centering import private_centering


def fedavg(S: np.ndarray) -> np.ndarray:
    """(d,) the mean of the users' empirical histograms (float64 accumulation)."""
    return np.asarray(S, dtype=np.float64).mean(axis=0) if S.dtype != np.float64 else S.mean(axis=0)


def private_fedavg(
    S: np.ndarray,
    epsilon: float,
    delta: float,
    clip: float | None,
    s: float,
    floor: float,
    rng: np.random.Generator,
    noise: bool = True,
) -> np.ndarray:
    """(d,) Algorithm 3 with a single cluster holding every user."""
    return private_centering(
        S, np.zeros(S.shape[0], dtype=np.int64), 1, epsilon, delta, clip, s, floor, rng, noise=noise
    )[0]
