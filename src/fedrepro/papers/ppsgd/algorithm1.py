"""Algorithm 1 of the paper (PPSGD, full participation, one sample per user per round; docs/notes/ppsgd.md §2.1).

    theta_i <- theta_i - (eta / N) grad_theta f_i(w, theta_i, xi_i)                    local, unclipped
    w       <- w - alpha eta ((1/N) sum_i clip_C(grad_w f_i(w, theta_i, xi_i)) + zeta),  zeta ~ N(0, sigma_zeta^2 I)

for the additive squared loss f_i = 1/2 ||y - (w + theta_i)^T x||^2 (both gradients equal x (pred - y)^T), all N
users at once. Equivalent to preconditioned SGD z <- z - eta H^{-1} g with H = diag(I / alpha, I) (eqs. 17-19).
alpha = 0 is local learning (w fixed, no noise drawn); alpha = inf is not a value of Algorithm 1 (use PPSGD-exp).
"""

from __future__ import annotations

import numpy as np

from fedrepro.papers.ppsgd.stepsizes import clip_factors


def alg1_step(
    w: np.ndarray,
    theta: np.ndarray,
    X: np.ndarray,
    Y: np.ndarray,
    eta: float,
    alpha: float,
    sigma_zeta: float,
    clip: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """One round: w (d, K), theta (N, d, K), X (N, d) one sample per user, Y (N, K). Returns new (w, theta)."""
    N = X.shape[0]
    resid = np.einsum("nd,ndk->nk", X, theta + w[None]) - Y
    g = X[:, :, None] * resid[:, None, :]  # (N, d, K): grad_w f_i = grad_theta f_i
    theta = theta - (eta / N) * g
    if alpha == 0:
        return w, theta
    norms = np.sqrt((g**2).sum(axis=(1, 2)))
    mean_clipped = np.einsum("ndk,n->dk", g, clip_factors(norms, clip)) / N
    zeta = sigma_zeta * rng.standard_normal(w.shape) if sigma_zeta > 0 else 0.0
    return w - alpha * eta * (mean_clipped + zeta), theta
