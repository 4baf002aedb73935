"""Exact expectations under the mixture-of-Dirichlets model (docs/notes/histograms.md §8; derived there, checked by
Monte Carlo in
tests/papers/histograms/test_closed_forms.py).

C5. For Q ~ Dir(alpha P), x ~ Mult(Q, m) and a fine-tuned estimator R^ = lam R + (1 - lam) x/m with R fixed:

    E KL(Q || R^) = sum_i P_i (psi(alpha P_i + 1) - psi(alpha + 1))
                    - sum_i sum_{x=0}^m BB(x; m, alpha P_i, alpha (1 - P_i)) (alpha P_i + x)/(alpha + m)
                                                                              log(lam R_i + (1 - lam) x/m)

(E[Q_i log Q_i] = P_i (psi(alpha P_i + 1) - psi(alpha + 1)); E[Q_i | x_i] = (alpha P_i + x_i)/(alpha + m); x_i is
Beta-Binomial.) Special cases: the Bayes risk (R = P, lam = alpha/(alpha + m), Lemma 2.2) and the cluster model
alone (lam = 1): sum_i P_i (psi(alpha P_i + 1) - psi(alpha + 1) - log R_i).

C4. The second moment App. C uses (corrected, docs/notes/histograms.md G17): with Qbar = sum_k w_k P_k, D = Diag(Qbar),
B = sum_k w_k (P_k - Qbar)(P_k - Qbar)^T and s = sqrt(Qbar),

    E[V V^T] = (1 - 1/m) alpha/(alpha + 1) D^{-1/2} B D^{-1/2} + (m + alpha)/(m (alpha + 1)) (I - s s^T),
    V = D^{-1/2}(Q^ - Qbar).
"""

from __future__ import annotations

import numpy as np
from scipy.special import digamma
from scipy.stats import betabinom


def expected_neg_entropy(P: np.ndarray, alpha: float) -> float:
    """E sum_i Q_i log Q_i for Q ~ Dir(alpha P)."""
    P = np.asarray(P, dtype=np.float64)
    return float(np.sum(P * (digamma(alpha * P + 1) - digamma(alpha + 1))))


def expected_kl_finetuned(P: np.ndarray, alpha: float, m: int, R: np.ndarray, lam: float) -> float:
    """E KL(Q || lam R + (1 - lam) x/m), Q ~ Dir(alpha P), x ~ Mult(Q, m) (inf if some term is log 0)."""
    P = np.asarray(P, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    if lam == 1.0:
        return cluster_model_risk(P, alpha, R)
    x = np.arange(m + 1)
    pmf = betabinom.pmf(x[None, :], m, alpha * P[:, None], alpha * (1 - P[:, None]))  # (d, m + 1)
    post = (alpha * P[:, None] + x[None, :]) / (alpha + m)
    with np.errstate(divide="ignore"):
        logest = np.log(lam * R[:, None] + (1 - lam) * x[None, :] / m)
    cross = np.where(pmf * post > 0, pmf * post * logest, 0.0).sum()
    return expected_neg_entropy(P, alpha) - float(cross)


def cluster_model_risk(P: np.ndarray, alpha: float, R: np.ndarray) -> float:
    """E KL(Q || R) for Q ~ Dir(alpha P) and a fixed R (no fine-tuning, lam = 1)."""
    P = np.asarray(P, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return expected_neg_entropy(P, alpha) - float(np.sum(np.where(P > 0, P * np.log(R), 0.0)))


def bayes_risk(P: np.ndarray, alpha: float, m: int) -> float:
    """The Bayes risk of Lemma 2.2: the oracle center fine-tuned with lam* = alpha/(alpha + m)."""
    return expected_kl_finetuned(P, alpha, m, P, alpha / (alpha + m))


def mixture_risk(
    centers: np.ndarray, weights: np.ndarray, alpha: float, m: int, R: np.ndarray | None, lam: float
) -> float:
    """Mixture average of :func:`expected_kl_finetuned` with each cluster's own fixed center R[k] (R None: the
    true centers), i.e. the n -> infinity risk of a pipeline that recovers the clusters exactly."""
    R = centers if R is None else np.broadcast_to(R, centers.shape)
    return float(sum(w * expected_kl_finetuned(P, alpha, m, r, lam) for P, w, r in zip(centers, weights, R)))


def second_moment(centers: np.ndarray, weights: np.ndarray, alpha: float, m: int) -> np.ndarray:
    """(d, d) E[V V^T], V = Diag(Qbar)^{-1/2} (Q^ - Qbar), under the mixture (C4)."""
    P = np.asarray(centers, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    qbar = w @ P
    s = np.sqrt(qbar)
    Z = (P - qbar) / s
    signal = (Z * w[:, None]).T @ Z
    d = P.shape[1]
    return (1 - 1 / m) * alpha / (alpha + 1) * signal + (m + alpha) / (m * (alpha + 1)) * (np.eye(d) - np.outer(s, s))
