"""Gaussian personalized estimation (Ozkara et al. 2023, Sec. 2.1, Thm 1-2, App. B).

Model: theta_i ~ N(mu, s_theta^2 I_d), X_ij ~ N(theta_i, s_x^2 I_d), j = 1..n. All formulas are per coordinate.
"""

from __future__ import annotations

import math

import numpy as np


def simulate_means(m: int, n: int, d: int, sigma_theta: float, sigma_x: float, mu: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw theta (m, d) and the local means Xbar (m, d).

    Xbar_i is the sufficient statistic of client i's n samples; drawing it as N(theta_i, s_x^2/n) is the same
    distribution as averaging n draws of N(theta_i, s_x^2) and costs O(md) instead of O(mnd).
    """
    theta = mu + sigma_theta * rng.standard_normal((m, d))
    xbar = theta + (sigma_x / math.sqrt(n)) * rng.standard_normal((m, d))
    return theta, xbar


def shrinkage_weight(sigma_theta: float, sigma_x: float, n: int, sigma_q: float = 0.0, m: int | None = None) -> float:
    """Weight a on the local mean: Thm 1 (eq. 3) when sigma_q = 0, else eq. (5) with sigma_q^2/(m-1)."""
    extra = 0.0 if sigma_q == 0.0 else sigma_q**2 / (m - 1)
    v = sigma_theta**2 + extra
    return v / (v + sigma_x**2 / n)


def personalized(xbar: np.ndarray, a: float, mu_hat: np.ndarray) -> np.ndarray:
    """theta_hat_i = a Xbar_i + (1 - a) mu_hat (eq. 3 / eq. 4)."""
    return a * xbar + (1.0 - a) * mu_hat


def projection_bound(r: float, sigma_theta: float, sigma_x: float, m: int, n: int) -> float:
    """b = r + s_theta sqrt(log(m^2 n)) + (s_x/sqrt(n)) sqrt(log(m^2 n)) (Thm 2)."""
    L = math.sqrt(math.log(m * m * n))
    return r + sigma_theta * L + sigma_x / math.sqrt(n) * L


def ldp_noise_std(b: float, eps0: float, delta: float) -> float:
    """sigma_q = (b/eps0) sqrt(8 log(2/delta)): the paper's Gaussian LDP mechanism on [-b, b] (eq. 24, Thm 2.2)."""
    return b / eps0 * math.sqrt(8.0 * math.log(2.0 / delta))


def gaussian_ldp(x: np.ndarray, b: float, eps0: float, delta: float, rng: np.random.Generator) -> np.ndarray:
    """q_p(x) = Proj_[-b,b](x) + N(0, sigma_q^2), per coordinate."""
    return np.clip(x, -b, b) + ldp_noise_std(b, eps0, delta) * rng.standard_normal(x.shape)


def mse_local(sigma_x: float, n: int, d: int = 1) -> float:
    return d * sigma_x**2 / n


def mse_shrinkage(a: float, sigma_theta: float, sigma_x: float, n: int, m: int, sigma_q: float = 0.0,
                  d: int = 1) -> float:
    """Exact MSE of a Xbar_i + (1-a) mean_k q(Xbar_k) for an unbiased additive channel q (App. B.2, eq. 19).

    MSE(a) = d[a^2 s + (1-a)^2 (s + sigma_q^2)/m + 2a(1-a)s/m + (1-a)^2 sigma_theta^2 (m-1)/m], s = s_x^2/n.
    Exact when q adds N(0, sigma_q^2) without projection; with sigma_q = 0 and a from Thm 1 it equals
    d s (a + (1-a)/m).
    """
    s = sigma_x**2 / n
    return d * (a * a * s + (1 - a) ** 2 * (s + sigma_q**2) / m + 2 * a * (1 - a) * s / m
                + (1 - a) ** 2 * sigma_theta**2 * (m - 1) / m)


def remark1_ratio(m: int, n: int, sigma_x2: float, sigma_theta2: float) -> float:
    """Multiplicative gap (1-a)/m + a between the personalized and the local MSE (Remark 1)."""
    a = sigma_theta2 / (sigma_theta2 + sigma_x2 / n)
    return (1 - a) / m + a
