"""Range checks shared by every accountant; each failure raises PrivacyError naming the parameter and its value."""

from __future__ import annotations

import math
from numbers import Integral, Real

from fedrepro.errors import PrivacyError


def _real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise PrivacyError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise PrivacyError(f"{name} must not be NaN, got {value!r}")
    return value


def check_delta(delta, name: str = "delta") -> float:
    """delta must lie in the open interval (0, 1)."""
    d = _real(name, delta)
    if not 0.0 < d < 1.0:
        raise PrivacyError(f"{name} must be in (0, 1), got {name}={delta!r}")
    return d


def check_sampling_rate(q, name: str = "sampling_rate") -> float:
    """The sampling rate q must lie in (0, 1]; q = 1 means every client/example takes part in every step."""
    v = _real(name, q)
    if not 0.0 < v <= 1.0:
        raise PrivacyError(f"{name} must be in (0, 1], got {name}={q!r}")
    return v


def check_positive(value, name: str) -> float:
    """A strictly positive, finite real (noise multiplier, epsilon, sensitivity, ...)."""
    v = _real(name, value)
    if not 0.0 < v < math.inf:
        raise PrivacyError(f"{name} must be a positive finite number, got {name}={value!r}")
    return v


def check_noise_multiplier(sigma, name: str = "noise_multiplier") -> float:
    return check_positive(sigma, name)


def check_steps(steps, name: str = "steps") -> int:
    """A number of composed steps/rounds: an integer >= 1."""
    if isinstance(steps, bool) or not isinstance(steps, Integral):
        if isinstance(steps, Real) and float(steps).is_integer():
            steps = int(steps)
        else:
            raise PrivacyError(f"{name} must be an integer >= 1, got {name}={steps!r}")
    if steps < 1:
        raise PrivacyError(f"{name} must be an integer >= 1, got {name}={steps!r}")
    return int(steps)


def check_orders(orders, name: str = "orders") -> tuple[float, ...]:
    """RDP orders: a non-empty sequence of finite reals > 1, returned sorted and deduplicated."""
    try:
        vals = [_real(name, a) for a in orders]
    except TypeError:
        raise PrivacyError(f"{name} must be a sequence of numbers > 1, got {orders!r}") from None
    if not vals or any(not 1.0 < a < math.inf for a in vals):
        raise PrivacyError(f"{name} must be a non-empty sequence of finite numbers > 1, got {name}={orders!r}")
    return tuple(sorted(set(vals)))
