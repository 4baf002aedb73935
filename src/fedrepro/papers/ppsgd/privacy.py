"""PPSGD privacy (Bietti et al., ICML 2022): Theorems 4.1 and 5.1 as written, and the experiments' epsilon curve.

Theorem 4.1 (Alg. 1, every user every round, n rounds, N users): (eps, delta)-JDP in the billboard model if

    sigma_zeta >= c C sqrt(n log(1/delta)) / (N eps)                                        (eq. 4)

(the proof, App. B.1, writes G for C and an L2 sensitivity "alpha eta / N" without G). Theorem 5.1 (Alg. 2/3,
client sampling at rate q, T rounds, M = expected sample count normaliser): (eps, delta)-JDP for eps < c1 q^2 T if

    sigma_zeta >= c2 C sqrt(T log(1/delta)) / (M eps)                                       (eq. 12)

The absolute constants c, c1, c2 are not given anywhere in the paper: they are parameters here, default 1, so
these noise scales are *orders of magnitude*, not comparable with any printed number.

The experiments (Sec. 6) report eps per iteration from the "moments accountant ... fixed delta = 1e-4" with
noise std sigma C: the official code steps opacus' RDPAccountant once per round with (noise_multiplier = sigma,
sample_rate = q) and reads get_privacy_spent(delta) (q = 1 synthetic; Q/N = 10/500 = 0.02 StackOverflow,
10/1000 = 0.01 EMNIST). experiment_epsilon_curve() does exactly that (fedrepro.privacy.epsilon_curve with the
opacus_rdp accountant). epsilon depends on (sigma, q, rounds) only, never on alpha, eta or C.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fedrepro.privacy.accountant import epsilon_curve
from fedrepro.privacy.result import EpsilonResult
from fedrepro.privacy.validation import check_delta, check_positive, check_sampling_rate, check_steps


def thm41_noise_std(epsilon: float, delta: float, n: int, N: int, clip: float, c: float = 1.0) -> float:
    """Theorem 4.1's sufficient sigma_zeta = c C sqrt(n log(1/delta)) / (N eps); c unspecified (default 1)."""
    e = check_positive(epsilon, "epsilon")
    d = check_delta(delta)
    return (
        check_positive(c, "c")
        * check_positive(clip, "clip")
        * math.sqrt(check_steps(n, "n") * math.log(1 / d))
        / (check_steps(N, "N") * e)
    )


def thm51_noise_std(epsilon: float, delta: float, T: int, M: float, clip: float, c2: float = 1.0) -> float:
    """Theorem 5.1's sufficient sigma_zeta = c2 C sqrt(T log(1/delta)) / (M eps); c2 unspecified (default 1)."""
    e = check_positive(epsilon, "epsilon")
    d = check_delta(delta)
    return (
        check_positive(c2, "c2")
        * check_positive(clip, "clip")
        * math.sqrt(check_steps(T, "T") * math.log(1 / d))
        / (check_positive(M, "M") * e)
    )


def thm51_applies(epsilon: float, q: float, T: int, c1: float = 1.0) -> bool:
    """Theorem 5.1's range condition eps < c1 q^2 T (c1 unspecified, default 1)."""
    return check_positive(epsilon, "epsilon") < check_positive(c1, "c1") * check_sampling_rate(
        q, "q"
    ) ** 2 * check_steps(T, "T")


def experiment_epsilon_curve(
    noise_multiplier: float, sample_rate: float, iterations: Sequence[int], delta: float
) -> list[EpsilonResult]:
    """eps after each count in `iterations`, opacus RDPAccountant stepped once per round (the paper's code)."""
    return epsilon_curve(noise_multiplier, sample_rate, iterations, delta, "opacus_rdp")


# ------------------------------------------------------------ rows of the privacy stage's epsilon.csv


def theorem_rows(exp, run: dict, hist) -> list[dict]:
    """Per epsilon: the sufficient noise of Thm 4.1 and of Thm 5.1 (constants = 1)."""
    p, rows = exp.params, []
    for _, h in hist.iterrows():
        for thm, col in (("Thm 4.1", "thm41_sigma_zeta"), ("Thm 5.1", "thm51_sigma_zeta")):
            rows.append(
                dict(
                    setting=f"eps={h['epsilon']:g}",
                    accountant=f"{thm} (paper, constants = 1)",
                    library="closed form",
                    library_version="paper",
                    noise_multiplier=h[col],
                    sampling_rate=p["q"],
                    rounds=p["T"],
                    delta=p["delta"],
                    epsilon=h["epsilon"],
                    optimal_order=math.nan,
                    note="noise_multiplier column = sufficient noise std sigma_zeta",
                )
            )
    return rows
