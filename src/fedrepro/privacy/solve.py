"""Monotone root finding on (0, inf): geometric bracketing, then Brent's method on log x.

Used to calibrate noise multipliers (epsilon decreasing in sigma) and to invert the papers' closed forms
(epsilon increasing in an RDP slope or in a per-step epsilon). Working on u = log x makes the tolerance relative:
the root is located to |x - x*| <= rtol * x*. The function may return +inf or 0 (e.g. epsilon at sigma -> 0 or at
huge sigma); values are compared through clip(log f - log target), which keeps the sign and monotonicity.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy import optimize

from fedrepro.errors import PrivacyError

_CLIP = 1e6
RTOL = 1e-9  # default relative precision of a root (a closed form's round trip is checked against it)


def solve_monotone(
    f: Callable[[float], float],
    target: float,
    *,
    increasing: bool,
    x0: float = 1.0,
    rtol: float = RTOL,
    side: str | None = None,
    max_expansions: int = 200,
    name: str = "x",
) -> tuple[float, tuple[float, float], int]:
    """x > 0 with f(x) = target for a monotone f; returns (x, bracket, evaluations).

    side: None returns Brent's root; "le" returns an x with f(x) <= target, "ge" one with f(x) >= target, each
    within rtol (relative) of the crossing. Raises PrivacyError when no bracket exists in (x0 2^-200, x0 2^200).
    """
    if not target > 0:
        raise PrivacyError(f"target must be positive, got target={target!r}")
    n = 0
    log_t = math.log(target)

    def g(u: float) -> float:
        nonlocal n
        n += 1
        v = f(math.exp(u))
        if v <= 0:
            return -_CLIP
        return max(-_CLIP, min(_CLIP, math.log(v) - log_t))

    a = math.log(x0)
    ga = g(a)
    if ga == 0:
        return x0, (x0, x0), n
    # Move towards the root: for increasing f, up when f(x0) < target.
    direction = 1.0 if (ga < 0) == increasing else -1.0
    step, b, gb = math.log(2.0), a, ga
    for _ in range(max_expansions):
        a, ga = b, gb
        b = a + direction * step
        gb = g(b)
        if gb == 0 or (ga < 0) != (gb < 0):
            break
    else:
        raise PrivacyError(
            f"no {name} in ({x0 * 2.0**-max_expansions:g}, {x0 * 2.0**max_expansions:g}) reaches target {target!r}"
        )
    lo, hi = sorted((a, b))
    if gb == 0:
        u = b
    else:
        u = optimize.brentq(g, lo, hi, xtol=rtol)
    if side is not None:
        if side not in ("le", "ge"):
            raise ValueError(f"side must be None, 'le' or 'ge', got {side!r}")
        # Step towards the safe side of the crossing, by rtol at a time (Brent's root is within rtol of it).
        up = (side == "le") != increasing
        for _ in range(64):
            gu = g(u)
            if (gu <= 0) if side == "le" else (gu >= 0):
                break
            u += rtol if up else -rtol
        else:
            raise PrivacyError(f"could not step {name} to the {side} side of the target {target!r}")
    return math.exp(u), (math.exp(lo), math.exp(hi)), n
