"""A Monte Carlo estimate against its closed form, within z standard errors: the one check the simulation kinds make
of their own arithmetic (AdaPeD's Gaussian, Bernoulli and linear-regression estimators, FedHDP's server variance
and opt-out curves)."""

from __future__ import annotations

import math

import numpy as np

from fedrepro.experiments import Check


def matches_closed_form(
    name: str, mc, expected, z: float, *, se=None, what: str = "closed form", floor: float = 1e-300
) -> Check:
    """Whether Monte Carlo agrees with a closed form within ``z`` standard errors.

    Draws (``se`` None): ``mc`` holds one value per draw; the estimate is their mean and its standard error is that
    of the mean (ddof = 1). ``expected`` is the closed form: one number, or one per draw (its conditional
    expectation given the draw's own data, e.g. a client's design), when the standard error is that of the paired
    differences. The check's value, expected and tolerance are the two means and z SE.

    Grid (``se`` given): ``mc``, ``se`` and ``expected`` are estimates, their standard errors and the closed form at
    each grid point; every point must lie within z of its SE (SE floored at ``floor``). The check's value is the
    largest |diff| / SE, against 0 with tolerance z.
    """
    if se is None:
        mc = np.asarray(mc, dtype=float)
        value, exact = float(mc.mean()), float(np.mean(expected))
        spread = mc - expected if np.ndim(expected) else mc  # a per-draw closed form: the paired differences' spread
        sd = float(spread.std(ddof=1) / math.sqrt(spread.size))
        return Check(
            abs(value - exact) <= z * sd,
            f"{name}: MC {value:.6g} vs {what} {exact:.6g} (|diff| {abs(value - exact):.3g}, {z} SE = {z * sd:.3g})",
            value,
            exact,
            z * sd,
        )
    mc, expected = np.asarray(mc, dtype=float), np.asarray(expected, dtype=float)
    zs = np.abs(mc - expected) / np.maximum(np.asarray(se, dtype=float), floor)
    worst = int(np.argmax(zs))
    return Check(
        bool(np.all(zs <= z)),
        f"{name}: Monte Carlo vs {what} at {zs.size} grid points, max |diff|/SE = {zs[worst]:.2f} "
        f"(MC {mc.flat[worst]:.6g} vs {expected.flat[worst]:.6g}), threshold z = {z:.2f}",
        float(zs[worst]),
        0.0,
        z,
    )
