"""A per-user histogram estimator of one's own, for the histograms paper's synthetic protocol (README: Compare your
method): each user's empirical histogram shrunk towards the population's mean histogram,

    estimate_u = lam * smooth(mean histogram) + (1 - lam) * x_u / m,

with the mean released by the protocol (``release.centers``: exact non-privately, Algorithm 3 at the paper's per-step
budget privately). With ``lam`` the protocol's, this is the paper's FedAvg + FT row computed through the method
interface (tests/compare/test_histograms_method.py checks it equals that row without privacy); ``lam`` may be set with
``--method-arg lam=0.5``.

    python -m fedrepro compare examples/histogram_shrinkage.py:Shrinkage --experiment histograms.x_synthetic \
        --scale quick --out /tmp/shrink
"""

from __future__ import annotations

import numpy as np

from fedrepro.papers.histograms.estimator import HistogramEstimator, Release, Users


class Shrinkage(HistogramEstimator):
    name = "shrinkage"

    def __init__(self, lam: float | None = None):
        self.lam = lam  # None: the protocol's lambda

    def estimate(self, users: Users, rng: np.random.Generator, release: Release) -> np.ndarray:
        lam = users.settings["lam"] if self.lam is None else self.lam
        mean = release.centers(np.zeros(len(users.S), dtype=np.int64), 1)[0]  # one group: every user
        floor = users.settings["center_floor"]
        mean = np.maximum(mean, floor)
        mean = mean / mean.sum()  # smoothed as the protocol smooths every center it evaluates
        return lam * mean[None, :] + (1 - lam) * np.asarray(users.S, dtype=np.float64)
