"""Small synthetic federated datasets in the PPSGD real-data runs' form (fedrepro.papers.ppsgd.clients.Clients)."""

from __future__ import annotations

import numpy as np

from fedrepro.papers.ppsgd.clients import Clients


def blob_clients(rng, n=6, d=5, k=3, n_train=30, n_test=7, dtype=np.float64) -> Clients:
    """``n`` users, each with ``n_train`` / ``n_test`` rows of ``k`` Gaussian blobs in R^d (one-hot labels)."""
    centers = rng.standard_normal((k, d)) * 3
    xs, ys, xt, yt = [], [], [], []
    for _ in range(n):
        lab = rng.integers(k, size=n_train + n_test)
        x = centers[lab] + rng.standard_normal((len(lab), d))
        y = np.eye(k)[lab]
        xs.append(x[:n_train]), ys.append(y[:n_train]), xt.append(x[n_train:]), yt.append(y[n_train:])
    off_tr, off_te = np.arange(n + 1) * n_train, np.arange(n + 1) * n_test

    def cat(a):
        return np.concatenate(a).astype(dtype)

    return Clients(cat(xs), cat(ys), off_tr, cat(xt), cat(yt), off_te)
