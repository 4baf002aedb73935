"""A per-user histogram estimator from outside the package, under the histograms paper's synthetic protocol
(``python -m fedrepro compare FILE:CLASS --experiment histograms.x_synthetic``): the same users, tokens, validation
proxy, privacy budget and metric as the paper's nine methods of the same seed, as one more row.

A method is a subclass of :class:`HistogramEstimator` with one method, ``estimate(users, rng, release)`` -> (n, d)
per-user histograms (rows summing to 1; a zero where a user's true histogram is positive makes its KL infinite, and
the row fails). What it may use:

    users.counts (n, d) int    each user's train token counts (the user's own data: its own estimate may use it)
    users.S (n, d)             the same as histograms x_u / m
    users.validation (n_val, d)  the public validation proxy (Alg. 1's seeds and DimRed use it in both regimes)
    users.settings             the protocol's values: K, T, lam, center_floor, local_beta (a method may reuse them)
    release.centers(labels, K) (K, d) the mean histogram of each group of users, the ONE way a statistic of several
                               users reaches the server: exact in the non-private regime; in the private regime
                               Algorithm 3 at the per-step budget of Theorem 3.1 (clip c, Laplace count, Gaussian sum),
                               at most ``release.calls_left`` = T times (one more is refused: the row fails)

Privacy by construction as far as Python allows: every cross-user statistic that goes through ``release`` is
accounted as one of Alg. 3's T steps (the budget the paper's private rows spend, ``release.budget``); a method that
computes one otherwise (from ``users.S`` directly) is outside the guarantee, which the table states for every row of
an outside estimator (it cannot be checked).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedrepro.errors import ConfigError


@dataclass(frozen=True)
class Users:
    counts: np.ndarray
    S: np.ndarray
    validation: np.ndarray
    settings: dict[str, Any]


@dataclass
class Release:
    """The protocol's release of per-group mean histograms (see the module docstring)."""

    S: np.ndarray
    private: bool
    T: int
    floor: float
    rng: np.random.Generator
    budget: dict[str, float] = field(default_factory=dict)  # per-step and total epsilon and delta (private)
    clip: float | None = None
    s: float = 1.0
    calls: int = 0

    @property
    def calls_left(self) -> int:
        return self.T - self.calls if self.private else 10**9

    def centers(self, labels: np.ndarray, K: int) -> np.ndarray:
        """(K, d): non-privately the plain mean histogram of each group (Lloyd's recentering, as the paper's
        non-private rows; unsmoothed, an empty group the uniform histogram), privately Algorithm 3 (floored)."""
        from fedrepro.papers.histograms.lloyd import mean_recenter
        from fedrepro.papers.histograms.private_centering import private_centering

        labels = np.asarray(labels, dtype=np.int64)
        if labels.shape != (self.S.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() >= K)):
            raise ValueError(f"release.centers: labels must be (n,) = ({self.S.shape[0]},) cluster ids in [0, {K})")
        if self.private and self.calls >= self.T:
            raise RuntimeError(
                f"release.centers called more than T = {self.T} times: the private budget covers T steps of Alg. 3"
            )
        self.calls += 1
        if not self.private:
            return mean_recenter(self.S, labels, K)
        return private_centering(
            self.S,
            labels,
            K,
            self.budget.get("per_step_epsilon", 1.0),
            self.budget.get("per_step_delta", 0.0),
            self.clip,
            self.s,
            self.floor,
            self.rng,
        )


class HistogramEstimator(ABC):
    """A method from outside the package for the histograms paper's protocols (module docstring)."""

    name: ClassVar[str] = ""

    @abstractmethod
    def estimate(self, users: Users, rng: np.random.Generator, release: Release) -> np.ndarray:
        """(n, d) per-user estimated histograms."""


_REGISTERED: dict[str, type[HistogramEstimator]] = {}


def register_external(cls: type[HistogramEstimator]) -> str:
    """Make ``cls`` (loaded from a user's file by compare) buildable by its name in this process."""
    from fedrepro.papers.histograms.pipeline import METHODS

    name = cls.__dict__.get("name") or cls.__name__.lower()
    if name in METHODS:
        raise ConfigError(f"{cls.__name__}.name = {name!r} is one of the paper's methods; give the class another name")
    _REGISTERED[name] = cls
    return name


def get_estimator(name: str) -> type[HistogramEstimator]:
    if name not in _REGISTERED:
        raise ConfigError(f"estimator {name!r} is not registered (python -m fedrepro compare FILE:CLASS registers it)")
    return _REGISTERED[name]
