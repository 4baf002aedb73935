"""A federated dataset as the PPSGD real-data runs hold it: every user's rows, grouped by user."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Clients:
    """Rows of every user, grouped by user: x (rows, d) dense array or scipy CSR, y01 (rows, K) 0/1 labels."""

    x_train: object
    y_train: np.ndarray
    train_off: np.ndarray
    x_test: object
    y_test: np.ndarray
    test_off: np.ndarray
    source: object = None  # the FederatedDataset of a partition (None: built otherwise, e.g. Stack Overflow)

    @property
    def n_users(self) -> int:
        return len(self.train_off) - 1


def rows_of(x, rows: np.ndarray, dtype) -> np.ndarray:
    """The feature rows ``rows`` (any shape) of a dense array or scipy CSR matrix, densified, shape (*rows, d)."""
    if hasattr(x, "toarray"):
        return x[rows.ravel()].toarray().astype(dtype).reshape(*rows.shape, x.shape[1])
    return np.asarray(x[rows.ravel()], dtype=dtype).reshape(*rows.shape, x.shape[1])


def load_partition(path, n_classes: int | None = None) -> Clients:
    from fedrepro.data import fedformat

    ds = fedformat.load(path)
    o = ds.offsets("train")
    K = n_classes or int(ds.labels[o[0] :].max()) + 1  # a digits-only partition of a 62-class source: 10

    def split(name):
        o = ds.offsets(name)
        x = np.asarray(ds.features[o[0] : o[-1]], dtype=np.float32).reshape(o[-1] - o[0], -1)
        y = np.eye(K, dtype=np.float32)[ds.labels[o[0] : o[-1]]]
        return x, y, o - o[0]

    xtr, ytr, otr = split("train")
    xte, yte, ote = split("test")
    return Clients(xtr, ytr, otr, xte, yte, ote, ds)
