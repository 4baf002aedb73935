"""Algorithm 2: Non-private Histogram Clustering (KL Lloyd), objective Eq. (3): min_P sum_u min_k KL(Q^_u || P_k).

Consistent reading of the printed steps (docs/notes/histograms.md §2.6, G3): P^(0) from Algorithm 1; C^(0) = argmin_k
KL(Q^_u ||
P_k^(0)); t = 0; while t < T: P^(t+1) = re-center(S, C^(t)) (the cluster mean, or uniform for an empty cluster;
Algorithm 3 in the private version), t = t + 1, C^(t) = argmin_k KL(Q^_u || P_k^(t)). Ties go to the lowest index.
Non-privately the loop stops early once the assignments no longer change (the centers are then a fixed point);
privately it always runs T iterations (``stop_when_stable=False``).

The cluster mean is the exact minimiser of a cluster's sum of KL(Q^_u || P) (Lemma 2.1 / Bregman centroid), so
without noise the objective never increases (docs/notes/histograms.md C2): assignments use log(max(P, floor)), which
equals the
unsmoothed KL wherever that is finite.

``keep`` (App. C, :mod:`fedrepro.papers.histograms.dimred`): assignments use only the kept tokens (user and center
restricted to them and renormalised), while re-centering stays on the full vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedrepro.papers.histograms.kl import cross_log, cross_log_at, neg_entropy, safe_log
from fedrepro.papers.histograms.private_centering import cluster_sums

Recenter = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


def mean_recenter(S: np.ndarray, labels: np.ndarray, K: int) -> np.ndarray:
    """Step 5: cluster means; an empty cluster becomes the uniform histogram."""
    counts = np.bincount(labels, minlength=K)
    sums = cluster_sums(S, labels, K)
    P = np.full(sums.shape, 1.0 / S.shape[1])
    nz = counts > 0
    P[nz] = sums[nz] / counts[nz, None]
    return P


@dataclass
class LloydResult:
    centers: np.ndarray  # (K, d)
    labels: np.ndarray  # (n,)
    objective: list[float]  # (1/n) sum_u min_k KL(Q^_u || P_k^(t)) for t = 0..iterations
    changed: list[int]  # users whose assignment changed at each iteration
    iterations: int
    trace: list = field(default_factory=list)  # per-iteration values of ``on_iteration`` (if given)


class Assigner:
    """argmin_k KL(Q^_u || P_k) over the full or the kept vocabulary, with the objective value (float64)."""

    def __init__(self, S: np.ndarray, floor: float, keep: np.ndarray | None = None):
        self.floor, self.keep = floor, keep
        if keep is None:
            self.X = S
        else:
            X = np.asarray(S[:, keep], dtype=S.dtype)
            mass = X.sum(axis=1, keepdims=True)
            self.X = X / np.where(mass > 0, mass, 1)  # a user with no kept token has an all-zero row (ties -> 0)
        self.h = neg_entropy(self.X)

    def __call__(self, P: np.ndarray) -> tuple[np.ndarray, float]:
        if self.keep is not None:
            P = P[:, self.keep]
            P = P / P.sum(axis=1, keepdims=True)
        logP = safe_log(P, self.floor)
        lab = np.argmax(cross_log(self.X, logP), axis=1)
        # the assignment may use S's dtype; the objective is summed in float64, so that a change near convergence is
        # not below its rounding
        obj = float(np.mean(self.h - cross_log_at(self.X, logP, lab)))
        return lab, obj


def lloyd(
    S: np.ndarray,
    P0: np.ndarray,
    T: int,
    floor: float,
    *,
    recenter: Recenter = mean_recenter,
    stop_when_stable: bool = True,
    keep: np.ndarray | None = None,
    on_iteration: Callable[[int, np.ndarray, np.ndarray], object] | None = None,
) -> LloydResult:
    K = P0.shape[0]
    assigner = Assigner(S, floor, keep)
    labels, obj = assigner(P0)
    res = LloydResult(P0, labels, [obj], [S.shape[0]], 0)
    if on_iteration is not None:
        res.trace.append(on_iteration(0, P0, labels))
    P = P0
    for t in range(1, T + 1):
        P = recenter(S, labels, K)
        new, obj = assigner(P)
        changed = int(np.count_nonzero(new != labels))
        labels = new
        res.objective.append(obj)
        res.changed.append(changed)
        res.iterations = t
        if on_iteration is not None:
            res.trace.append(on_iteration(t, P, labels))
        if stop_when_stable and changed == 0:
            break
    res.centers, res.labels = P, labels
    return res
