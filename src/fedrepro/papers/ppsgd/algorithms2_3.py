"""Algorithms 2 and 3 of the paper: PPSGD with client sampling (docs/notes/ppsgd.md §2.2-2.3).

Every user is sampled independently with probability q (b_i ~ Bernoulli(q)); a sampled user i draws a minibatch of
m_i samples and forms the gradients of the additive squared loss f_i = 1/2 ||y - (w + theta_i)^T x||^2 at the
pre-update (w, theta_i) (both gradients equal sum_k x_k (pred_k - y_k)^T):

  Algorithm 2 ("sum", optimizes f^m = sum_i (m_i / M) f_i, M = sum_i m_i):
      g_i     = sum over the m_i samples
      theta_i <- theta_i - eta / (q M) g_i
      w       <- w - alpha eta ((1 / (q M)) sum_{i sampled} clip_C(g_i) + zeta)
  Algorithm 3 ("mean", optimizes the average user risk f):
      g_i     = (1 / m_i) sum over the m_i samples
      theta_i <- theta_i - eta / (q N) g_i
      w       <- w - alpha eta ((1 / (q N)) sum_{i sampled} clip_C(g_i) + zeta)

with zeta ~ N(0, sigma_zeta^2 I). Unsampled users keep theta_i. alpha = 0 is local learning (w never moves and no
noise is drawn). All users at once: minibatches are padded to m_max and masked (no loop over users). With q = 1 and
m_i = 1 both reduce to Algorithm 1 (tested).
"""

from __future__ import annotations

import numpy as np

from fedrepro.papers.ppsgd.stepsizes import clip_factors

VARIANTS = ("sum", "mean")  # Algorithm 2, Algorithm 3


def sample_users(n_users: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """b_i ~ Bernoulli(q), independently per user (Poisson sampling, as the privacy analysis assumes)."""
    if not 0 < q <= 1:
        raise ValueError(f"sampling probability q must be in (0, 1], got {q!r}")
    return rng.random(n_users) < q


def user_gradients(
    w: np.ndarray, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, counts: np.ndarray, variant: str
) -> np.ndarray:
    """(N, d, K) per-user gradients: sums (Alg. 2) or means (Alg. 3) over each user's first counts[i] rows of the
    padded minibatches X (N, m_max, d), Y (N, m_max, K)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    counts = np.asarray(counts)
    valid = (np.arange(X.shape[1])[None, :] < counts[:, None]).astype(X.dtype)  # (N, m_max)
    resid = (np.einsum("nmd,ndk->nmk", X, theta + w[None]) - Y) * valid[..., None]
    g = np.einsum("nmd,nmk->ndk", X, resid)
    if variant == "mean":
        g /= np.maximum(counts, 1)[:, None, None]
    return g


def alg23_step(
    w: np.ndarray,
    theta: np.ndarray,
    X: np.ndarray,
    Y: np.ndarray,
    counts: np.ndarray,
    sampled: np.ndarray,
    eta: float,
    alpha: float,
    q: float,
    sigma_zeta: float,
    clip: float,
    rng: np.random.Generator,
    variant: str,
) -> tuple[np.ndarray, np.ndarray]:
    """One round of Algorithm 2 (variant "sum") or 3 ("mean"). w (d, K), theta (N, d, K), padded minibatches
    X (N, m_max, d), Y (N, m_max, K) with counts (N,) valid rows (m_i), ``sampled`` (N,) bool. Returns (w, theta)."""
    N = theta.shape[0]
    scale = q * (np.sum(counts) if variant == "sum" else N)  # q M (Alg. 2) or q N (Alg. 3)
    g = user_gradients(w, theta, X, Y, counts, variant) * np.asarray(sampled, dtype=float)[:, None, None]
    theta = theta - (eta / scale) * g  # unsampled users: g = 0, theta unchanged
    if alpha == 0:
        return w, theta
    norms = np.sqrt((g**2).sum(axis=(1, 2)))
    clipped_sum = np.einsum("ndk,n->dk", g, clip_factors(norms, clip))  # each user's share has norm <= C
    zeta = sigma_zeta * rng.standard_normal(w.shape) if sigma_zeta > 0 else 0.0
    return w - alpha * eta * (clipped_sum / scale + zeta), theta
