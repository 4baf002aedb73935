"""Partitioners: which client holds each sample of a (train, test) labelled dataset.

Every scheme is one module and registers a function ``partition(train, test=None, *, seed, **params) ->
Partition``; :func:`get_partitioner` returns it by name. The paper-free schemes are the modules of this package
(:data:`SCHEMES`); a paper's own scheme lives with its paper and is declared in its ``PARTITIONS``
(fedrepro.papers), e.g. FedHDP's synthetic non-IID MNIST. Partitioners only see labels (and, for
natural datasets, the writer/user id of every sample, and for CIFAR-100 the superclass of every sample), never the
features, so they work on whatever arrays the dataset parsers return.

Conventions shared by all schemes:
  * a :class:`Partition` gives one client id per sample for the train and the test split; ``-1`` means the sample
    is used by no client (e.g. a writer not chosen). A sample is never in two clients (disjoint by construction).
  * every scheme is deterministic given its seed: an ``int`` seed is turned into a PCG64 stream keyed by the scheme
    name (:func:`fedrepro.seeding.rng_for` with id ``partition.<scheme>``); an explicit
    :class:`numpy.random.SeedSequence` is used as given. The seed is recorded in ``Partition.params["seed"]``.
  * no Python loop runs over samples; loops run over clients or classes.

This module imports numpy only: the dataset catalog imports every module (and package) of ``fedrepro.data``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrepro.errors import ConfigError
from fedrepro.registry import Registry
from fedrepro.seeding import rng_for

UNUSED = -1
SPLITS = ("train", "test")


@dataclass(frozen=True)
class LabelSet:
    """The labels of one split (train or test) as the parsers return them.

    ``labels``: int64 class per sample; ``groups``: writer/user id per sample (natural datasets; any dtype numpy can
    ``np.unique``: int or str); ``coarse``: coarse label per sample (CIFAR-100 superclass), or None.
    """

    labels: np.ndarray
    groups: np.ndarray | None = None
    coarse: np.ndarray | None = None

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels)
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be integers, got {labels.dtype}")
        object.__setattr__(self, "labels", labels.astype(np.int64, copy=False))
        for name in ("groups", "coarse"):
            arr = getattr(self, name)
            if arr is None:
                continue
            arr = np.asarray(arr)
            if arr.shape != labels.shape:
                raise ValueError(f"{name} has shape {arr.shape}, labels {labels.shape}")
            if name == "coarse":
                arr = arr.astype(np.int64, copy=False)
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def as_labelset(x: LabelSet | np.ndarray | None) -> LabelSet | None:
    if x is None or isinstance(x, LabelSet):
        return x
    return LabelSet(np.asarray(x))


@dataclass(frozen=True)
class Partition:
    """Client of every sample, per split, plus what produced it.

    Fields:
      scheme         registry name of the partitioner.
      params         the resolved parameters (JSON-able), including ``seed`` (int, or {"entropy", "spawn_key"}).
      n_clients      number of clients; client ids are 0 .. n_clients-1.
      train_client   int64 array, one entry per train sample: its client, or -1 (unused).
      test_client    int64 array, one entry per test sample: its client, or -1 (unused); empty if no test split.
      client_meta    per-client arrays of length n_clients (first axis): e.g. ``classes`` (assigned classes,
                     shape (n_clients, k)), ``writers`` (writer ids), ``opt_out`` (bool, FedHDP non-private clients).
    """

    scheme: str
    params: dict[str, Any]
    n_clients: int
    train_client: np.ndarray
    test_client: np.ndarray
    client_meta: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("train_client", "test_client"):
            arr = np.asarray(getattr(self, name), dtype=np.int64)
            if arr.ndim != 1:
                raise ValueError(f"{name} must be 1-D")
            if arr.size and (arr.min() < UNUSED or arr.max() >= self.n_clients):
                raise ValueError(f"{name} holds ids outside [-1, {self.n_clients})")
            object.__setattr__(self, name, arr)
        for key, arr in self.client_meta.items():
            if len(arr) != self.n_clients:
                raise ValueError(f"client_meta[{key!r}] has {len(arr)} rows, expected {self.n_clients}")

    def assignment(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return self.train_client if split == "train" else self.test_client

    def counts(self, split: str = "train") -> np.ndarray:
        """Samples per client (length n_clients)."""
        a = self.assignment(split)
        return np.bincount(a[a >= 0], minlength=self.n_clients).astype(np.int64)

    def indices(self, client: int, split: str = "train") -> np.ndarray:
        """Sample indices (into the split) held by ``client``, ascending."""
        return np.flatnonzero(self.assignment(split) == client)

    def class_counts(self, labels: np.ndarray, split: str = "train", n_classes: int | None = None) -> np.ndarray:
        """(n_clients, n_classes) matrix of sample counts per client and class."""
        return class_count_matrix(self.assignment(split), labels, self.n_clients, n_classes)

    def offsets(self, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """CSR form: ``order`` (sample indices grouped by client, ascending within a client) and ``offsets``
        (length n_clients+1): client c holds ``order[offsets[c]:offsets[c+1]]``."""
        a = self.assignment(split)
        used = np.flatnonzero(a >= 0)
        order = used[np.argsort(a[used], kind="stable")]
        offsets = np.zeros(self.n_clients + 1, dtype=np.int64)
        np.cumsum(self.counts(split), out=offsets[1:])
        return order, offsets


def class_count_matrix(
    assign: np.ndarray, labels: np.ndarray, n_clients: int, n_classes: int | None = None
) -> np.ndarray:
    labels = np.asarray(labels, dtype=np.int64)
    keep = assign >= 0
    if n_classes is None:
        n_classes = int(labels.max()) + 1 if labels.size else 0
    flat = assign[keep] * n_classes + labels[keep]
    return np.bincount(flat, minlength=n_clients * n_classes).reshape(n_clients, n_classes).astype(np.int64)


# ---------------------------------------------------------------------------------------------------------- seeds

Seed = int | np.random.SeedSequence


def make_rng(scheme: str, seed: Seed) -> tuple[np.random.Generator, Any]:
    """(generator, JSON-able record of the seed). An int seed gets the stream ``rng_for("partition.<scheme>")``."""
    if isinstance(seed, np.random.SeedSequence):
        entropy = seed.entropy
        rec = {
            "entropy": [int(e) for e in entropy] if isinstance(entropy, (list, tuple, np.ndarray)) else int(entropy),
            "spawn_key": [int(k) for k in seed.spawn_key],
        }
        return np.random.default_rng(seed), rec
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or a numpy SeedSequence, got {type(seed).__name__}")
    return rng_for(f"partition.{scheme}", int(seed)), int(seed)


# ---------------------------------------------------------------------------------------- shared split helpers


def split_evenly(indices: np.ndarray, owners: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shuffle ``indices`` and deal them into ``len(owners)`` contiguous parts whose sizes differ by at most one
    (the larger parts go to a random subset of owners); return the owner of each index (aligned with
    ``indices``)."""
    n, k = len(indices), len(owners)
    out = np.full(n, UNUSED, dtype=np.int64)
    if k == 0 or n == 0:
        return out
    sizes = np.full(k, n // k, dtype=np.int64)
    sizes[rng.permutation(k)[: n % k]] += 1
    perm = rng.permutation(n)
    out[perm] = np.repeat(np.asarray(owners, dtype=np.int64), sizes)
    return out


def split_proportional(
    indices: np.ndarray, owners: np.ndarray, weights: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Shuffle ``indices`` and deal them to ``owners`` in proportion to ``weights`` (largest-remainder rounding,
    ties broken at random); return the owner of each index (aligned with ``indices``)."""
    n = len(indices)
    out = np.full(n, UNUSED, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    if n == 0 or len(owners) == 0 or w.sum() <= 0:
        return out
    sizes = largest_remainder(w / w.sum() * n, n, rng)
    perm = rng.permutation(n)
    out[perm] = np.repeat(np.asarray(owners, dtype=np.int64), sizes)
    return out


def largest_remainder(quotas: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Integers summing to ``total`` closest to ``quotas`` (Hamilton's method, random tie breaking)."""
    base = np.floor(quotas).astype(np.int64)
    short = int(total - base.sum())
    if short > 0:
        frac = quotas - base
        # lexsort: primary key -frac, secondary a random permutation (ties at random)
        order = np.lexsort((rng.permutation(len(quotas)), -frac))
        base[order[:short]] += 1
    return base


def check_params(scheme: str, params: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(
            f"partition {scheme}: unknown parameter(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})"
        )


# ------------------------------------------------------------------------------------------------------ registry

Partitioner = Callable[..., Partition]
SCHEMES: Registry[Partitioner] = Registry(
    "partition scheme",
    {name: f"{__name__}.{name}" for name in ("pathological", "writer_groups", "natural", "dirichlet")},
    "PARTITIONS",
)


def register(name: str):
    """Decorator registering a partition function as scheme ``name``."""
    return SCHEMES.register(name)


def get_partitioner(name: str) -> Partitioner:
    """The partition function registered as ``name`` (this package's schemes and the papers' own)."""
    return SCHEMES.get(name, "partition")


def partitioners() -> list[str]:
    return SCHEMES.names()


def partition(
    scheme: str,
    train: LabelSet | np.ndarray,
    test: LabelSet | np.ndarray | None = None,
    *,
    seed: Seed | None = None,
    **params: Any,
) -> Partition:
    """Shorthand for ``get_partitioner(scheme)(train, test, seed=seed, **params)`` (``seed`` may be left out only
    for schemes that do not need one, e.g. ``natural`` without random selection)."""
    if seed is not None:
        params["seed"] = seed
    return get_partitioner(scheme)(train, test, **params)


__all__ = [
    "LabelSet",
    "Partition",
    "UNUSED",
    "class_count_matrix",
    "get_partitioner",
    "partition",
    "partitioners",
    "register",
    "make_rng",
    "split_evenly",
    "split_proportional",
]
