"""Algorithm 1: Cluster Initialization (k-means++-style in KL), with the fixes the notes list (G2), documented:

* index: the printed min runs over j' in [k] right after k <- k + 1, when P_k is not yet chosen; the min here runs
  over the k - 1 centers already picked;
* direction: the printed KL(P_j' || Q^_u) (center || user) is the reverse of Eq. (3) and infinite for sparse
  histograms; the score here is KL(Q^_u || P_j') (user || center, as Eq. (3) and Bregman k-means++), with the
  center used as log(max(P, floor)) (:mod:`fedrepro.papers.histograms.kl`);
* sampling: Prob(j = u) proportional to exp(tau * min_j' KL(Q^_u || P_j')), computed as a softmax in log space.

tau = 0 is uniform sampling; tau -> infinity picks the most under-fit user. The centers are raw user rows, so this
step is not private: the private pipelines run it on the public validation proxy (docs/notes/histograms.md G7).
"""

from __future__ import annotations

import numpy as np

from fedrepro.papers.histograms.kl import cross_log, neg_entropy, safe_log


def sampling_probabilities(score: np.ndarray, tau: float) -> np.ndarray:
    """softmax(tau * score), stable in log space."""
    z = tau * score
    z = z - z.max()
    w = np.exp(z)
    return w / w.sum()


def kl_init(S: np.ndarray, K: int, tau: float, floor: float, rng: np.random.Generator, return_index: bool = False):
    """(K, d) initial centers (rows of S, float64); with ``return_index`` also the chosen row indices."""
    n = S.shape[0]
    h = neg_entropy(S)
    idx = [int(rng.integers(n))]
    best = np.full(n, np.inf)  # min over chosen centers of KL(Q^_u || P_j')
    while len(idx) < K:
        kl_new = h - cross_log(S, safe_log(S[idx[-1]][None, :], floor))[:, 0]
        np.minimum(best, kl_new, out=best)
        idx.append(int(rng.choice(n, p=sampling_probabilities(best, tau))))
    centers = np.asarray(S[idx], dtype=np.float64)
    return (centers, np.asarray(idx)) if return_index else centers
