"""A well-posed variant of AdaMix (an extra beside the paper's Alg. 1, issue 15): the Gaussian-mixture prior of
eq. (10) fitted by EM on the marginal likelihood of the clients' data, with the client models integrated out.

Why a variant: Alg. 1's server fits a GMM to the clients' point estimates theta_i. With points, the joint objective
(10) is unbounded below as s_l -> 0 (a component collapses onto its points), so the fitted variances fall to the
GMM's floor ``reg_covar`` and the client steps freeze (:mod:`fedrepro.papers.adaped.adamix`). Integrating theta_i out,
for linear regression Y_i = X_i theta_i + N(0, s_w I_n) with theta_i ~ sum_l p_l N(mu_l, s_l I_d), gives

    L(P) = sum_i log sum_l p_l N(Y_i; X_i mu_l, C_il),   C_il = s_l X_i X_i^T + s_w I_n,

which is bounded above (s_w > 0), so its maximizer exists; EM increases it every round. Each client computes its
E-step from its own data (per component l):

    r_il = p_l N(Y_i; X_i mu_l, C_il) / sum_q p_q N(Y_i; X_i mu_q, C_iq)            responsibility
    m_il = mu_l + s_l X_i^T C_il^-1 (Y_i - X_i mu_l)                                posterior mean of theta_i
    t_il = tr Cov(theta_i | Y_i, l) = s_l d - s_l^2 tr(X_i^T C_il^-1 X_i)            (Woodbury)

and the server's M-step is

    p_l = mean_i r_il,   mu_l = sum_i r_il m_il / sum_i r_il,
    s_l = sum_i r_il (||m_il - mu_l||^2 + t_il) / (d sum_i r_il).

The personalized model is the posterior mean theta_i = sum_l r_il m_il: under the true prior it is the Bayes
estimator, and with the component known it is Thm 7's eq. (47), whose expected error given X_i is eq. (48)
(:func:`oracle_mse`). The noise variance s_w is known, as in Alg. 1's negative log-likelihood loss. Initialization:
Alg. 1's P^0, the GMM of the min-norm least-squares estimates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrepro.papers.adaped.adamix import GMM


def e_step(X: np.ndarray, Y: np.ndarray, gram: np.ndarray, gmm: GMM, noise_var: float):
    """-> (log p_l N(Y_i; X_i mu_l, C_il) (m, k), posterior means m_il (m, k, d), posterior variance traces (m, k))."""
    m, n, d = X.shape
    k = len(gmm.weights)
    logp, means, traces = np.empty((m, k)), np.empty((m, k, d)), np.empty((m, k))
    eye = np.eye(n)[None]
    for l in range(k):
        s = gmm.var[l]
        L = np.linalg.cholesky(s * gram + noise_var * eye)  # C_il = L L^T
        r = Y - X @ gmm.means[l]  # (m, n)
        a = np.linalg.solve(L, r[..., None])[..., 0]  # L^-1 r
        B = np.linalg.solve(L, X)  # L^-1 X, (m, n, d)
        logdet = 2 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        logp[:, l] = np.log(gmm.weights[l]) - 0.5 * ((a**2).sum(axis=1) + logdet + n * np.log(2 * np.pi))
        cr = np.linalg.solve(np.swapaxes(L, 1, 2), a[..., None])[..., 0]  # C^-1 r
        means[:, l] = gmm.means[l] + s * np.einsum("mnd,mn->md", X, cr)
        traces[:, l] = s * d - s**2 * (B**2).sum(axis=(1, 2))
    return logp, means, traces


def responsibilities(logp: np.ndarray) -> np.ndarray:
    z = np.exp(logp - logp.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def m_step(r: np.ndarray, means: np.ndarray, traces: np.ndarray) -> GMM:
    d = means.shape[2]
    tot = r.sum(axis=0)  # (k,)
    mu = np.einsum("mk,mkd->kd", r, means) / tot[:, None]
    spread = ((means - mu[None]) ** 2).sum(axis=2) + traces  # (m, k)
    return GMM(tot / r.shape[0], mu, (r * spread).sum(axis=0) / (d * tot))


def marginal_em(
    X: np.ndarray,
    Y: np.ndarray,
    gmm0: GMM,
    noise_var: float,
    rounds: int,
    callback: Callable[[int, np.ndarray, GMM], None] | None = None,
) -> tuple[np.ndarray, GMM]:
    """``rounds`` EM rounds from ``gmm0``; returns the posterior means theta (m, d) under the last prior and that
    prior. ``callback(t, theta^t, P^t)`` for t = 0..rounds (theta^t: posterior means under P^t)."""
    gram = X @ np.swapaxes(X, 1, 2)
    gmm = gmm0
    for t in range(rounds + 1):
        logp, means, traces = e_step(X, Y, gram, gmm, noise_var)
        r = responsibilities(logp)
        theta = np.einsum("mk,mkd->md", r, means)
        if callback:
            callback(t, theta, gmm)
        if t < rounds:
            gmm = m_step(r, means, traces)
    return theta, gmm


def marginal_log_likelihood(X: np.ndarray, Y: np.ndarray, gmm: GMM, noise_var: float) -> float:
    """L(P) / m: the mean over clients of log sum_l p_l N(Y_i; X_i mu_l, C_il)."""
    logp, _, _ = e_step(X, Y, X @ np.swapaxes(X, 1, 2), gmm, noise_var)
    top = logp.max(axis=1)
    return float(np.mean(top + np.log(np.exp(logp - top[:, None]).sum(axis=1))))


def oracle_mse(X: np.ndarray, prior_var: float, noise_var: float) -> np.ndarray:
    """(m,) Thm 7 / eq. (48): E ||theta^_i - theta_i||^2 = Tr((I/s + X_i^T X_i / s_w)^-1) for the posterior mean with
    the client's true component (mean and variance s) known, exact given X_i: (d - rank) s from the null space of X_i
    plus sum_j 1/(1/s + lambda_j/s_w) over the eigenvalues lambda_j of X_i X_i^T."""
    m, n, d = X.shape
    lam = np.linalg.eigvalsh(X @ np.swapaxes(X, 1, 2) if n <= d else np.swapaxes(X, 1, 2) @ X)
    return (d - lam.shape[1]) * prior_var + (1.0 / (1.0 / prior_var + lam / noise_var)).sum(axis=1)
