"""What the FedHDP theory kinds share: the grid of a swept parameter and the family-wise z.

Closed forms live in fedrepro.papers.fedhdp; every Monte Carlo curve of these kinds is compared with its closed form
at every grid point (fedrepro.experiments.montecarlo), within z standard errors where z controls the family-wise
error of all the comparisons of a run (Bonferroni, ``fwer``), so a correct implementation fails a run with
probability below ``fwer``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from fedrepro.experiments.params import INT2

GRID = {
    "type": "object",
    "additionalProperties": False,
    "required": ["start", "stop", "num"],
    "properties": {
        "start": {"type": "number"},
        "stop": {"type": "number"},
        "num": INT2,
        "log": {"type": "boolean", "default": False},  # log-spaced points
    },
}
FWER = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}


def grid_points(g: dict) -> np.ndarray:
    """The ``num`` points from ``start`` to ``stop`` of a GRID parameter, log-spaced when ``log``."""
    if g["log"]:
        return np.logspace(math.log10(g["start"]), math.log10(g["stop"]), g["num"])
    return np.linspace(g["start"], g["stop"], g["num"])


def family_z(fwer: float, comparisons: int) -> float:
    """The two-sided z of each of ``comparisons`` comparisons that keeps their family-wise error at ``fwer``."""
    return float(norm.isf(fwer / (2 * comparisons)))
