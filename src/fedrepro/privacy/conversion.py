"""The classic RDP -> (epsilon, delta) conversion (Mironov 2017, Prop. 3), applied to a library-computed RDP curve.

    epsilon = min_alpha  RDP(alpha) + log(1/delta) / (alpha - 1)

This is the conversion TF-Privacy used before 2020 (``get_privacy_spent`` with ``rdp - log(delta)/(orders-1)``).
The improved conversion (Balle et al. 2020 Thm 21 / Canonne, Kamath, Steinke 2020; what dp-accounting's
RdpAccountant and opacus apply) subtracts log(alpha)/(alpha-1) - log(1 - 1/alpha) > 0 at every order, so the
classic epsilon is never smaller; that term is the only difference between the two.
"""

from __future__ import annotations

import numpy as np


def classic_epsilon(orders, rdp, delta: float) -> tuple[float, float | None]:
    """(epsilon, optimal order) by the classic conversion; orders with infinite/NaN RDP are skipped."""
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    eps = r + np.log(1.0 / delta) / (a - 1.0)
    eps = np.where(np.isfinite(eps), eps, np.inf)
    i = int(np.argmin(eps))
    if not np.isfinite(eps[i]):
        return float("inf"), None
    return max(0.0, float(eps[i])), float(a[i])
