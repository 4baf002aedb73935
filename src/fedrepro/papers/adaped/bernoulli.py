"""Bernoulli personalized estimation (Ozkara et al. 2023, Sec. 2.2, eq. 6-7, Thm 3-4, App. C).

Model: p_i ~ P on [0, 1] (Beta(alpha, beta) for the theory), client i sees Z_i ~ Bin(n, p_i), Xbar_i = Z_i / n.
Every function is vectorized over clients, which sit on the LAST axis of its array arguments (leading axes, e.g.
independent repetitions, are carried along), and costs O(m) per row: leave-one-out sums are "total minus own".

Estimators
  * local:                   Xbar_i = Z_i / n.
  * known Beta prior (31):   p_i = (alpha + Z_i)/(alpha + beta + n) = a Xbar_i + (1-a) alpha/(alpha+beta),
                             a = n/(alpha+beta+n); Bayes risk alpha beta/(n(a+b)(a+b+1)) * a (App. C.1).
  * leave-one-out moments (6):
        mu_i     = 1/(m-1) sum_{l != i} Xbar_l
        sigma2_i = 1/(m-2) sum_{l != i} (Xbar_l - centre)^2
        a_i      = n / (mu_i (1 - mu_i) / sigma2_i - 1 + n)          ("-1": Sec. 2.2)
        p_i      = a_i Xbar_i + (1 - a_i) mu_i
  * private (7), Thm 4: client l sends the 1-bit q_priv(Xbar_l); mu_i, sigma2_i are the same leave-one-out
    moments of the privatized values and a_i = n / (mu_i (1-mu_i) / sigma2_i + n) (no "-1", as printed).

Inconsistencies of the printed estimator, made selectable (defaults reproduce Sec. 2.2's eq. 6):
  * ``minus_one``: Sec. 2.2 prints "-1" in the denominator of a_i (moment estimate alpha+beta = mu(1-mu)/s2 - 1);
    App. C.2 (eq. 32, proof of Thm 3) and the private estimator drop it. ``minus_one=False`` is App. C.2.
  * ``centre``: App. C.2 centres sigma2_i at mu_i ("mu_i": the unbiased leave-one-out sample variance, default);
    Sec. 2.2 prints mu_l, the leave-l-out mean ("mu_l"; the "1/4" after it in the text is footnote mark 4).
    Both are O(m); they differ by a factor (1 + O(1/m)).
  * Neither form subtracts the binomial noise E[p(1-p)]/n from sigma2_i, although Thm 3's proof treats sigma2_i as
    an estimate of Var(p); the paper's experiments (App. K) are reproduced by this literal form (docs/notes/adaped.md
    §8.9).

a_i is NOT clipped to [0, 1]: the paper never says to. It can leave [0, 1] only in degenerate cases (with
"-1", a_i > 1 iff mu_i(1-mu_i)/sigma2_i < 1, which needs almost all Xbar_l in {0, 1}; in the private estimator mu_i
may fall outside [0, 1]). Division by zero is guarded by this rule (:func:`shrinkage_weight`):
  * sigma2_i == 0 (the other clients' Xbar are all equal): a_i = 0, i.e. p_i = mu_i -- the sigma^2 -> 0 limit of
    Remark 3 ("very small heterogeneity -> a_i -> 0"); this also covers the 0/0 case mu_i in {0, 1}.
  * denominator == 0 with sigma2_i > 0 (only possible with n = 1, or privately): the moment estimate of
    alpha + beta is -n, no Beta prior matches, so the client keeps its local estimate, a_i = 1.
"""

from __future__ import annotations

import math

import numpy as np

CENTRES = ("mu_i", "mu_l")


# ---------------------------------------------------------------- local and known prior (App. C.1, eq. 31)
def local_estimate(z: np.ndarray, n: int) -> np.ndarray:
    """Xbar_i = Z_i / n."""
    return np.asarray(z, dtype=float) / n


def known_prior_weight(n: int, alpha: float, beta: float) -> float:
    """a = n / (alpha + beta + n) (eq. 31)."""
    return n / (alpha + beta + n)


def posterior_mean(z: np.ndarray, n: int, alpha: float, beta: float) -> np.ndarray:
    """Posterior mean under a known Beta(alpha, beta) prior: (alpha + Z) / (alpha + beta + n) (eq. 31)."""
    return (alpha + np.asarray(z, dtype=float)) / (alpha + beta + n)


def beta_moments(alpha: float, beta: float) -> tuple[float, float]:
    """Mean alpha/(alpha+beta) and variance alpha beta / ((alpha+beta)^2 (alpha+beta+1)) of Beta(alpha, beta)."""
    s = alpha + beta
    return alpha / s, alpha * beta / (s * s * (s + 1.0))


def bayes_risk_local(n: int, alpha: float, beta: float) -> float:
    """E (Xbar - p)^2 = alpha beta / (n (alpha+beta)(alpha+beta+1)) under p ~ Beta(alpha, beta) (Remark 5)."""
    s = alpha + beta
    return alpha * beta / (n * s * (s + 1.0))


def bayes_risk_posterior_mean(n: int, alpha: float, beta: float) -> float:
    """Bayes risk of eq. (31): alpha beta / (n (alpha+beta)(alpha+beta+1)) * n / (alpha+beta+n) (App. C.1)."""
    return bayes_risk_local(n, alpha, beta) * known_prior_weight(n, alpha, beta)


# ---------------------------------------------------------------- leave-one-out moments (eq. 6)
def loo_moments(x: np.ndarray, centre: str = "mu_i") -> tuple[np.ndarray, np.ndarray]:
    """(mu_i, sigma2_i) of eq. (6) for every client i, along the last axis, in O(m).

    With c_l = x_l - mean(x) and C2 = sum_l c_l^2 (centring first avoids cancellation):
      mu_i = (S - x_i)/(m - 1);
      "mu_i": sum_{l != i} (x_l - mu_i)^2 = C2 - c_i^2 m/(m-1)          (sum_{l != i} c_l = -c_i);
      "mu_l": x_l - mu_l = c_l m/(m-1), so the sum is (m/(m-1))^2 (C2 - c_i^2).
    """
    if centre not in CENTRES:
        raise ValueError(f"centre must be one of {CENTRES}, got {centre!r}")
    x = np.asarray(x, dtype=float)
    m = x.shape[-1]
    if m < 3:
        raise ValueError(f"eq. (6) needs m >= 3 clients (it divides by m - 2), got m = {m}")
    total = x.sum(axis=-1, keepdims=True)
    mu = (total - x) / (m - 1)
    c = x - total / m
    c2 = (c * c).sum(axis=-1, keepdims=True)
    if centre == "mu_i":
        ss = c2 - c * c * (m / (m - 1))
    else:
        ss = (m / (m - 1)) ** 2 * (c2 - c * c)
    # Round-off: "total minus own" and the centring make an exactly-zero spread (all other clients equal) come out
    # as ~1e-17 or ~1e-32 instead of 0. Sums of squares below that round-off level (relative to C2, plus the
    # squared centring error m (8 eps max|x|)^2) are set to exactly 0, so the sigma2 == 0 rule of
    # shrinkage_weight applies as it would to the literal O(m^2) sum. Genuine spreads are ~1/n^2, far above it.
    eps = np.finfo(float).eps
    tol = 64.0 * eps * c2 + m * (8.0 * eps * np.abs(x).max(axis=-1, keepdims=True)) ** 2
    ss = np.where(ss <= tol, 0.0, ss)
    return mu, ss / (m - 2)


def shrinkage_weight(mu: np.ndarray, sigma2: np.ndarray, n: int, minus_one: bool = True) -> np.ndarray:
    """a_i = n / (mu_i (1 - mu_i) / sigma2_i - [1] + n), unclipped, with the module's division-by-zero rule."""
    mu, sigma2 = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sigma2, dtype=float))
    a = np.empty(mu.shape)
    flat = sigma2 == 0.0
    a[flat] = 0.0
    ok = ~flat
    denom = mu[ok] * (1.0 - mu[ok]) / sigma2[ok] + (n - 1.0 if minus_one else float(n))
    a_ok = np.ones(denom.shape)
    nz = denom != 0.0
    a_ok[nz] = n / denom[nz]
    a[ok] = a_ok
    return a


def personalized(xbar: np.ndarray, a: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """p_i = a_i Xbar_i + (1 - a_i) mu_i (eq. 6, 31, 32)."""
    return a * xbar + (1.0 - a) * mu


def loo_estimate(xbar: np.ndarray, n: int, minus_one: bool = True, centre: str = "mu_i") -> dict[str, np.ndarray]:
    """Eq. (6) for all clients: returns p_hat, a_hat, mu_hat, sigma2_hat (arrays shaped like xbar)."""
    xbar = np.asarray(xbar, dtype=float)
    mu, s2 = loo_moments(xbar, centre)
    a = shrinkage_weight(mu, s2, n, minus_one)
    return {"p_hat": personalized(xbar, a, mu), "a_hat": a, "mu_hat": mu, "sigma2_hat": s2}


def eq6_large_m_limit(mu: float, var: float, n: int, minus_one: bool = True) -> dict[str, float]:
    """Large-m limit of eq. (6) for ANY prior on [0, 1] with mean mu and variance var (docs/notes/adaped.md §8.9,
    derived).

    As m -> inf, mu_i -> mu and sigma2_i -> Var(Xbar) = var + (mu(1-mu) - var)/n (binomial noise included), so
    a_i -> a_inf; for a fixed weight a (independent of client i's data) the MSE of a Xbar_i + (1-a) mu is
    a^2 (mu(1-mu) - var)/n + (1-a)^2 var (cross term vanishes since E[Xbar_i - p_i | p_i] = 0).
    """
    noise = (mu * (1.0 - mu) - var) / n  # E p(1-p) / n = MSE of the local estimator
    s2 = var + noise
    a = float(shrinkage_weight(np.array(mu), np.array(s2), n, minus_one))
    mse = a * a * noise + (1.0 - a) ** 2 * var
    return {
        "a": a,
        "sigma2": s2,
        "mse_local": noise,
        "mse_personalized": mse,
        "gain_pct": 100.0 * (noise - mse) / noise,
    }


def thm3_bound(a_hat: np.ndarray, n: int, alpha: float, beta: float, m: int, eps0: float | None = None) -> float:
    """Right-hand side of Thm 3 (eps0=None) or Thm 4 with E[a^2], E[(1-a)^2] taken over the given a_hat."""
    a_hat = np.asarray(a_hat, dtype=float)
    _, var = beta_moments(alpha, beta)
    if eps0 is None:
        extra = 3.0 * math.log(4.0 * m * m * n) / (m - 1)
    else:
        e = math.exp(eps0)
        extra = (e + 1.0) ** 2 * math.log(4.0 * m * m * n) / (3.0 * (e - 1.0) ** 2 * (m - 1))
    return float(np.mean(a_hat**2) * bayes_risk_local(n, alpha, beta) + np.mean((1.0 - a_hat) ** 2) * (var + extra))


# ---------------------------------------------------------------- private 1-bit mechanism (eq. 7, Thm 4)
def q_priv_levels(eps0: float) -> tuple[float, float]:
    """The two outputs of q_priv: (-1/(e^eps0 - 1), e^eps0/(e^eps0 - 1))."""
    em1 = math.expm1(eps0)
    return -1.0 / em1, (em1 + 1.0) / em1


def q_priv_prob_high(x: np.ndarray, eps0: float) -> np.ndarray:
    """P[q_priv(x) = e^eps0/(e^eps0-1)] = 1/(e^eps0+1) + x (e^eps0-1)/(e^eps0+1), for x in [0, 1] (eq. 7)."""
    e = math.exp(eps0)
    return 1.0 / (e + 1.0) + np.asarray(x, dtype=float) * (e - 1.0) / (e + 1.0)


def q_priv(x: np.ndarray, eps0: float, rng: np.random.Generator) -> np.ndarray:
    """One draw of the eps0-LDP, unbiased 1-bit mechanism of eq. (7) per entry of x (x must lie in [0, 1])."""
    x = np.asarray(x, dtype=float)
    if np.any((x < 0.0) | (x > 1.0)):
        raise ValueError("q_priv: inputs must lie in [0, 1]")
    lo, hi = q_priv_levels(eps0)
    return np.where(rng.random(x.shape) < q_priv_prob_high(x, eps0), hi, lo)


def private_estimate(
    xbar: np.ndarray, n: int, eps0: float, rng: np.random.Generator, centre: str = "mu_i", minus_one: bool = False
) -> dict[str, np.ndarray]:
    """Private personalized estimator of Thm 4: moments of q_priv(Xbar_l), l != i; a_i without "-1" as printed.

    p_i = a_i Xbar_i + (1 - a_i) mu_i^priv (the text prints mu^priv without the index; we read it as mu_i^priv).
    sigma2^priv includes the mechanism's variance, so a_i^priv is close to 1 for small eps0 (docs/notes/adaped.md
    §7.19).
    """
    xbar = np.asarray(xbar, dtype=float)
    priv = q_priv(xbar, eps0, rng)
    mu, s2 = loo_moments(priv, centre)
    a = shrinkage_weight(mu, s2, n, minus_one)
    return {"p_hat": personalized(xbar, a, mu), "a_hat": a, "mu_hat": mu, "sigma2_hat": s2, "q": priv}
