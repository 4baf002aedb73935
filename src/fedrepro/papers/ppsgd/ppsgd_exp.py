"""PPSGD as the paper's experiments run it ("PPSGD-exp", docs/notes/ppsgd.md §2.4, [code] ``training_priv``).

Linear additive model, squared loss: user i predicts ``x^T (w + theta_i)`` in R^K. One round on the L sampled
users S (each with a minibatch X_i in R^{m x d}, Y_i in R^{m x K}):

    g_i     = (1/m) X_i^T (X_i (w + theta_i) - Y_i)           gradient of (1/m) sum 1/2 ||pred - y||^2,
                                                                 at the pre-update (w, theta_i)
    theta_i <- theta_i - eta_theta g_i                          unclipped, only i in S
    g~_i    = g_i / max(1, ||g_i||_F / C)                       per-user clipping of the AVERAGE gradient
    w       <- w - eta_w ((1/L) sum_{i in S} g~_i + (sigma C / L) xi),   xi ~ N(0, I_{d x K})

(eta_w, eta_theta) come from (step, alpha_c) by :func:`fedrepro.papers.ppsgd.stepsizes.step_sizes`. With eta_w = 0
(alpha_c = 0) w is never touched (and the caller spends no privacy); with eta_theta = 0 (alpha_c = inf) theta is
never touched.

Vectorization: every array carries a trailing axis of G configurations (different (eta_w, eta_theta) pairs, each
with its own independent DP noise), and a round processes all its users in batched matrix products (no Python
loop per user or per configuration). Shapes: ``w`` (d, K, G), ``theta`` (N, d, K, G), ``X`` (L, m, d),
``Y`` (L, m, K).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrepro.papers.ppsgd.stepsizes import clip_factors


@dataclass
class State:
    """Global model w (d, K, G) and the users' local models theta (N, d, K, G); both start at 0 (Alg. 1-3)."""

    w: np.ndarray
    theta: np.ndarray

    @classmethod
    def zeros(cls, n_users: int, d: int, k: int, g: int, dtype=np.float64) -> State:
        return cls(np.zeros((d, k, g), dtype=dtype), np.zeros((n_users, d, k, g), dtype=dtype))


def user_gradients(w: np.ndarray, theta_s: np.ndarray, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """(L, d, K, G) average squared-loss gradients g_i = (1/m) X_i^T (X_i (w + theta_i) - Y_i) of the L users whose
    local models are ``theta_s`` (L, d, K, G): two batched matrix products over the users, every configuration at
    once (X @ (w + theta_i) is computed as X @ theta_i + X @ w to avoid materializing w + theta)."""
    L, m, d = X.shape
    _, _, k, g = theta_s.shape
    X = X.astype(theta_s.dtype, copy=False)
    R = X @ theta_s.reshape(L, d, k * g)
    R += X @ w.reshape(d, k * g)
    R = R.reshape(L, m, k, g)
    R -= Y.astype(theta_s.dtype, copy=False)[..., None]
    Xt = np.ascontiguousarray(np.swapaxes(X, 1, 2))
    out = (Xt @ R.reshape(L, m, k * g)).reshape(L, d, k, g)
    out /= m
    return out


def clipped_sum(grads: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """(sum over users of clip_C(g_i), the users' Frobenius norms (L, G)) for grads (L, d, K, G): the pre-noise
    sum whose L2 sensitivity to adding/removing one user is at most C."""
    norms = np.sqrt(np.einsum("ldkg,ldkg->lg", grads, grads))
    factors = clip_factors(norms, clip).astype(grads.dtype, copy=False)
    return np.einsum("ldkg,lg->dkg", grads, factors), norms


def round_step(
    state: State,
    users: np.ndarray,
    X: np.ndarray,
    Y: np.ndarray,
    eta_w: np.ndarray,
    eta_theta: np.ndarray,
    sigma: float,
    clip: float,
    rng: np.random.Generator,
) -> dict:
    """One PPSGD-exp round on ``users`` (indices into theta, distinct), in place. Returns diagnostics: the users'
    gradient norms (L, G) and the fraction clipped.

    The noise is drawn only when some configuration has eta_w > 0, so a run of only alpha_c = 0 configurations
    draws no noise at all (and spends no privacy)."""
    users = np.asarray(users, dtype=np.int64)
    if users.ndim != 1 or len(np.unique(users)) != len(users):
        raise ValueError("users must be a 1-d array of distinct user indices (sampling without replacement)")
    L = len(users)
    eta_w = np.asarray(eta_w, dtype=float)
    eta_theta = np.asarray(eta_theta, dtype=float)
    everyone = L == state.theta.shape[0] and np.array_equal(users, np.arange(L))
    theta_s = state.theta if everyone else state.theta[users]  # all users: a view, updated in place
    g = user_gradients(state.w, theta_s, X, Y)
    total, norms = clipped_sum(g, clip)  # before theta moves: both steps use the pre-update (w, theta_i)
    if np.any(eta_theta != 0):
        g *= eta_theta.astype(g.dtype)  # g is not needed any more: scale it in place into the theta step
        if everyone:
            state.theta -= g
        else:
            state.theta[users] = theta_s - g
    if np.any(eta_w != 0):
        noisy = total
        if sigma > 0:
            noisy = total + (sigma * clip) * rng.standard_normal(total.shape)
        state.w -= (eta_w * (noisy / L)).astype(state.w.dtype)
    return {"norms": norms, "clipped_fraction": float(np.mean(norms > clip))}
