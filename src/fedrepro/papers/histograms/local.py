"""Local: each user's own histogram from its train tokens (docs/notes/histograms.md §2.1). Without smoothing KL(Q_u ||
Q^_u) is
infinite as soon as a token of Q_u has no train count; the paper's finite 5.093 implies some smoothing, which it
does not state (G1): additive smoothing (x + beta) / (m + d beta), ``beta`` a named parameter."""

from __future__ import annotations

import numpy as np


def local_estimate(counts: np.ndarray, beta: float, dtype=np.float64) -> np.ndarray:
    """(n, d) (x_u + beta) / (m_u + d beta)."""
    x = np.asarray(counts, dtype=dtype) + beta
    return x / x.sum(axis=1, keepdims=True)
