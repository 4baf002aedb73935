"""Private personalized histograms (Setlur et al.): Theorem 3.1, eq. (4) and the classical Gaussian mechanism.

Theorem 3.1: for 1 > eps, delta > 0, Algorithm 3 (one re-centring) is (3 eps, 2 delta) user-level DP (Laplace
count: eps; b1: Gaussian + Laplace, (2 eps, delta) by basic composition; b2: (eps, delta); App. B). Run for T
iterations inside Algorithm 2 it is (eps', delta')-DP with, as the replication notes restore the garbled print,

    eps'   = 3 eps sqrt(2 T ln(1/delta)) + T 3 eps (e^{3 eps} - 1)/(e^{3 eps} + 1),     delta' = (2T + 1) delta,

i.e. eq. (4) (advanced composition, Kairouz et al. 2015 form; the printed square root wrongly covers both terms)

    eps = sqrt(2 ln(1/delta~) sum_m eps_m^2) + sum_m eps_m (e^{eps_m} - 1)/(e^{eps_m} + 1),
    delta = delta~ + sum_m delta_m

with eps_m = 3 eps, delta_m = 2 delta and slack delta~ = delta. Algorithm 3 line 1 sets the classical Gaussian
mechanism's sigma = sqrt(2 ln(1.25/delta)) / eps (the paper cites Balle & Wang 2018 Thm 1 for it; Dwork & Roth
Thm A.1; valid for eps < 1), applied to L2
sensitivity 1 (b1) and c (b2, noise std c sigma).

per_step_budget() inverts the composition for a total budget under the three readings of delta (docs/notes/histograms.md
G6):
``total`` (delta' is the total: per-step delta = delta'/(2T+1)), ``per_step`` (delta is Alg. 3's delta: total
(2T+1) delta), ``basic`` (basic composition, 3 eps T = eps' and 2 T delta = delta').
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from fedrepro.errors import PrivacyError
from fedrepro.privacy.solve import solve_monotone
from fedrepro.privacy.validation import check_delta, check_positive, check_steps

READINGS = ("total", "per_step", "basic")
# what a private run's metrics.json names as its accountant (the paper's closed forms; no library applies)
ACCOUNTANT = {
    "name": "closed form: Setlur et al. Thm 3.1 + advanced composition (eq. 4) for Alg. 3's per-step budget; "
    "classical Gaussian mechanism",
    "version": "paper",
}


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classical Gaussian mechanism: sigma = sensitivity sqrt(2 ln(1.25/delta)) / eps (Alg. 3 line 1)."""
    e = check_positive(epsilon, "epsilon")
    d = check_delta(delta)
    return check_positive(sensitivity, "sensitivity") * math.sqrt(2 * math.log(1.25 / d)) / e


def alg3_guarantee(epsilon: float, delta: float) -> tuple[float, float]:
    """Theorem 3.1: Algorithm 3 is (3 eps, 2 delta)-DP, for 0 < eps < 1 and 0 < delta < 1."""
    e = check_positive(epsilon, "epsilon")
    if not e < 1:
        raise PrivacyError(f"epsilon must be < 1 for Theorem 3.1, got epsilon={epsilon!r}")
    return 3 * e, 2 * check_delta(delta)


def advanced_composition(epsilons: Sequence[float], deltas: Sequence[float], delta_slack: float) -> tuple[float, float]:
    """Eq. (4), heterogeneous advanced composition: (eps, delta) of the composed mechanisms."""
    if len(epsilons) != len(deltas) or not epsilons:
        raise PrivacyError(
            f"epsilons and deltas must be non-empty and of equal length, got {len(epsilons)} and {len(deltas)}"
        )
    es = [check_positive(e, "epsilon_m") for e in epsilons]
    ds = [float(d) for d in deltas]
    if any(not 0 <= d < 1 for d in ds):
        raise PrivacyError(f"each delta_m must be in [0, 1), got deltas={list(deltas)!r}")
    s = check_delta(delta_slack, "delta_slack")
    eps = math.sqrt(2 * math.log(1 / s) * sum(e * e for e in es)) + sum(e * math.tanh(e / 2) for e in es)
    return eps, s + sum(ds)


def basic_composition(epsilons: Sequence[float], deltas: Sequence[float]) -> tuple[float, float]:
    """Basic composition: (sum eps_m, sum delta_m)."""
    return float(sum(epsilons)), float(sum(deltas))


def thm31_total(epsilon: float, delta: float, T: int) -> tuple[float, float]:
    """(eps', delta') of Algorithm 2 with Algorithm 3 for T iterations (Theorem 3.1 as restored)."""
    T = check_steps(T, "T")
    e3, d2 = alg3_guarantee(epsilon, delta)
    x = e3
    eps = x * math.sqrt(2 * T * math.log(1 / delta)) + T * x * (math.exp(x) - 1) / (math.exp(x) + 1)
    return eps, (2 * T + 1) * delta


@dataclass(frozen=True)
class PerStepBudget:
    """Alg. 3's (eps, delta) for a total budget under one reading; sigma = sqrt(2 ln(1.25/delta))/eps."""

    reading: str
    per_step_epsilon: float  # Alg. 3's eps (each of its three mechanisms)
    per_iteration_epsilon: float  # 3 eps: one iteration (Thm 3.1)
    per_step_delta: float  # Alg. 3's delta
    sigma: float
    total_epsilon: float  # the composition evaluated at per_step_epsilon (round trip)
    total_delta: float

    def to_dict(self) -> dict:
        return asdict(self)


def per_step_budget(total_epsilon: float, delta: float, T: int, reading: str = "total") -> PerStepBudget:
    """Invert the T-iteration composition for Alg. 3's eps (monotone root finding, relative tolerance 1e-13)."""
    target = check_positive(total_epsilon, "total_epsilon")
    d = check_delta(delta)
    T = check_steps(T, "T")
    if reading not in READINGS:
        raise PrivacyError(f"reading must be one of {', '.join(READINGS)}, got reading={reading!r}")
    if reading == "basic":
        step_delta = d / (2 * T)
        eps = target / (3 * T)
        tot_eps, tot_delta = basic_composition([3 * eps] * T, [2 * step_delta] * T)
    else:
        step_delta = d / (2 * T + 1) if reading == "total" else d
        eps, _, _ = solve_monotone(
            lambda e: thm31_total(min(e, 1 - 1e-15), step_delta, T)[0],
            target,
            increasing=True,
            x0=0.1,
            rtol=1e-13,
            name="per-step epsilon",
        )
        tot_eps, tot_delta = thm31_total(eps, step_delta, T)
    if not eps < 1:
        raise PrivacyError(f"total_epsilon={total_epsilon!r} needs a per-step epsilon >= 1, outside Theorem 3.1")
    return PerStepBudget(reading, eps, 3 * eps, step_delta, gaussian_sigma(eps, step_delta), tot_eps, tot_delta)


# ------------------------------------------------------------ rows of the privacy stage's epsilon.csv


def thm31_rows(exp, run: dict, hist) -> list[dict]:
    """Per reading of the budget: Thm 3.1 + eq. (4)'s total (epsilon, delta) and the per-step budget behind it."""
    return [
        dict(
            setting=f"reading={h['reading']}",
            accountant="Thm 3.1 + eq. (4) (paper)",
            library="closed form",
            library_version="paper",
            noise_multiplier=h["sigma"],
            sampling_rate=1.0,
            rounds=exp.params["T"],
            delta=h["total_delta"],
            epsilon=h["total_epsilon"],
            optimal_order=math.nan,
            note=f"per-step eps={h['per_step_epsilon']:.6g}, per-step delta={h['per_step_delta']:.6g}; "
            "noise_multiplier column = Gaussian sigma of Alg. 3",
        )
        for _, h in hist.iterrows()
    ]
