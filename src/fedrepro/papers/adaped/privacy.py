"""DP-AdaPeD privacy (Ozkara et al., ICLR 2023): Theorem 5 as printed, Lemma 1's conversion, and a library check.

Theorem 5 (App. I, eqs. 58-61): after T iterations with synchronisation every tau iterations and K of m clients
sampled per round, DP-AdaPeD is (alpha, eps(alpha))-RDP for alpha > 1 with

    eps(alpha) = (K/m)^2 * 6 * (T/tau) * alpha * ( C1^2 / (K sigma_q1^2) + C2^2 / (K sigma_q2^2) ),

i.e. linear in alpha with slope A = (K/m)^2 6 (T/tau) (1/(K z1^2) + 1/(K z2^2)), z_j = sigma_qj / C_j the noise
ratios. Lemma 1 (App. A.2; Canonne et al. 2020, Balle et al. 2020) converts, minimising over *real* lambda > 1:

    eps   = min_lambda  eps(lambda) + (log(1/delta) + (lambda-1) log(1 - 1/lambda) - log lambda) / (lambda - 1)
    delta = min_lambda  exp((lambda-1)(eps(lambda) - eps)) / (lambda-1) * (1 - 1/lambda)^lambda.

The mechanism behind it (proof of Thm 5): per synchronisation round the server releases mu^{t+1} (mean of the K
sampled clients' models, each after tau clipped (C1) and noised (sigma_q1^2 per step) local steps) and psi^{t+1}
(C2, sigma_q2). The effective noise on the released mean has variance tau sigma_q1^2 / K; its squared L2
sensitivity is printed as tau C1^2 / K^2 (eq. 59, reading "paper"); the triangle inequality over the tau clipped
steps gives (tau C1 / K)^2 (reading "triangle", docs/notes/adaped.md section 7). The Gaussian noise multiplier of one
release is then sqrt(tau sigma^2/K) / sensitivity: z sqrt(K) ("paper") or z sqrt(K/tau) ("triangle"). The mu and
psi releases use the same sampled clients, so together they are one Gaussian with multiplier
(z_mu^-2 + z_psi^-2)^-1/2 (exact for Gaussians; what dp-accounting's PoissonSampledDpEvent(ComposedDpEvent)
computes), subsampled at rate K/m (Poisson approximation of the fixed-size draw; K = m is no sampling) and
composed over T/tau rounds. library_epsilon() hands that mechanism to the accountants in fedrepro.privacy.

With K = m the printed RDP is 12x the plain Gaussian RDP alpha Delta^2 / (2 s^2) under the paper's own Delta and s
(docs/notes/adaped.md section 3): the printed epsilon is larger (looser) than the library's for the same noise.

The estimation part's single-shot Gaussian LDP mechanism (Thm 2.2, sigma_q^2 = 8 b^2 log(2/delta) / eps0^2 on inputs
projected to [-b, b], L2 sensitivity 2b; no composition) is fedrepro.papers.adaped.gaussian.ldp_noise_std;
ldp_library_epsilon() gives the epsilon a library accountant certifies for that same noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy import optimize

from fedrepro.errors import PrivacyError
from fedrepro.privacy.accountant import compute_epsilon
from fedrepro.privacy.result import EpsilonResult, library_columns
from fedrepro.privacy.solve import solve_monotone
from fedrepro.privacy.validation import check_delta, check_positive, check_steps

if TYPE_CHECKING:
    from fedrepro.privacy.calibration import Calibration

SENSITIVITIES = ("paper", "triangle")
# Lemma 1's minimum is taken over real lambda in (1 + 1e-9, 1 + 1e9): a log-spaced grid locates it, bounded Brent
# refines it to |log(lambda - 1)| within 1e-12.
_LOG_LM1 = (math.log(1e-9), math.log(1e9))


def _check_km(K, m) -> tuple[int, int]:
    K, m = check_steps(K, "K"), check_steps(m, "m")
    if K > m:
        raise PrivacyError(f"K must not exceed m, got K={K}, m={m}")
    return K, m


def thm5_slope(K: int, m: int, T_over_tau: float, z1: float, z2: float | None = None) -> float:
    """A with eps(alpha) = A alpha (Thm 5), from the noise ratios z_j = sigma_qj / C_j (z2 defaults to z1)."""
    K, m = _check_km(K, m)
    t = check_positive(T_over_tau, "T_over_tau")
    z1 = check_positive(z1, "z1")
    z2 = z1 if z2 is None else check_positive(z2, "z2")
    return (K / m) ** 2 * 6.0 * t * (1.0 / (K * z1**2) + 1.0 / (K * z2**2))


def thm5_rdp(
    alpha: float, K: int, m: int, T_over_tau: float, C1: float, sigma_q1: float, C2: float, sigma_q2: float
) -> float:
    """Theorem 5's eps(alpha), as printed."""
    if not alpha > 1:
        raise PrivacyError(f"alpha must be > 1, got alpha={alpha!r}")
    z1 = check_positive(sigma_q1, "sigma_q1") / check_positive(C1, "C1")
    z2 = check_positive(sigma_q2, "sigma_q2") / check_positive(C2, "C2")
    return thm5_slope(K, m, T_over_tau, z1, z2) * alpha


def _lemma1_eps_term(rdp: Callable[[float], float], lam: float, delta: float) -> float:
    return rdp(lam) + (math.log(1 / delta) + (lam - 1) * math.log1p(-1 / lam) - math.log(lam)) / (lam - 1)


def _minimise_over_lambda(h: Callable[[float], float]) -> tuple[float, float]:
    """min over real lambda > 1 of h(lambda): log-grid scan on v = log(lambda-1), then bounded Brent around it."""
    grid = np.linspace(*_LOG_LM1, 721)
    vals = np.array([h(1 + math.exp(v)) for v in grid])
    i = int(np.nanargmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = optimize.minimize_scalar(
        lambda v: h(1 + math.exp(v)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}
    )
    v = float(res.x) if res.fun <= vals[i] else float(grid[i])
    return float(h(1 + math.exp(v))), 1 + math.exp(v)


def lemma1_epsilon(rdp: Callable[[float], float], delta: float) -> tuple[float, float]:
    """Lemma 1, given delta: (eps, optimal lambda) for an RDP curve lambda -> eps(lambda) over real lambda > 1."""
    d = check_delta(delta)
    return _minimise_over_lambda(lambda lam: _lemma1_eps_term(rdp, lam, d))


def lemma1_delta(rdp: Callable[[float], float], epsilon: float) -> tuple[float, float]:
    """Lemma 1, given eps: (delta, optimal lambda); computed in log space."""
    e = check_positive(epsilon, "epsilon")

    def log_delta(lam: float) -> float:
        return (lam - 1) * (rdp(lam) - e) - math.log(lam - 1) + lam * math.log1p(-1 / lam)

    ld, lam = _minimise_over_lambda(log_delta)
    return math.exp(ld), lam


def thm5_epsilon(z: float, K: int, m: int, T_over_tau: float, delta: float) -> tuple[float, float]:
    """(eps, lambda*) of Thm 5 + Lemma 1 with equal noise ratios z = sigma_q1/C1 = sigma_q2/C2."""
    A = thm5_slope(K, m, T_over_tau, z)
    return lemma1_epsilon(lambda lam: A * lam, delta)


def slope_for_epsilon(target_epsilon: float, delta: float) -> float:
    """The RDP slope A (eps(lambda) = A lambda) whose Lemma 1 epsilon equals target_epsilon (increasing in A)."""
    check_delta(delta)
    t = check_positive(target_epsilon, "target_epsilon")
    A, _, _ = solve_monotone(
        lambda a: lemma1_epsilon(lambda lam: a * lam, delta)[0], t, increasing=True, rtol=1e-12, name="RDP slope"
    )
    return A


def _check_terms(terms: int) -> int:
    if terms not in (1, 2):
        raise PrivacyError(f"terms must be 1 (mu only, DP-FedAvg) or 2 (mu and psi, DP-AdaPeD), got terms={terms!r}")
    return terms


def thm5_noise_ratio(target_epsilon: float, K: int, m: int, T_over_tau: float, delta: float, terms: int = 2) -> float:
    """Noise ratio z = sigma_q/C (equal for mu and psi) at which Thm 5 + Lemma 1 give target_epsilon.

    terms=1 keeps only Thm 5's C1 (mu) term: DP-FedAvg as defined by docs/notes/adaped.md (section 2.12), whose only
    released
    quantity is the model, accounted "with Thm 5 using the C1 term only"."""
    A = slope_for_epsilon(target_epsilon, delta)
    return math.sqrt(thm5_slope(K, m, T_over_tau, 1.0) * _check_terms(terms) / 2 / A)


def release_noise_multiplier(
    z: float, K: int, tau: int | None = None, sensitivity: str = "paper", terms: int = 2
) -> float:
    """Gaussian noise multiplier of one round's joint (mu, psi) release, equal noise ratios z (module docstring);
    terms=1: the mu release alone (DP-FedAvg)."""
    z = check_positive(z, "z")
    K = check_steps(K, "K")
    if sensitivity not in SENSITIVITIES:
        raise PrivacyError(f"sensitivity must be one of {', '.join(SENSITIVITIES)}, got sensitivity={sensitivity!r}")
    if sensitivity == "paper":
        per_release = z * math.sqrt(K)
    else:
        if tau is None:
            raise PrivacyError("tau is required for sensitivity='triangle', got tau=None")
        per_release = z * math.sqrt(K / check_steps(tau, "tau"))
    return (_check_terms(terms) / per_release**2) ** -0.5


def library_epsilon(
    z: float,
    K: int,
    m: int,
    T_over_tau: int,
    delta: float,
    *,
    tau: int | None = None,
    sensitivity: str = "paper",
    accountant: str = "rdp",
    terms: int = 2,
    **kwargs,
) -> EpsilonResult:
    """Epsilon of DP-AdaPeD's per-round (mu, psi) Gaussian release, subsampled at K/m, over T/tau rounds."""
    K, m = _check_km(K, m)
    sigma = release_noise_multiplier(z, K, tau, sensitivity, terms)
    return compute_epsilon(sigma, K / m, check_steps(T_over_tau, "T_over_tau"), delta, accountant, **kwargs)


def ldp_library_epsilon(eps0: float, delta: float, accountant: str = "pld", **kwargs) -> EpsilonResult:
    """Library epsilon at delta of Sec. 2.1's Gaussian LDP mechanism calibrated by Thm 2.2 for eps0.

    sigma_q = (b/eps0) sqrt(8 log(2/delta)) on a value in [-b, b] (sensitivity 2b): noise multiplier
    sigma_q / (2b) = sqrt(2 log(2/delta)) / eps0, independent of b; one release, no sampling.
    """
    e = check_positive(eps0, "eps0")
    sigma = math.sqrt(2.0 * math.log(2.0 / check_delta(delta))) / e
    return compute_epsilon(sigma, 1.0, 1, delta, accountant, **kwargs)


def library_noise_ratio(
    target_epsilon: float,
    K: int,
    m: int,
    T_over_tau: int,
    delta: float,
    *,
    tau: int | None = None,
    sensitivity: str = "paper",
    accountant: str = "rdp",
    terms: int = 2,
    **kwargs,
) -> tuple[float, Calibration]:
    """Noise ratio z at which the library accountant gives target_epsilon for the same mechanism as
    library_epsilon() (calibrated on the release's noise multiplier, which is linear in z)."""
    from fedrepro.privacy.calibration import calibrate_noise_multiplier

    K, m = _check_km(K, m)
    cal = calibrate_noise_multiplier(
        target_epsilon, delta, check_steps(T_over_tau, "T_over_tau"), K / m, accountant, **kwargs
    )
    return cal.noise_multiplier / release_noise_multiplier(1.0, K, tau, sensitivity, terms), cal


# ------------------------------------------------------------ rows of the privacy stage's epsilon.csv


def thm5_rows(exp, run: dict, hist) -> list[dict]:
    """Per target epsilon: Thm 5 + Lemma 1 as printed, the library for the same noise (and, where the run has them,
    the noise the library calibrates for the target and the triangle-inequality sensitivity)."""
    p, lib = exp.params, run["accountant"]["library"]
    common = dict(sampling_rate=p["K"] / p["m"], rounds=p["T_over_tau"], delta=p["delta"])
    rows = []
    for _, h in hist.iterrows():
        setting = f"target eps={h['target_epsilon']:g}, z={h['z']:.4g}"
        rows.append(
            dict(
                setting=setting,
                accountant="Thm 5 + Lemma 1 (paper)",
                library="closed form",
                library_version="paper",
                noise_multiplier=h["z"],
                epsilon=h["epsilon_thm5"],
                optimal_order=h["lambda"],
                note="noise ratio z = sigma_q/C solved from the target",
                **common,
            )
        )
        rows.append(
            dict(
                setting=setting,
                accountant=lib["accountant"],
                **library_columns(lib),
                noise_multiplier=h["z"],
                epsilon=h["epsilon_library"],
                optimal_order=h["library_order"],
                note="same mechanism, paper's sensitivity (eq. 59)",
                **common,
            )
        )
        if "z_library" in h:
            rows.append(
                dict(
                    setting=f"target eps={h['target_epsilon']:g}, z={h['z_library']:.4g}",
                    accountant=lib["accountant"],
                    **library_columns(lib),
                    noise_multiplier=h["z_library"],
                    epsilon=h["target_epsilon"],
                    optimal_order=math.nan,
                    note="noise ratio calibrated with the library for the target",
                    **common,
                )
            )
        if "epsilon_library_triangle" in h:
            rows.append(
                dict(
                    setting=setting,
                    accountant=lib["accountant"],
                    **library_columns(lib),
                    noise_multiplier=h["z"],
                    epsilon=h["epsilon_library_triangle"],
                    optimal_order=math.nan,
                    note="same mechanism, triangle-inequality sensitivity",
                    **common,
                )
            )
    return rows


def ldp_rows(exp, run: dict, hist) -> list[dict]:
    """Per eps0 of Thm 2.2: the epsilon the library certifies for the noise the theorem prescribes."""
    lib = library_columns(run["accountant"]["library"])
    return [
        dict(
            setting=f"eps0={h['eps0']:g}",
            accountant=h["accountant"],
            **lib,
            noise_multiplier=h["noise_multiplier"],
            sampling_rate=1.0,
            rounds=1,
            delta=exp.params["delta"],
            epsilon=h["epsilon_library"],
            optimal_order=math.nan,
            note=f"Thm 2.2 claims eps0 = {h['eps0']:g} for this noise",
        )
        for _, h in hist.iterrows()
    ]
