"""FedHDP / DP-FedAvg privacy (Aldaghri et al.): the moments accountant over T rounds, and TFF's effective noise.

Sec. 5.1: "moments accountant (Abadi et al., 2016)" computed with TensorFlow Privacy, once per privacy group, over
T rounds, at one delta; the paper prints epsilon but no formula. The mechanism is the Poisson-subsampled Gaussian
(client rate q, noise multiplier z on the clipped sum), so the printed epsilons are the RDP accountant's (current
TF-Privacy = dp-accounting's RdpAccountant, improved conversion) on the TF-Privacy order grid. epsilons() returns
them under every accountant of fedrepro.privacy, so the classic conversion (pre-2020 TF-Privacy) and the tighter
PLD can be set beside the printed value.

Table 7 lists an "effective noise multiplier": TFF's adaptive-clipping convention (Andrew et al. 2021), where the
clipped-count sum gets its own noise sigma_b and the two releases compose into one Gaussian with

    z_eff^-2 = z_Delta^-2 + (2 sigma_b)^-2                  (docs/notes/fedhdp.md, section 3)

(the count has sensitivity 1/2 after TFF's centring, hence 2 sigma_b). TFF sets sigma_b = 0.05 x expected clients
per round by default and requires z_eff < 2 sigma_b. The accountant runs with z_eff.
"""

from __future__ import annotations

from collections.abc import Iterable

from fedrepro.errors import PrivacyError
from fedrepro.privacy.accountant import ACCOUNTANTS, compute_epsilon
from fedrepro.privacy.result import EpsilonResult
from fedrepro.privacy.validation import check_positive

TFF_SIGMA_B_FRACTION = 0.05  # TFF default: clipped-count noise std = 0.05 x expected clients per round


def epsilons(
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    accountants: Iterable[str] = ACCOUNTANTS,
    **kwargs,
) -> dict[str, EpsilonResult]:
    """epsilon of one privacy group after `rounds` rounds, under each accountant."""
    return {a: compute_epsilon(noise_multiplier, sampling_rate, rounds, delta, a, **kwargs) for a in accountants}


def effective_noise_multiplier(z_delta: float, sigma_b: float) -> float:
    """z_eff from the update's noise multiplier z_Delta and the clipped-count noise std sigma_b."""
    z = check_positive(z_delta, "z_delta")
    s = check_positive(sigma_b, "sigma_b")
    return (z**-2 + (2 * s) ** -2) ** -0.5


def update_noise_multiplier(z_eff: float, sigma_b: float) -> float:
    """Inverse: z_Delta for a target z_eff; requires z_eff < 2 sigma_b (TFF's own check)."""
    z = check_positive(z_eff, "z_eff")
    s = check_positive(sigma_b, "sigma_b")
    if not z < 2 * s:
        raise PrivacyError(f"z_eff must be < 2*sigma_b, got z_eff={z_eff!r}, sigma_b={sigma_b!r}")
    return (z**-2 - (2 * s) ** -2) ** -0.5


def tff_default_sigma_b(clients_per_round: float) -> float:
    """TFF's default clipped-count noise std: 0.05 x expected clients per round."""
    return TFF_SIGMA_B_FRACTION * check_positive(clients_per_round, "clients_per_round")
