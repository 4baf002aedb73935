"""Gaussian personalized estimation (Ozkara et al. 2023, Sec. 2.1, Thm 1-2, App. B).

Model: theta_i ~ N(mu, s_theta^2 I_d), X_ij ~ N(theta_i, s_x^2 I_d), j = 1..n. All formulas are per coordinate.
"""

from __future__ import annotations

import math

import numpy as np


def simulate_means(
    m: int, n: int, d: int, sigma_theta: float, sigma_x: float, mu: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
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


B_RULES = ("theorem", "proof_c2")


def projection_bound(r: float, sigma_theta: float, sigma_x: float, m: int, n: int, rule: str = "theorem") -> float:
    """The projection bound b of the LDP mechanism. theorem: b = r + s_theta L + (s_x/sqrt(n)) L, L = sqrt(log(m^2 n))
    (Thm 2); proof_c2: App. B.2.1's c2 = sqrt(s_theta^2 log(m^2 n) / n) in place of s_theta L, i.e. s_theta L /
    sqrt(n)."""
    if rule not in B_RULES:
        raise ValueError(f"projection bound rule {rule!r}: one of {', '.join(B_RULES)}")
    L = math.sqrt(math.log(m * m * n))
    spread = sigma_theta * L if rule == "theorem" else sigma_theta * L / math.sqrt(n)
    return r + spread + sigma_x / math.sqrt(n) * L


def ldp_noise_std(b: float, eps0: float, delta: float) -> float:
    """sigma_q = (b/eps0) sqrt(8 log(2/delta)): the paper's Gaussian LDP mechanism on [-b, b] (eq. 24, Thm 2.2)."""
    return b / eps0 * math.sqrt(8.0 * math.log(2.0 / delta))


def gaussian_ldp(x: np.ndarray, b: float, eps0: float, delta: float, rng: np.random.Generator) -> np.ndarray:
    """q_p(x) = Proj_[-b,b](x) + N(0, sigma_q^2), per coordinate."""
    return np.clip(x, -b, b) + ldp_noise_std(b, eps0, delta) * rng.standard_normal(x.shape)


def mse_local(sigma_x: float, n: int, d: int = 1) -> float:
    return d * sigma_x**2 / n


def mse_shrinkage(
    a: float, sigma_theta: float, sigma_x: float, n: int, m: int, sigma_q: float = 0.0, d: int = 1
) -> float:
    """Exact MSE of a Xbar_i + (1-a) mean_k q(Xbar_k) for an unbiased additive channel q (App. B.2, eq. 19).

    MSE(a) = d[a^2 s + (1-a)^2 (s + sigma_q^2)/m + 2a(1-a)s/m + (1-a)^2 sigma_theta^2 (m-1)/m], s = s_x^2/n.
    Exact when q adds N(0, sigma_q^2) without projection; with sigma_q = 0 and a from Thm 1 it equals
    d s (a + (1-a)/m).
    """
    s = sigma_x**2 / n
    return d * (
        a * a * s
        + (1 - a) ** 2 * (s + sigma_q**2) / m
        + 2 * a * (1 - a) * s / m
        + (1 - a) ** 2 * sigma_theta**2 * (m - 1) / m
    )


def clipped_normal_moments(mu: float, tau: float, b: float) -> tuple[float, float, float]:
    """E[c], E[c^2] and P(|Y| < b) of c = Proj_[-b,b](Y), Y ~ N(mu, tau^2)."""
    from scipy.stats import norm

    lo, hi = (-b - mu) / tau, (b - mu) / tau
    p_in = norm.cdf(hi) - norm.cdf(lo)
    p_lo, p_hi = norm.cdf(lo), norm.sf(hi)
    dens = norm.pdf(lo) - norm.pdf(hi)
    ey_in = mu * p_in + tau * dens
    ey2_in = mu**2 * p_in + 2 * mu * tau * dens + tau**2 * (p_in + lo * norm.pdf(lo) - hi * norm.pdf(hi))
    return -b * p_lo + ey_in + b * p_hi, b * b * (p_lo + p_hi) + ey2_in, p_in


def mse_dp_exact(
    a: float, sigma_theta: float, sigma_x: float, n: int, m: int, mu: float, b: float, noise_var: float, d: int = 1
) -> float:
    """Exact MSE of the DP personalized estimator a Xbar_i + (1-a) mu_q, mu_q = mean_k Proj_[-b,b](Xbar_k) + N(0, V)
    with V = noise_var (the mean's noise; sigma_q^2/m for per-client noise), per coordinate times d.

    Y_k = Xbar_k ~ N(mu, s_theta^2 + s), s = s_x^2/n, c_k = Proj(Y_k). With the clipped-normal moments M1, M2 and
    Stein's lemma (E[theta c(Y)] = mu M1 + s_theta^2 P(|Y| < b), E[eps c(Y)] = s P(|Y| < b)):
    MSE = a^2 s + (1-a)^2 E[(mu_q - theta_i)^2] + 2a(1-a) s P(|Y| < b)/m. Without projection (b -> inf) and
    V = sigma_q^2/m it is eq. (19) (:func:`mse_shrinkage`), which ignores the projection.
    """
    s = sigma_x**2 / n
    M1, M2, p_in = clipped_normal_moments(mu, math.sqrt(sigma_theta**2 + s), b)
    e_own = M2 / m**2 - 2 * (mu * M1 + sigma_theta**2 * p_in) / m + mu**2 + sigma_theta**2  # E[(c_i/m - theta_i)^2]
    rest_mean, rest_var = (m - 1) * M1 / m, (m - 1) * (M2 - M1**2) / m**2  # the other m - 1 terms
    e_mq = e_own + 2 * (M1 / m - mu) * rest_mean + rest_var + rest_mean**2 + noise_var
    return d * (a * a * s + (1 - a) ** 2 * e_mq + 2 * a * (1 - a) * s * p_in / m)


def largest_recovering_sigma_q(
    target: float,
    sigma_theta: float,
    sigma_x: float,
    n: int,
    m: int,
    mu: float,
    b: float,
    a_rule: str = "eq5",
    d: int = 1,
) -> float:
    """The largest per-client noise std sigma_q at which the DP estimator's exact MSE (eq. (5)'s a, or Thm 1's for
    a_rule "nonprivate") is still <= target; 0 when even sigma_q = 0 misses it (the MSE grows with sigma_q)."""
    from scipy.optimize import brentq

    def excess(sq: float) -> float:
        a = (
            shrinkage_weight(sigma_theta, sigma_x, n, sq, m)
            if a_rule == "eq5"
            else shrinkage_weight(sigma_theta, sigma_x, n)
        )
        return mse_dp_exact(a, sigma_theta, sigma_x, n, m, mu, b, sq**2 / m, d) - target

    if excess(0.0) > 0:
        return 0.0
    hi = 1.0
    while excess(hi) <= 0:
        hi *= 2
        if hi > 1e9:
            return math.inf
    return brentq(excess, 0.0, hi, xtol=1e-10)


def remark1_ratio(m: int, n: int, sigma_x2: float, sigma_theta2: float) -> float:
    """Multiplicative gap (1-a)/m + a between the personalized and the local MSE (Remark 1)."""
    a = sigma_theta2 / (sigma_theta2 + sigma_x2 / n)
    return (1 - a) / m + a
