"""Noise calibration: the smallest noise multiplier whose epsilon at (steps, q, delta) is at most a target.

epsilon is decreasing in the noise multiplier sigma for every accountant, so a monotone search applies: bracket
sigma geometrically from sigma0 = 1 (doubling/halving until epsilon crosses the target), then Brent's method on
log sigma. Tolerance: the returned sigma satisfies epsilon(sigma) <= target and lies within ``rtol`` (relative,
default 1e-6) above the crossing sigma*, so the round trip epsilon(calibrate(eps)) is within
|d eps / d log sigma| * rtol of eps (below it). This is the same procedure as dp_accounting's
calibrate_dp_mechanism (bracket + brentq + step to the safe side), applied uniformly to all four accountants,
including those that are not dp-accounting PrivacyAccountants (rdp_classic, opacus_rdp).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fedrepro.privacy.accountant import DEFAULT_PLD_DISCRETIZATION, compute_epsilon
from fedrepro.privacy.result import EpsilonResult
from fedrepro.privacy.solve import solve_monotone
from fedrepro.privacy.validation import check_delta, check_positive, check_sampling_rate, check_steps

DEFAULT_RTOL = 1e-6


@dataclass(frozen=True)
class Calibration:
    """A calibrated noise multiplier and the epsilon it achieves (with the accountant's provenance)."""

    noise_multiplier: float
    target_epsilon: float
    achieved: EpsilonResult
    rtol: float
    bracket: tuple[float, float]
    evaluations: int

    def to_dict(self) -> dict:
        return {
            "noise_multiplier": self.noise_multiplier,
            "target_epsilon": self.target_epsilon,
            "rtol": self.rtol,
            "bracket": list(self.bracket),
            "evaluations": self.evaluations,
            "achieved": self.achieved.to_dict(),
        }


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    steps: int,
    sampling_rate: float,
    accountant: str = "rdp",
    *,
    rtol: float = DEFAULT_RTOL,
    orders: Sequence[float] | None = None,
    sampling: str = "poisson",
    population: int | None = None,
    pld_discretization: float = DEFAULT_PLD_DISCRETIZATION,
) -> Calibration:
    """Noise multiplier sigma with epsilon(sigma) <= target_epsilon, within rtol of the smallest such sigma."""
    target = check_positive(target_epsilon, "target_epsilon")
    check_delta(delta)
    check_steps(steps)
    check_sampling_rate(sampling_rate)
    check_positive(rtol, "rtol")
    kw = dict(orders=orders, sampling=sampling, population=population, pld_discretization=pld_discretization)

    def eps(sigma: float) -> float:
        return compute_epsilon(sigma, sampling_rate, steps, delta, accountant, **kw).epsilon

    sigma, bracket, n = solve_monotone(eps, target, increasing=False, rtol=rtol, side="le", name="noise_multiplier")
    achieved = compute_epsilon(sigma, sampling_rate, steps, delta, accountant, **kw)
    return Calibration(sigma, target, achieved, rtol, bracket, n + 1)
