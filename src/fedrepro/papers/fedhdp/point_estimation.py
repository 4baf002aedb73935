"""Federated point estimation with private and non-private clients (FedHDP Sec. 3.1, App. B; docs/notes/fedhdp.md §2.1,
§8).

Model (eqs. 5-8): phi_j = phi + p_j, p_j ~ N(0, tau2); client j holds n_s samples x_ji = phi_j + v_ji with
v_ji ~ N(0, n_s alpha2), so its mean phi_hat_j ~ N(phi_j, alpha2); it sends psi_j = phi_hat_j + l_j with
l_j ~ N(0, N_p gamma2) if private (N_p = (1 - rho) N private clients, so the private *average* carries noise
variance gamma2) and l_j = 0 if non-private. sigma_c2 := alpha2 + tau2.

Algorithm 1: the server forms theta = [sum_np psi + r sum_p psi] / (N_np + r N_p); client k personalizes with one
Ditto step, theta_k(lam) = (phi_hat_k + lam theta) / (1 + lam) (Lemma 7).

Every closed form here is written in terms of the per-client weights w_i of the server average (sum w_i = 1), so
one formula covers FedAvg / HDP-FedAvg (r = 1), DP-FedAvg (everyone noised) and FedHDP (r = r*):
    Var(theta - phi) = sum_i w_i^2 (sigma_c2 + gamma_i2)                                  (docs/notes/fedhdp.md C1)
    MSE_k(lam) = [(1 + lam w_k)^2 a2 + lam^2 (1 - w_k)^2 t2 + lam^2 w_k^2 g_k2
                  + lam^2 sum_{i != k} w_i^2 (a2 + t2 + g_i2)] / (1 + lam)^2                  (docs/notes/fedhdp.md C8)
MSE_k(lam) = (A + 2 B lam + C lam^2)/(1 + lam)^2 is minimized at lam = (A - B)/(C - B) (derived here), which is
how eq. (17)/(18) are checked independently of their printed form.

`own_noise` selects the reading of the client's own contribution to the global model it personalizes towards:
"included" follows Algorithm 1 literally (its own noisy psi_k is inside theta); "excluded" is the convention of
eq. (49) under which eqs. (17)/(18) are exactly Bayes optimal (its own phi_hat_k enters noise-free; docs/notes/fedhdp.md
§7 #3).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

OWN_NOISE = ("included", "excluded")


# ---------------------------------------------------------------------------------------------- server side
def group_weights(n_np: int, n_p: int, r: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-client weights (non-private, private) of Algorithm 1's server average with ratio r = w_p / w_np."""
    r = np.asarray(r, dtype=float)
    den = n_np + r * n_p
    return 1.0 / den, r / den


def server_variance(r, n: int, rho: float, sigma_c2: float, gamma2: float) -> np.ndarray:
    """sigma_s^2(r) = [N_np sigma_c2 + r^2 N_p (sigma_c2 + N_p gamma2)] / (N_np + r N_p)^2  (docs/notes/fedhdp.md C1,
    from (12))."""
    n_np, n_p = split(n, rho)
    w_np, w_p = group_weights(n_np, n_p, r)
    return n_np * w_np**2 * sigma_c2 + n_p * w_p**2 * (sigma_c2 + n_p * gamma2)


def r_star(n: int, rho: float, sigma_c2: float, gamma2: float) -> float:
    """Lemma 1: r* = sigma_c2 / (sigma_c2 + (1 - rho) N gamma2)."""
    return sigma_c2 / (sigma_c2 + (1 - rho) * n * gamma2)


def server_variance_opt(n: int, rho: float, sigma_c2: float, gamma2: float) -> float:
    """Lemma 1, eq. (13): (1/N) sigma_c2 (sigma_c2 + (1-rho) N gamma2) / (sigma_c2 + rho (1-rho) N gamma2)."""
    return sigma_c2 * (sigma_c2 + (1 - rho) * n * gamma2) / (n * (sigma_c2 + rho * (1 - rho) * n * gamma2))


def server_variance_hdp(n: int, rho: float, sigma_c2: float, gamma2: float) -> float:
    """HDP-FedAvg (uniform average, only private clients noised): sigma_c2/N + (1-rho)^2 gamma2 (docs/notes/fedhdp.md
    C3)."""
    return sigma_c2 / n + (1 - rho) ** 2 * gamma2


def server_variance_dp(n: int, rho: float, sigma_c2: float, gamma2: float) -> float:
    """DP-FedAvg (every client adds N(0, (1-rho) N gamma2)): sigma_c2/N + (1-rho) gamma2 (docs/notes/fedhdp.md C3)."""
    return sigma_c2 / n + (1 - rho) * gamma2


def lemma2_gaps(n: int, rho: float, sigma_c2: float, gamma2: float) -> dict[str, float]:
    """Lemma 2, eqs. (14)-(16), with D = sigma_c2 + rho (1-rho) gamma2 N (docs/notes/fedhdp.md C4)."""
    d = sigma_c2 + rho * (1 - rho) * gamma2 * n
    return {
        "hdp_minus_opt": rho * (1 - rho) ** 3 * gamma2**2 * n / d,
        "dp_minus_opt": (rho * (1 - rho) * sigma_c2 * gamma2 + rho * (1 - rho) ** 2 * gamma2**2 * n) / d,
        "dp_minus_hdp": (rho * (1 - rho) * sigma_c2 * gamma2 + rho**2 * (1 - rho) ** 2 * gamma2**2 * n) / d,
    }


def split(n: int, rho: float) -> tuple[int, int]:
    """(N_np, N_p) for N clients of which a fraction rho is non-private (rho N must be an integer)."""
    n_np = rho * n
    if abs(n_np - round(n_np)) > 1e-9:
        raise ValueError(f"rho * N must be an integer (rho={rho}, N={n})")
    return int(round(n_np)), n - int(round(n_np))


# ---------------------------------------------------------------------------------------------- client side
def lambda_np_star(alpha2: float, tau2: float) -> float:
    """Theorem 3, eq. (17): lam*_np = alpha2 / tau2 (infinite for tau2 = 0)."""
    return math.inf if tau2 == 0 else alpha2 / tau2


def lambda_p_star(n: int, rho: float, alpha2: float, tau2: float, gamma2: float) -> float:
    """Theorem 3, eq. (18), as printed."""
    num = alpha2 * (tau2 + alpha2) + rho * (1 - rho) * alpha2 * gamma2 * n
    den = tau2 * (tau2 + alpha2) + (1 - rho) * (alpha2 + tau2) * gamma2 + (1 - rho) * rho * tau2 * gamma2 * n
    return num / den


def lambda_p_star_eq79(n: int, rho: float, alpha2: float, tau2: float, gamma2: float) -> float:
    """Theorem 10, eq. (79): the same optimum in Upsilon^2 = tau2/alpha2, Gamma^2 = N_p gamma2/alpha2."""
    n_p = (1 - rho) * n
    u2, g2 = tau2 / alpha2, n_p * gamma2 / alpha2
    return (n + n * u2 + (n - n_p) * g2) / (n * u2 * (u2 + 1) + (n - n_p + 1) * u2 * g2 + g2)


def local_mse_coeffs(w_k: float, g_k2: float, others: float, alpha2: float, tau2: float) -> tuple[float, float, float]:
    """(A, B, C) with MSE_k(lam) = (A + 2 B lam + C lam^2) / (1 + lam)^2.

    others = sum_{i != k} w_i^2 (alpha2 + tau2 + g_i2).
    """
    a = alpha2
    b = w_k * alpha2
    c = w_k**2 * alpha2 + (1 - w_k) ** 2 * tau2 + w_k**2 * g_k2 + others
    return a, b, c


def local_mse(lam, w_k: float, g_k2: float, others: float, alpha2: float, tau2: float) -> np.ndarray:
    """MSE of theta_k(lam) = (phi_hat_k + lam theta)/(1 + lam) around phi_k (docs/notes/fedhdp.md C8); lam may be an
    array."""
    a, b, c = local_mse_coeffs(w_k, g_k2, others, alpha2, tau2)
    lam = np.asarray(lam, dtype=float)
    with np.errstate(invalid="ignore"):
        out = (a + 2 * b * lam + c * lam**2) / (1 + lam) ** 2
    return np.where(np.isinf(lam), c, out)


def local_mse_argmin(w_k: float, g_k2: float, others: float, alpha2: float, tau2: float) -> float:
    """argmin_lam>=0 MSE_k(lam) = (A - B)/(C - B) (derived here; inf when C = B)."""
    a, b, c = local_mse_coeffs(w_k, g_k2, others, alpha2, tau2)
    if c - b <= 1e-12 * max(abs(c), abs(b)):  # C = B: the MSE decreases in lam all the way (no data heterogeneity)
        return math.inf
    return max((a - b) / (c - b), 0.0)


def client_setup(
    n: int,
    rho: float,
    r: float,
    alpha2: float,
    tau2: float,
    gamma2: float,
    private: bool,
    own_noise: str = "included",
    dp_everyone: bool = False,
) -> tuple[float, float, float]:
    """(w_k, g_k2, others) of client k in a federation of N clients (fraction rho non-private).

    dp_everyone: DP-FedAvg, every client adds N(0, N_p gamma2) and the average is uniform.
    """
    if own_noise not in OWN_NOISE:
        raise ValueError(f"own_noise must be one of {OWN_NOISE}")
    n_np, n_p = split(n, rho)
    s2 = alpha2 + tau2
    noise_p = n_p * gamma2
    if dp_everyone:
        w = 1.0 / n
        g_k2 = noise_p if own_noise == "included" else 0.0
        return w, g_k2, (n - 1) * w**2 * (s2 + noise_p)
    w_np, w_p = (float(x) for x in group_weights(n_np, n_p, r))
    if private:
        g_k2 = noise_p if own_noise == "included" else 0.0
        others = n_np * w_np**2 * s2 + (n_p - 1) * w_p**2 * (s2 + noise_p)
        return w_p, g_k2, others
    others = (n_np - 1) * w_np**2 * s2 + n_p * w_p**2 * (s2 + noise_p)
    return w_np, 0.0, others


def bayes_local_variance(n: int, rho: float, alpha2: float, tau2: float, gamma2: float, private: bool) -> float:
    """Error variance of the Bayes estimate theta_j* of eqs. (43)-(47): alpha2 (V + tau2)/(alpha2 + tau2 + V), with
    V = (sum_{i != j} 1/sigma_{p(i)}^2)^-1 the variance of the other clients' inverse-variance average
    (docs/notes/fedhdp.md C8)."""
    n_np, n_p = split(n, rho)
    s1, s2 = alpha2 + tau2, alpha2 + tau2 + n_p * gamma2
    m_np, m_p = (n_np, n_p - 1) if private else (n_np - 1, n_p)
    v = 1.0 / (m_np / s1 + m_p / s2)
    return alpha2 * (v + tau2) / (alpha2 + tau2 + v)


def client_update(theta_global, theta_k, phi_hat_k, lam, eta: float = 1.0, eta_k=None):
    """Algorithm 1's ClientUpdate (one step each, anchored at the received global model; docs/notes/fedhdp.md §2.2):
    theta <- theta - eta (theta - phi_hat_k);  theta_k <- theta_k - eta_k ((theta_k - phi_hat_k) + lam (theta_k -
    theta_global)), eta_k = 1/(1 + lam) by default. Returns (theta, theta_k) (Lemma 7: exact after one step)."""
    eta_k = 1.0 / (1.0 + lam) if eta_k is None else eta_k
    theta = theta_global - eta * (theta_global - phi_hat_k)
    theta_k = theta_k - eta_k * ((theta_k - phi_hat_k) + lam * (theta_k - theta_global))
    return theta, theta_k


# ---------------------------------------------------------------------------------------------- Monte Carlo
def _chunks(trials: int, chunk: int) -> Iterator[int]:
    done = 0
    while done < trials:
        k = min(chunk, trials - done)
        yield k
        done += k


def simulate_clients(
    trials: int,
    n: int,
    n_s: int,
    alpha2: float,
    tau2: float,
    noise_var: np.ndarray,
    rng: np.random.Generator,
    phi: float = 0.0,
    chunk: int = 20000,
) -> dict[str, np.ndarray]:
    """Draw `trials` independent federations of n clients from eqs. (5)-(8), sample by sample.

    noise_var: per-client variance of the privacy noise l_j (0 for non-private clients).
    Returns phi_j, phi_hat_j (the mean of n_s samples with noise variance n_s alpha2) and psi_j, each (trials, n).
    """
    noise_sd = np.sqrt(np.asarray(noise_var, dtype=float))
    out = {"phi_j": [], "phi_hat": [], "psi": []}
    for k in _chunks(trials, chunk):
        phi_j = phi + math.sqrt(tau2) * rng.standard_normal((k, n))
        x = phi_j[:, :, None] + math.sqrt(n_s * alpha2) * rng.standard_normal((k, n, n_s))
        phi_hat = x.mean(axis=2)
        out["phi_j"].append(phi_j)
        out["phi_hat"].append(phi_hat)
        out["psi"].append(phi_hat + noise_sd * rng.standard_normal((k, n)))
    return {key: np.concatenate(v) for key, v in out.items()}


def aggregate(psi: np.ndarray, n_np: int, r: np.ndarray) -> np.ndarray:
    """Algorithm 1's server step for every r at once: clients 0..n_np-1 are non-private. Returns (trials, len(r))."""
    a = psi[:, :n_np].sum(axis=1)[:, None]
    b = psi[:, n_np:].sum(axis=1)[:, None]
    n_p = psi.shape[1] - n_np
    r = np.atleast_1d(np.asarray(r, dtype=float))[None, :]
    return (a + r * b) / (n_np + r * n_p)


def personalize(phi_hat_k: np.ndarray, theta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """One Ditto step with eta_k = 1/(1 + lam) from any start (Lemma 7): (phi_hat_k + lam theta)/(1 + lam).

    phi_hat_k, theta: (trials, ...) ; lam: (L,) -> (trials, ..., L).
    """
    lam = np.asarray(lam, dtype=float)
    return (phi_hat_k[..., None] + lam * theta[..., None]) / (1 + lam)


def mc_mean_se(sq_err: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the first axis (independent trials) and its standard error."""
    return sq_err.mean(axis=0), sq_err.std(axis=0, ddof=1) / math.sqrt(sq_err.shape[0])


def opt_out_curves(
    n: int,
    rho: float,
    alpha2: float,
    tau2: float,
    gamma2: float,
    r: float | None,
    lam: np.ndarray,
    trials: int,
    n_s: int,
    rng: np.random.Generator,
    private: bool,
    own_noise: str = "included",
    chunk: int = 5000,
) -> dict[str, np.ndarray]:
    """Monte Carlo MSE of the personalized estimate theta_k(lam) of a client in role `private`, averaged over all
    clients of that role in each trial (they are exchangeable), with r = r* when r is None.

    own_noise="excluded" evaluates each client against a global model in which its own psi is replaced by its
    noise-free phi_hat (the eq. (49) convention)."""
    n_np, n_p = split(n, rho)
    ratio = r_star(n, rho, alpha2 + tau2, gamma2) if r is None else r
    noise = np.r_[np.zeros(n_np), np.full(n_p, n_p * gamma2)]
    w_np, w_p = (float(x) for x in group_weights(n_np, n_p, ratio))
    w = np.r_[np.full(n_np, w_np), np.full(n_p, w_p)]
    idx = np.arange(n_np, n) if private else np.arange(n_np)
    per_trial = []
    for k in _chunks(trials, chunk):
        sim = simulate_clients(k, n, n_s, alpha2, tau2, noise, rng, chunk=chunk)
        theta = sim["psi"] @ w  # (k,)
        th = np.repeat(theta[:, None], idx.size, axis=1)
        if own_noise == "excluded":
            th = th - w[idx] * (sim["psi"][:, idx] - sim["phi_hat"][:, idx])
        est = personalize(sim["phi_hat"][:, idx], th, lam)  # (k, clients, L)
        per_trial.append(((est - sim["phi_j"][:, idx, None]) ** 2).mean(axis=1))
    mean, se = mc_mean_se(np.concatenate(per_trial))
    return {"mse": mean, "se": se, "r": np.float64(ratio)}
