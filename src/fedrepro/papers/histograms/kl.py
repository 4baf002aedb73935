"""KL divergence between histograms, vectorized over users, and the one smoothing rule that keeps it finite.

KL(p || q) = sum_i p_i log(p_i / q_i) (natural log, 0 log 0 = 0). Against K centers,
argmin_k KL(Q_u || P_k) = argmax_k sum_i Q_u[i] log P_k[i], so every assignment is one product S @ log(P).T.

Smoothing (docs/notes/histograms.md G1), a named parameter everywhere it is used (``floor``): a center P is used as
``log(max(P, floor))`` inside assignments (exactly the unsmoothed KL wherever that is finite: a user's mass is
never on a coordinate where its own cluster's mean is 0) and as :func:`smooth` (floor, then renormalise) when it is
an estimate that gets evaluated.
"""

from __future__ import annotations

import numpy as np

CHUNK = 8192  # users per block in row-wise passes (keeps temporaries ~ CHUNK x d)


def smooth(P: np.ndarray, floor: float) -> np.ndarray:
    """Rows of P floored at ``floor`` and renormalised to sum 1 (a proper, strictly positive distribution)."""
    Q = np.maximum(np.asarray(P, dtype=np.float64), floor)
    return Q / Q.sum(axis=-1, keepdims=True)


def safe_log(P: np.ndarray, floor: float) -> np.ndarray:
    """log(max(P, floor)); floor = 0 gives log P with -inf kept out by the smallest positive float."""
    return np.log(np.maximum(np.asarray(P, dtype=np.float64), max(floor, np.finfo(np.float64).tiny)))


def neg_entropy(S: np.ndarray) -> np.ndarray:
    """(n,) sum_i S_ui log S_ui with 0 log 0 = 0, in float64."""
    out = np.empty(S.shape[0])
    for lo in range(0, S.shape[0], CHUNK):
        x = np.asarray(S[lo : lo + CHUNK], dtype=np.float64)
        out[lo : lo + CHUNK] = np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0).sum(axis=1)
    return out


def cross_log(S: np.ndarray, logP: np.ndarray) -> np.ndarray:
    """(n, K) sum_i S_ui log P_ki = S @ logP.T (in S's dtype, accumulated by BLAS)."""
    return np.asarray(S @ logP.T.astype(S.dtype, copy=False), dtype=np.float64)


def cross_log_at(S: np.ndarray, logP: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n,) sum_i S_ui log P_{labels_u, i} in float64: one user's term of an objective at its assigned center, exact
    to float64 whatever S's dtype (a float32 product rounds at ~1e-7 of the term, above an objective's changes near
    convergence)."""
    out = np.empty(S.shape[0])
    for k in np.unique(labels):
        rows = np.flatnonzero(labels == k)
        for lo in range(0, len(rows), CHUNK):
            idx = rows[lo : lo + CHUNK]
            out[idx] = np.asarray(S[idx], dtype=np.float64) @ np.asarray(logP[k], dtype=np.float64)
    return out


def kl_to_centers(S: np.ndarray, P: np.ndarray, floor: float, negent: np.ndarray | None = None) -> np.ndarray:
    """(n, K) KL(S_u || P_k) with centers used as log(max(P, floor))."""
    h = neg_entropy(S) if negent is None else negent
    return h[:, None] - cross_log(S, safe_log(P, floor))


def assign(S: np.ndarray, P: np.ndarray, floor: float) -> np.ndarray:
    """(n,) argmin_k KL(S_u || P_k); ties go to the lowest index (docs/notes/histograms.md §2.6)."""
    return np.argmax(cross_log(S, safe_log(P, floor)), axis=1)


def kl_rows(Q: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(n,) KL(Q_u || R_u) for two (n, d) arrays (R > 0 wherever Q > 0; else inf), chunked, float64."""
    out = np.empty(Q.shape[0])
    for lo in range(0, Q.shape[0], CHUNK):
        q = np.asarray(Q[lo : lo + CHUNK], dtype=np.float64)
        r = np.asarray(R[lo : lo + CHUNK], dtype=np.float64)
        pos = q > 0
        with np.errstate(divide="ignore"):
            out[lo : lo + CHUNK] = np.where(
                pos, q * (np.log(np.where(pos, q, 1.0)) - np.log(np.where(pos, r, 1.0))), 0.0
            ).sum(axis=1)
    return out
