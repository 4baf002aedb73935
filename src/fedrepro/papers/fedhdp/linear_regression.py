"""Federated linear regression with several privacy levels (FedHDP App. A; docs/notes/fedhdp.md §2.3, §2.4, C7-C10).

Model (eqs. 19-24): client j holds x_j = F_j phi_j + v_j, v_j ~ N(0, beta2 I_{n_s}), with F_j^T F_j = n_s I_d
(the paper's diagonal-covariate assumption), phi_j = phi + p_j, p_j ~ N(0, tau2 I_d). Its least-squares estimate
phi_hat_j = (F_j^T F_j)^-1 F_j^T x_j ~ N(phi_j, alpha2 I_d), alpha2 = beta2 / n_s. A client of level i sends
psi_j = phi_hat_j + l_j, l_j ~ N(0, N_i gamma_i2 I_d) (N_i clients in level i; gamma_i2 = 0: non-private).
Level variances sigma_pi2 = alpha2 + tau2 + N_i gamma_i2; the server averages with weights r_i / sum_k N_k r_k,
r_i = sigma_p1^2 / sigma_pi^2 at the optimum (eqs. 32-33, 64-65); client j personalizes with
theta_j(lam) = (phi_hat_j + lam theta)/(1 + lam).

Every coordinate is an independent copy of the point-estimation problem, so the closed-form loss of a
personalized estimate is d times the scalar MSE of fedrepro.papers.fedhdp.point_estimation (docs/notes/fedhdp.md C8);
the Monte Carlo
here draws the actual design matrices and samples.
"""

from __future__ import annotations

import math

import numpy as np

from fedrepro.papers.fedhdp import point_estimation as pe


def level_variances(counts, gamma2s, alpha2: float, tau2: float) -> np.ndarray:
    """sigma_pi^2 = alpha2 + tau2 + N_i gamma_i^2 (eqs. 26-28, 60)."""
    counts, gamma2s = np.asarray(counts, float), np.asarray(gamma2s, float)
    return alpha2 + tau2 + counts * gamma2s


def r_star_levels(counts, gamma2s, alpha2: float, tau2: float) -> np.ndarray:
    """r_i* = sigma_p1^2 / sigma_pi^2 (eqs. 33, 65); r_1* = 1. Two levels: r* = sigma_p1^2 / sigma_p2^2."""
    s = level_variances(counts, gamma2s, alpha2, tau2)
    return s[0] / s


def server_variance(counts, gamma2s, r, alpha2: float, tau2: float) -> float:
    """Per-coordinate variance of theta - phi for level ratios r: sum_i N_i w_i^2 sigma_pi^2, w_i = r_i / W."""
    counts, r = np.asarray(counts, float), np.asarray(r, float)
    w = r / (counts * r).sum()
    return float((counts * w**2 * level_variances(counts, gamma2s, alpha2, tau2)).sum())


def server_variance_opt(counts, gamma2s, alpha2: float, tau2: float) -> float:
    """(sum_i N_i / sigma_pi^2)^-1 (eq. 62, docs/notes/fedhdp.md C10)."""
    counts = np.asarray(counts, float)
    return float(1.0 / (counts / level_variances(counts, gamma2s, alpha2, tau2)).sum())


def server_variance_opt_two_level(n1: int, n2: int, g1: float, g2: float, alpha2: float, tau2: float) -> float:
    """Lemma 6, eq. (34): (1/N)(s_c + N1 g1)(s_c + N2 g2) / (s_c + (1-rho1) N1 g1 + rho1 N2 g2), s_c = alpha2+tau2."""
    n = n1 + n2
    rho1, sc = n1 / n, alpha2 + tau2
    return (sc + n1 * g1) * (sc + n2 * g2) / (n * (sc + (1 - rho1) * n1 * g1 + rho1 * n2 * g2))


def lambda_star_two_level(n1: int, n2: int, g1: float, g2: float, alpha2: float, tau2: float) -> tuple[float, float]:
    """Theorem 8, eq. (50) (docs/notes/fedhdp.md C7): (lam*_C1, lam*_C2) with Gamma_i^2 = N_i gamma_i^2/alpha2, Ups^2 =
    tau2/alpha2."""
    n = n1 + n2
    u2 = tau2 / alpha2
    G1, G2 = n1 * g1 / alpha2, n2 * g2 / alpha2
    num = n * (1 + u2) + n1 * G2 + n2 * G1
    d1 = n * u2 * (1 + u2) + u2 * ((n2 + 1) * G1 + n1 * G2) + G1 * (1 + G2)
    d2 = n * u2 * (1 + u2) + u2 * (n2 * G1 + (n1 + 1) * G2) + G2 * (1 + G1)
    return num / d1, num / d2


def lambda_star_levels(counts, gamma2s, alpha2: float, tau2: float, level: int) -> float:
    """General closed form for any number of levels (docs/notes/fedhdp.md C9, derived there; not printed by the paper):
    lam_j* = alpha2 / [V_j + tau2 - (r_j / W)(alpha2 + tau2 + V_j)], W = sum_k N_k r_k, V_j the variance of the
    inverse-variance average of the other clients."""
    counts = np.asarray(counts, float)
    s = level_variances(counts, gamma2s, alpha2, tau2)
    r = s[0] / s
    others = counts.copy()
    others[level] -= 1
    v = 1.0 / (others / s).sum()
    w_j = r[level] / (counts * r).sum()
    return alpha2 / (v + tau2 - w_j * (alpha2 + tau2 + v))


def level_setup(
    counts, gamma2s, r, alpha2: float, tau2: float, level: int, own_noise: str = "included"
) -> tuple[float, float, float]:
    """(w_k, g_k2, others) of a client in `level` for point_estimation.local_mse (per coordinate)."""
    if own_noise not in pe.OWN_NOISE:
        raise ValueError(f"own_noise must be one of {pe.OWN_NOISE}")
    counts, r = np.asarray(counts, float), np.asarray(r, float)
    gamma2s = np.asarray(gamma2s, float)
    w = r / (counts * r).sum()
    noise = counts * gamma2s
    s = alpha2 + tau2 + noise
    others = float((counts * w**2 * s).sum() - w[level] ** 2 * s[level])
    g_k2 = float(noise[level]) if own_noise == "included" else 0.0
    return float(w[level]), g_k2, others


def local_loss(
    lam, d: int, counts, gamma2s, r, alpha2: float, tau2: float, level: int, own_noise: str = "included"
) -> np.ndarray:
    """E||theta_k(lam) - phi_k||^2 = d x the scalar MSE (docs/notes/fedhdp.md C8)."""
    return d * pe.local_mse(lam, *level_setup(counts, gamma2s, r, alpha2, tau2, level, own_noise), alpha2, tau2)


def designs(n: int, n_s: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Fixed design matrices F_j (n, n_s, d) with orthogonal columns and F_j^T F_j = n_s I_d."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n_s, d)))
    return math.sqrt(n_s) * q


def simulate(
    trials: int,
    F: np.ndarray,
    beta2: float,
    tau2: float,
    noise_var: np.ndarray,
    phi: np.ndarray,
    rng: np.random.Generator,
    chunk: int = 5000,
) -> dict[str, np.ndarray]:
    """Draw `trials` federations: phi_j, x_j = F_j phi_j + v_j, phi_hat_j = (F^T F)^-1 F^T x_j, psi_j.

    Returns arrays (trials, n, d)."""
    n, n_s, d = F.shape
    pinv = np.linalg.solve(np.einsum("jsa,jsb->jab", F, F), np.transpose(F, (0, 2, 1)))  # (n, d, n_s)
    noise_sd = np.sqrt(np.asarray(noise_var, float))[None, :, None]
    out = {"phi_j": [], "phi_hat": [], "psi": []}
    done = 0
    while done < trials:
        k = min(chunk, trials - done)
        phi_j = phi + math.sqrt(tau2) * rng.standard_normal((k, n, d))
        x = np.einsum("jsa,tja->tjs", F, phi_j) + math.sqrt(beta2) * rng.standard_normal((k, n, n_s))
        phi_hat = np.einsum("jas,tjs->tja", pinv, x)
        out["phi_j"].append(phi_j)
        out["phi_hat"].append(phi_hat)
        out["psi"].append(phi_hat + noise_sd * rng.standard_normal((k, n, d)))
        done += k
    return {key: np.concatenate(v) for key, v in out.items()}


def opt_out_curves(
    counts,
    gamma2s,
    r,
    lam: np.ndarray,
    trials: int,
    d: int,
    n_s: int,
    beta2: float,
    tau2: float,
    rng: np.random.Generator,
    level: int,
    own_noise: str = "included",
    chunk: int = 2000,
) -> dict[str, np.ndarray]:
    """Monte Carlo loss E||theta_k(lam) - phi_k||^2 of the clients of `level` (averaged over them per trial);
    clients are ordered by level. r: level ratios (None: r*)."""
    counts = [int(c) for c in counts]
    n = sum(counts)
    alpha2 = beta2 / n_s
    ratios = r_star_levels(counts, gamma2s, alpha2, tau2) if r is None else np.asarray(r, float)
    lev = np.repeat(np.arange(len(counts)), counts)
    noise = (np.asarray(counts, float) * np.asarray(gamma2s, float))[lev]
    F = designs(n, n_s, d, rng)
    phi = rng.standard_normal(d)
    w = (ratios / (np.asarray(counts) * ratios).sum())[lev]
    idx = np.flatnonzero(lev == level)
    lam = np.asarray(lam, float)
    per_trial, resid_var = [], []
    done = 0
    while done < trials:
        k = min(chunk, trials - done)
        sim = simulate(k, F, beta2, tau2, noise, phi, rng, chunk=chunk)
        theta = np.einsum("tjd,j->td", sim["psi"], w)
        th = np.repeat(theta[:, None, :], idx.size, axis=1)
        if own_noise == "excluded":
            th = th - w[idx, None] * (sim["psi"][:, idx] - sim["phi_hat"][:, idx])
        est = (sim["phi_hat"][:, idx, :, None] + lam * th[..., None]) / (1 + lam)  # (t, k, d, L)
        per_trial.append(((est - sim["phi_j"][:, idx, :, None]) ** 2).sum(axis=2).mean(axis=1))
        # the design check: phi_hat - phi_j has covariance alpha2 I (eq. 22)
        resid_var.append(((sim["phi_hat"] - sim["phi_j"]) ** 2).mean())
        done += k
    mean, se = pe.mc_mean_se(np.concatenate(per_trial))
    return {"loss": mean, "se": se, "r": ratios, "alpha2_mc": float(np.mean(resid_var))}
