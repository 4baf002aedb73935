"""Dimensionality reduction (Sec. 3, App. C): keep only the tokens that matter for the cluster directions.

    Q_fa = mean_u Q^_u;  V^_u = Diag(Q_fa)^{-1/2} (Q^_u - Q_fa);  M = (1/n) sum_u V^_u V^_u^T  (d x d)
    {v_j}_{j<=k} = top-k eigenvectors of M (M is symmetric PSD: its singular vectors are its eigenvectors)
    keep token x iff max_j |v_j[x]| >= threshold

Gaps (docs/notes/histograms.md G12), each a parameter: the threshold is not reported, so either ``threshold`` or
``keep_tokens`` (keep
the d' tokens with the largest max_j |v_j[x]|) is given; "for any v" is read as the max over the k vectors; the
reduced histograms are renormalised and used only for the assignment KL, while re-centering (mean or Alg. 3) stays
on the full vocabulary so estimates need no back-projection (:mod:`fedrepro.papers.histograms.lloyd`). Under the model
only K - 1 of the top-k directions carry signal (docs/notes/histograms.md C4;
:func:`fedrepro.papers.histograms.closed_forms.second_moment`).
"""

from __future__ import annotations

import numpy as np

from fedrepro.papers.histograms.kl import CHUNK


def second_moment(S: np.ndarray, floor: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """(Q_fa (d,), M (d, d)) of the rows of S (float64 accumulation over user blocks)."""
    n, d = S.shape
    q = np.asarray(S, dtype=np.float64).mean(axis=0) if n * d <= 10**7 else _block_mean(S)
    w = 1.0 / np.sqrt(np.maximum(q, floor))
    M = np.zeros((d, d))
    for lo in range(0, n, CHUNK):
        V = (np.asarray(S[lo : lo + CHUNK], dtype=np.float64) - q) * w
        M += V.T @ V
    return q, M / n


def _block_mean(S: np.ndarray) -> np.ndarray:
    tot = np.zeros(S.shape[1])
    for lo in range(0, S.shape[0], CHUNK):
        tot += np.asarray(S[lo : lo + CHUNK], dtype=np.float64).sum(axis=0)
    return tot / S.shape[0]


def top_eigenvectors(M: np.ndarray, k: int) -> np.ndarray:
    """(d, k) eigenvectors of the k largest eigenvalues of the symmetric M, largest first."""
    vals, vecs = np.linalg.eigh(M)
    return vecs[:, np.argsort(vals)[::-1][:k]]


def token_scores(S: np.ndarray, k: int, floor: float = 1e-12) -> np.ndarray:
    """(d,) max_j |v_j[x]| over the top-k eigenvectors of M."""
    _, M = second_moment(S, floor)
    return np.abs(top_eigenvectors(M, k)).max(axis=1)


def select_tokens(scores: np.ndarray, *, threshold: float | None = None, keep_tokens: int | None = None) -> np.ndarray:
    """Sorted indices of the kept tokens (exactly one of threshold / keep_tokens)."""
    if (threshold is None) == (keep_tokens is None):
        raise ValueError("give exactly one of threshold, keep_tokens")
    if threshold is not None:
        keep = np.flatnonzero(scores >= threshold)
    else:
        keep = np.sort(np.argsort(-scores, kind="stable")[:keep_tokens])
    if keep.size == 0:
        raise ValueError(f"dimred keeps no token (threshold={threshold})")
    return keep
