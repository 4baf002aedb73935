"""Privacy accounting on maintained libraries (dp-accounting, opacus), plus each paper's own closed forms.

Modules (one concern each):
    validation   range checks raising PrivacyError that name the parameter
    orders       the explicit RDP order grid (TF-Privacy / opacus default)
    result       EpsilonResult: epsilon + accountant, library, version, orders/discretisation, optimal order ...
    conversion   the classic RDP -> (eps, delta) conversion on a library RDP curve
    accountant   compute_epsilon / epsilon_curve / gaussian_epsilon / rdp_curve for rdp, rdp_classic, pld, opacus_rdp
    solve        monotone bracketing + Brent root finding on (0, inf)
    calibration  calibrate_noise_multiplier (target eps -> sigma)
    papers/      adaped (Thm 5, Lemma 1), fedhdp (Sec. 5.1 / Table 7), histograms (Thm 3.1, eq. 4),
                 ppsgd (Thms 4.1, 5.1 and the experiments' opacus curve)

opacus (and through it torch) is imported only when the opacus_rdp accountant is used.
"""

from fedrepro.privacy.accountant import (
    ACCOUNTANTS,
    DEFAULT_PLD_DISCRETIZATION,
    SAMPLINGS,
    compute_epsilon,
    epsilon_curve,
    gaussian_epsilon,
    rdp_curve,
)
from fedrepro.privacy.calibration import Calibration, calibrate_noise_multiplier
from fedrepro.privacy.conversion import classic_epsilon
from fedrepro.privacy.orders import DEFAULT_ORDERS, EXTENDED_ORDERS, INTEGER_ORDERS
from fedrepro.privacy.result import EpsilonResult

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ORDERS",
    "DEFAULT_PLD_DISCRETIZATION",
    "EXTENDED_ORDERS",
    "INTEGER_ORDERS",
    "SAMPLINGS",
    "Calibration",
    "EpsilonResult",
    "calibrate_noise_multiplier",
    "classic_epsilon",
    "compute_epsilon",
    "epsilon_curve",
    "gaussian_epsilon",
    "rdp_curve",
]
