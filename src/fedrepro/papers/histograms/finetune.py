"""Fine-tuning (Sec. 2): FT_lambda(Q, Q^_u) = lambda Q + (1 - lambda) Q^_u, at no privacy cost (runs locally).
With the true center and lambda* = alpha / (alpha + m) it is the Bayes-optimal estimator (Lemma 2.2: the posterior
Dir(alpha P + m Q^_u) has this mean)."""

from __future__ import annotations

import numpy as np


def finetune(center_rows: np.ndarray, S: np.ndarray, lam: float) -> np.ndarray:
    """(n, d) lam * center_rows + (1 - lam) * S; center_rows is (d,) (one global model) or (n, d)."""
    return lam * np.asarray(center_rows) + (1.0 - lam) * np.asarray(S, dtype=np.float64)


def bayes_lambda(alpha: float, m: int) -> float:
    """lambda* = alpha / (alpha + m) (Lemma 2.2)."""
    return alpha / (alpha + m)
