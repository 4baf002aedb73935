"""Adapter between a partitioned dataset (:class:`fedrepro.data.fedformat.FederatedDataset`) and the engine.

:class:`ClientData` turns row indices into float32 tensors on the training device: minibatches of many clients
at once (``sample``: ``FederatedDataset.sample_rows``, shape (n_sel, B, *feature_shape)) and padded per-client
blocks of a split for vectorized evaluation (``blocks``). :func:`from_arrays` builds an in-memory
``FederatedDataset`` (same CSR-offsets interface, no files) for tests and synthetic tasks.

Feature conversion: uint8 -> float32 / 255, other dtypes -> float32 unchanged. ``standardize=True`` then subtracts
the mean and divides by the standard deviation of all training features (two scalars, like torchvision's
``Normalize((0.1307,), (0.3081,))`` for MNIST; GAP: the paper states no normalization). The two scalars are a
dataset-level constant computed once from the pooled training split; no test data enters them. Without it, LEAF
FEMNIST (white background = 1.0, mean ~0.95) sits on SGD's initial plateau for hundreds of steps. Feature shape: (H, W)
images get a channel axis (1, H, W); other shapes are kept unless ``feature_shape`` is given (e.g. ``(1, 28, 28)`` for
FEMNIST's flat 784-vectors).

Minibatches (GAP: the paper says only "batch size so that each epoch consists of 60 iterations"): every local
iteration draws B distinct rows of each selected client uniformly (independent across iterations), with
replacement only for a client with fewer than B rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedrepro.data.fedformat import FederatedDataset
from fedrepro.data.partition import SPLITS

Arrays = tuple[np.ndarray, np.ndarray]


def from_arrays(
    train: Sequence[Arrays], test: Sequence[Arrays] | None = None, n_classes: int | None = None
) -> FederatedDataset:
    """An in-memory FederatedDataset from per-client ``(features, labels)`` pairs (train, optionally test)."""
    splits = {"train": list(train)} | ({"test": list(test)} if test is not None else {})
    n_clients = len(splits["train"])
    if any(len(v) != n_clients for v in splits.values()):
        raise ValueError("train and test must list the same number of clients")
    feats, labels, cids, codes, clients = [], [], [], [], [{"id": c} for c in range(n_clients)]
    split_rows, start = {}, 0
    for name, blocks in splits.items():
        n = 0
        for c, (x, y) in enumerate(blocks):
            if len(x) != len(y):
                raise ValueError(f"{name} client {c}: {len(x)} features, {len(y)} labels")
            feats.append(np.asarray(x))
            labels.append(np.asarray(y, dtype=np.int64))
            cids.append(np.full(len(y), c, dtype=np.int64))
            codes.append(np.full(len(y), SPLITS.index(name), dtype=np.int8))
            clients[c][name] = len(y)
            n += len(y)
        split_rows[name] = {"start": start, "rows": n}
        start += n
    labels_all = np.concatenate(labels)
    manifest = {
        "n_clients": n_clients,
        "splits": split_rows,
        "clients": clients,
        "n_classes": int(n_classes if n_classes is not None else labels_all.max(initial=-1) + 1),
    }
    return FederatedDataset(
        path=Path("<memory>"),
        manifest=manifest,
        features=np.concatenate(feats),
        labels=labels_all,
        client_id=np.concatenate(cids),
        split=np.concatenate(codes),
        source_index=np.arange(len(labels_all)),
    )


class ClientData:
    """Tensors for the engine from a FederatedDataset; ``preload`` copies all features to ``device`` once."""

    def __init__(
        self,
        ds: FederatedDataset,
        device: str | torch.device = "cpu",
        feature_shape: Sequence[int] | None = None,
        preload: bool = True,
        standardize: bool = False,
    ):
        self.ds = ds
        self.device = torch.device(device)
        raw = tuple(ds.features.shape[1:])
        self.feature_shape = (
            tuple(feature_shape) if feature_shape is not None else ((1, *raw) if len(raw) == 2 else raw)
        )
        if int(np.prod(self.feature_shape)) != int(np.prod(raw)):
            raise ValueError(f"feature_shape {self.feature_shape} does not fit stored features {raw}")
        self._scale = 1 / 255 if ds.features.dtype == np.uint8 else None
        self._features = torch.from_numpy(np.array(ds.features)).to(self.device) if preload else None
        self._labels = torch.from_numpy(ds.labels).to(self.device)
        self.shift, self.divide = 0.0, 1.0
        if standardize:
            self.shift, self.divide = self._train_moments()

    def _train_moments(self) -> tuple[float, float]:
        """Mean and std of every training feature value (after the uint8 scaling), in float64."""
        rows = np.flatnonzero(self.ds.split == SPLITS.index("train"))
        total, sq, n = 0.0, 0.0, 0
        for a in range(0, len(rows), 8192):
            x = np.asarray(self.ds.features[rows[a : a + 8192]], dtype=np.float64)
            x = x / 255 if self._scale is not None else x
            total, sq, n = total + x.sum(), sq + (x * x).sum(), n + x.size
        mean = total / max(n, 1)
        std = float(np.sqrt(max(sq / max(n, 1) - mean * mean, 0.0)))
        if not std > 0:
            raise ValueError("standardize: the training features are constant")
        return float(mean), std

    @property
    def n_clients(self) -> int:
        return self.ds.n_clients

    @property
    def n_classes(self) -> int:
        return self.ds.n_classes

    def counts(self, split: str = "train") -> np.ndarray:
        return self.ds.counts(split)

    def gather(self, rows: np.ndarray) -> tuple[Tensor, Tensor]:
        """Features (float32, ``rows.shape + feature_shape``) and labels (int64, ``rows.shape``) of ``rows``."""
        idx = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(self.device).reshape(-1)
        # index_select copies a row per index; indexing with a tensor (features[idx]) copies element by element:
        # the whole gather took 2.4-3.7x as long that way (benchmarks/minibatch_gather.py, benchmarks/RESULTS.md)
        if self._features is not None:
            x = self._features.index_select(0, idx)
        else:
            x = torch.from_numpy(np.asarray(self.ds.features[rows.reshape(-1)])).to(self.device)
        if self._scale is not None:  # the cast to float32 and the scaling in one pass, bitwise x.float() * scale
            x = torch.mul(x, self._scale, out=x.new_empty(x.shape, dtype=torch.float32))
        else:
            x = x.to(torch.float32)
        if self.divide != 1.0 or self.shift != 0.0:
            x = (x - self.shift) / self.divide
        return x.reshape(*rows.shape, *self.feature_shape), self._labels.index_select(0, idx).reshape(rows.shape)

    def nonzero_features(self, split: str = "train", max_rows: int = 1 << 16) -> Tensor:
        """(n_clients, prod(feature_shape)) bool: the features that some example of the client's ``split`` makes
        nonzero (after the scaling and standardization :meth:`gather` applies). A client's minibatches are zero in
        every other feature, so a step can leave those inputs out (:func:`fedrepro.learning.batched_mlp.pack_columns`).
        Gathered about ``max_rows`` examples at a time."""
        rows, mask = self.ds.padded_rows(split, pad=0)
        out = torch.zeros(self.n_clients, math.prod(self.feature_shape), dtype=torch.bool, device=self.device)
        step = max(1, max_rows // max(1, rows.shape[1]))
        for a in range(0, self.n_clients, step):
            x, _ = self.gather(rows[a : a + step])
            real = torch.from_numpy(mask[a : a + step]).to(self.device)
            out[a : a + step] = ((x.flatten(2) != 0) & real[:, :, None]).any(1)
        return out

    def client_rows(self, clients: np.ndarray, split: str = "train") -> np.ndarray:
        """(len(clients), R) each client's rows of ``split`` in order, padded with its first row to the most any
        of them holds (R): row ``r`` of client ``c`` sits at column :meth:`positions` (r)."""
        rows, mask = self.ds.padded_rows(split, np.asarray(clients, dtype=np.int64), pad=0)
        return np.where(mask, rows, rows[:, :1])

    def positions(self, rows: np.ndarray, split: str = "train") -> np.ndarray:
        """Each of ``rows``' column in its client's :meth:`client_rows` of ``split``."""
        return rows - self.ds.offsets(split)[self.ds.client_id[rows]]

    def sample(
        self, clients: np.ndarray, batch_size: int, rng: np.random.Generator, split: str = "train"
    ) -> tuple[Tensor, Tensor]:
        """One minibatch per client: x (len(clients), B, *feature_shape), y (len(clients), B)."""
        return self.gather(self.sample_rows(clients, batch_size, rng, split))

    def sample_rows(
        self, clients: np.ndarray, batch_size: int, rng: np.random.Generator, split: str = "train"
    ) -> np.ndarray:
        """The rows :meth:`sample` gathers, (len(clients), B), drawn from ``rng`` as it draws them."""
        replace = bool((self.counts(split)[clients] < batch_size).any())
        return self.ds.sample_rows(clients, batch_size, rng, split, replace=replace)

    def blocks(self, split: str = "test", max_rows: int = 4096) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """Every client's rows of ``split`` in column chunks: (x (m, c, ...), y (m, c), mask (m, c) float32),
        with about ``max_rows`` rows per chunk over all clients; padded entries have mask 0."""
        rows, mask = self.ds.padded_rows(split, pad=0)
        width = max(1, max_rows // max(1, self.n_clients))
        for a in range(0, rows.shape[1], width):
            x, y = self.gather(rows[:, a : a + width])
            yield x, y, torch.from_numpy(mask[:, a : a + width]).to(self.device, torch.float32)


__all__ = ["ClientData", "from_arrays"]
