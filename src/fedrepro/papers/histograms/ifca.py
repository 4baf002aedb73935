"""IFCA (Ghosh et al. 2020) as the histograms paper's baseline. The paper's only description: "IFCA only takes a
gradient step towards the optimal cluster center, we optimize for the optimal cluster center completely by taking
the average". Everything else is unspecified (docs/notes/histograms.md G11); the default (docs/notes/histograms.md
§2.10): the same initialization and
assignment rule as Algorithm 2, centers parameterised by logits theta_k (P_k = softmax theta_k), one gradient step
per round on the cluster's mean loss,

    g_k = grad_theta mean_{u in C_k} KL(Q^_u || softmax theta_k) = P_k - mean_{u in C_k} Q^_u,
    theta_k <- theta_k - lr g_k                         (an empty cluster keeps its theta)

and T rounds. The initial logits are log((1 - init_mix) P0 + init_mix / d): a named smoothing, because Alg. 1's
centers are raw user rows with zeros, whose log-floor logits one small gradient step per round cannot lift (a step
size that moves the small coordinates fast overshoots the head tokens; lr is a named parameter).

Private IFCA (G7, G11; an assumption): each user sends its gradient P_{c_u} - Q^_u clipped to l2 norm ``clip`` (it
is at most sqrt(2)); the server adds N(0, (clip sigma)^2 I) to each cluster's sum and Lap(1/eps) to its count
(a = max(count + Lap, 1)): (2 eps, delta) per round at Alg. 3's per-step (eps, delta), no more than Alg. 3's
(3 eps, 2 delta).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrepro.papers.histograms.kl import CHUNK
from fedrepro.papers.histograms.lloyd import Assigner, LloydResult
from fedrepro.papers.histograms.privacy import gaussian_sigma
from fedrepro.papers.histograms.private_centering import cluster_sums, scatter_sum


def softmax(theta: np.ndarray) -> np.ndarray:
    z = theta - theta.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _clipped_gradient_sums(S: np.ndarray, P: np.ndarray, labels: np.ndarray, K: int, clip: float) -> np.ndarray:
    out = np.zeros(P.shape)
    for lo in range(0, S.shape[0], CHUNK):
        lab = labels[lo : lo + CHUNK]
        g = P[lab] - np.asarray(S[lo : lo + CHUNK], dtype=np.float64)
        norm = np.linalg.norm(g, axis=1, keepdims=True)
        g *= np.minimum(1.0, clip / np.maximum(norm, 1e-300))
        out += scatter_sum(g, lab, K)
    return out


def ifca(
    S: np.ndarray,
    P0: np.ndarray,
    T: int,
    lr: float,
    floor: float,
    *,
    init_mix: float = 0.0,
    private: bool = False,
    epsilon: float | None = None,
    delta: float | None = None,
    clip: float | None = None,
    rng: np.random.Generator | None = None,
    on_iteration: Callable[[int, np.ndarray, np.ndarray], object] | None = None,
) -> LloydResult:
    K = P0.shape[0]
    d = P0.shape[1]
    theta = np.log(np.maximum((1 - init_mix) * P0 + init_mix / d, floor))
    assigner = Assigner(S, floor)
    P = softmax(theta)
    labels, obj = assigner(P)
    res = LloydResult(P, labels, [obj], [S.shape[0]], 0)
    if on_iteration is not None:
        res.trace.append(on_iteration(0, P, labels))
    if private:
        sigma = gaussian_sigma(epsilon, delta)
    for t in range(1, T + 1):
        counts = np.bincount(labels, minlength=K).astype(np.float64)
        if private:
            a = np.maximum(counts + rng.laplace(scale=1.0 / epsilon, size=K), 1.0)
            gsum = _clipped_gradient_sums(S, P, labels, K, clip) + clip * sigma * rng.standard_normal(P.shape)
            theta = theta - lr * gsum / a[:, None]
        else:
            nz = counts > 0
            grad = np.zeros_like(P)
            grad[nz] = P[nz] - cluster_sums(S, labels, K)[nz] / counts[nz, None]
            theta = theta - lr * grad
        P = softmax(theta)
        new, obj = assigner(P)
        res.changed.append(int(np.count_nonzero(new != labels)))
        res.objective.append(obj)
        labels = new
        res.iterations = t
        if on_iteration is not None:
            res.trace.append(on_iteration(t, P, labels))
    res.centers, res.labels = P, labels
    return res
