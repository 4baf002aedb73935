"""AdaMix (Ozkara et al., ICLR 2023, Sec. 3.1, eq. 10, Algorithm 1) for linear regression, vectorized over clients.

Objective (eq. 10), client i, Gaussian-mixture prior with weights p_l, means mu_l, variances s_l = sigma_l^2:

    F_i^gm(theta) = f_i(theta) - log sum_l p_l exp(-||mu_l - theta||^2 / (2 s_l)) / (2 pi s_l)^{d/2}

The paper prints the normalizer as (2 pi sigma_l)^{d/2}. That is a typo: the density of N(mu_l, s_l I_d) has
(2 pi s_l)^{d/2}, as the paper's own k = 1 case, (md/2) log(2 pi sigma_theta^2), shows. The normalizer changes
the responsibilities whenever the s_l differ, so the typo is not propagated.

    grad F_i^gm(theta) = grad f_i(theta) + sum_l r_l(theta) (theta - mu_l) / s_l,
    r_l(theta) = p_l N(theta; mu_l, s_l I) / sum_q p_q N(theta; mu_q, s_q I)   (computed in log space).

f_i (GAP): eq. (9) defines f_i = sum_j -log p_theta(Y_ij | X_ij). For Y = <X, theta> + N(0, s_w) that is
sum_j (Y_ij - <X_ij, theta>)^2 / (2 s_w) + const ("nll", the default, and the only scaling under which eq. (10) is
the MAP objective). "sum" (scale 1) and "mean" (scale 1/n) are the other usual readings.

Algorithm 1: theta^0 and P^0 = GMM(theta^0); for t = 1..T every client takes `local_steps` gradient steps on
F_i^gm under P^(t-1), then the server fits P^(t) = GMM(theta^(t), k). The server GMM is scikit-learn's
GaussianMixture(covariance_type="spherical") -- isotropic N(mu_l, s_l I) components as in eq. (10) --
warm-started across rounds with `em_iters` EM iterations per round (or, ``gmm_warm_start=False``, refitted from
scratch every round).

Step size (GAP, deviation from a constant eta): the fitted s_l shrink over the rounds (with point estimates
theta_i the joint objective (10) is unbounded below as s_l -> 0, and ML refits drive s_l down to the GMM's
`reg_covar` floor), so any constant eta eventually exceeds 2/L and diverges. The default "lipschitz" rule takes
eta_i^(t) = lr / L_i^(t), with L_i^(t) = lambda_max(hess f_i) + max_l 1/s_l^(t-1) an upper bound on the
curvature of F_i^gm (the mixture term's Hessian is <= max_l 1/s_l); a client can compute it from its own data
and the broadcast s_l. "constant" uses eta = lr as printed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

LOSSES = ("nll", "sum", "mean")
STEP_RULES = ("lipschitz", "constant")
INITS = ("min_norm_ls",)


@dataclass(frozen=True)
class GMM:
    """Isotropic Gaussian mixture: weights (k,), means (k, d), variances (k,) (s_l = sigma_l^2)."""

    weights: np.ndarray
    means: np.ndarray
    var: np.ndarray


# ---------------------------------------------------------------- data (Sec. 4, "AdaMix")


def draw_mixture_models(
    m: int, mu: np.ndarray, sigma_theta2: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """theta_i ~ 1/2 N(mu, s I) + 1/2 N(-mu, s I); returns theta (m, d) and the signs (m,) of the components."""
    sign = rng.choice(np.array([1.0, -1.0]), size=m)
    theta = sign[:, None] * mu[None, :] + math.sqrt(sigma_theta2) * rng.standard_normal((m, mu.size))
    return theta, sign


def draw_linreg_data(
    theta: np.ndarray, n: int, noise_var: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """X_ij ~ N(0, I_d), Y_ij = <X_ij, theta_i> + w_ij, w_ij ~ N(0, noise_var); X (m, n, d), Y (m, n)."""
    m, d = theta.shape
    X = rng.standard_normal((m, n, d))
    Y = np.einsum("mnd,md->mn", X, theta) + math.sqrt(noise_var) * rng.standard_normal((m, n))
    return X, Y


# ---------------------------------------------------------------- local baseline


def min_norm_ls(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Per-client minimum-norm least squares pinv(X_i) Y_i (eq. 52 with pinv); (m, d).

    Gradient descent from 0 on f_i alone stays in the row space of X_i and converges to this same point.
    """
    return np.einsum("mdn,mn->md", np.linalg.pinv(X), Y)


def local_mse_closed_form(n: int, d: int, mean_sq_norm: float, noise_var: float) -> float:
    """E||pinv(X)Y - theta||^2 for X with iid N(0,1) entries (docs/notes/adaped.md §8.11; exact).

    n < d - 1: pinv(X)X is the projection on a uniformly random n-dim subspace independent of theta, so the bias
    term is (d-n)/d E||theta||^2; the noise term is s_w tr E[(XX^T)^-1] = s_w n/(d-n-1) (inverse Wishart).
    n > d + 1: ordinary least squares, s_w d/(n-d-1). Otherwise the expectation is infinite.
    """
    if n < d - 1:
        return (d - n) / d * mean_sq_norm + noise_var * n / (d - n - 1)
    if n > d + 1:
        return noise_var * d / (n - d - 1)
    raise ValueError(f"E||pinv(X)Y - theta||^2 is infinite for n = {n}, d = {d} (|n - d| <= 1)")


# ---------------------------------------------------------------- objective (eq. 10) and its gradient


def loss_scale(loss: str, noise_var: float, n: int) -> float:
    """c in f_i = c sum_j (Y_ij - <X_ij, theta>)^2 for the readings of f_i listed in the module docstring."""
    if loss == "nll":
        return 1.0 / (2.0 * noise_var)
    if loss == "sum":
        return 1.0
    if loss == "mean":
        return 1.0 / n
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


def _logsumexp(a: np.ndarray) -> np.ndarray:
    """log sum_l exp(a_il) over axis 1, shifted by the row maximum (no overflow, no total underflow)."""
    top = a.max(axis=1)
    return top + np.log(np.exp(a - top[:, None]).sum(axis=1))


def log_components(theta: np.ndarray, gmm: GMM) -> np.ndarray:
    """log p_l + log N(theta_i; mu_l, s_l I_d), shape (m, k)."""
    d = theta.shape[1]
    sq = ((theta[:, None, :] - gmm.means[None, :, :]) ** 2).sum(axis=2)
    return np.log(gmm.weights)[None, :] - 0.5 * d * np.log(2 * np.pi * gmm.var)[None, :] - sq / (2 * gmm.var)[None, :]


def responsibilities(theta: np.ndarray, gmm: GMM) -> np.ndarray:
    """r_l(theta_i) (m, k), computed from log densities shifted by their row maximum (stable far from all means)."""
    lc = log_components(theta, gmm)
    e = np.exp(lc - lc.max(axis=1, keepdims=True))  # normalize after the shift: adding the max back loses digits
    return e / e.sum(axis=1, keepdims=True)


def _residual(theta: np.ndarray, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return Y - (X @ theta[:, :, None])[:, :, 0]


def local_loss(theta: np.ndarray, X: np.ndarray, Y: np.ndarray, scale: float) -> np.ndarray:
    """f_i(theta_i) = c sum_j (Y_ij - <X_ij, theta_i>)^2, shape (m,)."""
    return scale * (_residual(theta, X, Y) ** 2).sum(axis=1)


def local_grad(theta: np.ndarray, X: np.ndarray, Y: np.ndarray, scale: float) -> np.ndarray:
    """grad f_i(theta_i) = -2c X_i^T (Y_i - X_i theta_i), shape (m, d)."""
    return -2.0 * scale * (np.swapaxes(X, 1, 2) @ _residual(theta, X, Y)[:, :, None])[:, :, 0]


def objective(theta: np.ndarray, X: np.ndarray, Y: np.ndarray, gmm: GMM, scale: float) -> np.ndarray:
    """F_i^gm(theta_i) of eq. (10), shape (m,)."""
    return local_loss(theta, X, Y, scale) - _logsumexp(log_components(theta, gmm))


def gradient(theta: np.ndarray, X: np.ndarray, Y: np.ndarray, gmm: GMM, scale: float) -> np.ndarray:
    """grad F_i^gm(theta_i) = grad f_i + sum_l r_l (theta - mu_l)/s_l, shape (m, d)."""
    r = responsibilities(theta, gmm)
    w = r / gmm.var[None, :]
    prior = w.sum(axis=1, keepdims=True) * theta - w @ gmm.means
    return local_grad(theta, X, Y, scale) + prior


def gaussian_prior_map(X: np.ndarray, Y: np.ndarray, mu: np.ndarray, var: float, scale: float) -> np.ndarray:
    """argmin f_i + ||theta - mu||^2/(2 var) = (2c X^T X + I/var)^-1 (2c X^T Y + mu/var).

    The k = 1 (single Gaussian prior) fixed point of the client step; Thm 7, eq. (47) when c = 1/(2 s_w).
    """
    d = X.shape[2]
    A = 2 * scale * np.einsum("mnd,mne->mde", X, X) + np.eye(d)[None] / var
    b = 2 * scale * np.einsum("mnd,mn->md", X, Y) + mu[None, :] / var
    return np.linalg.solve(A, b[..., None])[..., 0]


# ---------------------------------------------------------------- Algorithm 1


def data_curvature(X: np.ndarray, scale: float) -> np.ndarray:
    """lambda_max(hess f_i) = 2c lambda_max(X_i^T X_i), from the smaller of the two Gram matrices; shape (m,)."""
    gram = X @ np.swapaxes(X, 1, 2) if X.shape[1] <= X.shape[2] else np.swapaxes(X, 1, 2) @ X
    return 2 * scale * np.linalg.eigvalsh(gram)[:, -1]


def client_steps(
    theta: np.ndarray,
    X: np.ndarray,
    Y: np.ndarray,
    gmm: GMM,
    scale: float,
    steps: int,
    lr: float,
    step_rule: str = "lipschitz",
    curv_f: np.ndarray | None = None,
) -> np.ndarray:
    """Lines 4-7 of Alg. 1 for all clients at once: `steps` gradient steps on F_i^gm under a fixed prior."""
    if step_rule == "lipschitz":
        if curv_f is None:
            curv_f = data_curvature(X, scale)
        eta = (lr / (curv_f + float(np.max(1.0 / gmm.var))))[:, None]
    elif step_rule == "constant":
        eta = lr
    else:
        raise ValueError(f"step_rule must be one of {STEP_RULES}, got {step_rule!r}")
    for _ in range(steps):
        theta = theta - eta * gradient(theta, X, Y, gmm, scale)
    return theta


class GMMServer:
    """Line 11 of Alg. 1: spherical GMM fitted by EM (scikit-learn), warm-started from the previous round, or with
    ``warm_start=False`` fitted afresh every round (k-means initialization, up to ``em_iters`` EM iterations)."""

    def __init__(self, k: int, em_iters: int, reg_covar: float, seed: int, n_init: int = 1, warm_start: bool = True):
        self.model = GaussianMixture(
            n_components=k,
            covariance_type="spherical",
            max_iter=em_iters,
            reg_covar=reg_covar,
            n_init=n_init,
            warm_start=warm_start,
            random_state=seed,
        )

    def fit(self, theta: np.ndarray) -> GMM:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a few EM steps per round, by design
            self.model.fit(theta)
        return GMM(self.model.weights_.copy(), self.model.means_.copy(), self.model.covariances_.copy())


@dataclass(frozen=True)
class AdaMixConfig:
    """Every knob of Alg. 1 the paper leaves open (GAP); defaults are discussed in the module docstring."""

    k: int = 2
    rounds: int = 100
    local_steps: int = 1
    lr: float = 1.0
    step_rule: str = "lipschitz"
    em_iters: int = 10
    reg_covar: float = 1e-6
    loss: str = "nll"
    noise_var: float = 0.1
    init: str = "min_norm_ls"
    n_init: int = 1
    gmm_warm_start: bool = True


def adamix(
    X: np.ndarray,
    Y: np.ndarray,
    cfg: AdaMixConfig,
    rng: np.random.Generator,
    callback: Callable[[int, np.ndarray, GMM], None] | None = None,
) -> tuple[np.ndarray, GMM]:
    """Run Alg. 1 on all clients; returns theta^T (m, d) and P^T. ``callback(t, theta^t, P^t)`` for t = 0..T."""
    if cfg.init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {cfg.init!r}")
    scale = loss_scale(cfg.loss, cfg.noise_var, X.shape[1])
    theta = min_norm_ls(X, Y)
    curv_f = data_curvature(X, scale)
    server = GMMServer(cfg.k, cfg.em_iters, cfg.reg_covar, int(rng.integers(2**31 - 1)), cfg.n_init, cfg.gmm_warm_start)
    gmm = server.fit(theta)
    if callback:
        callback(0, theta, gmm)
    for t in range(1, cfg.rounds + 1):
        theta = client_steps(theta, X, Y, gmm, scale, cfg.local_steps, cfg.lr, cfg.step_rule, curv_f)
        gmm = server.fit(theta)
        if callback:
            callback(t, theta, gmm)
    return theta, gmm
