"""Pathological label skew: every client holds exactly k classes (AdaPeD, Ozkara et al. ICLR 2023, Sec. 4 and
App. K.1; docs/notes/adaped.md §4.0 "Heterogeneity" and §7.2).

Paper: "MNIST ... 3 random classes per client", "CIFAR-10 ... 4 classes per client", "CIFAR-100 ... 2 superclasses
per client" (classification stays 100-way), m = 50 (Tables 1, 2), m = 30 (Table 5). The paper gives neither the
per-client sizes nor the train/test split, so this module implements the defaults of docs/notes/adaped.md §7.2:

Class assignment (``n_clients`` = m, ``classes_per_client`` = k, C classes):
  balanced random assignment. The m·k (client, class) slots are spread so that every class goes to the same number
  of clients, ⌊m·k/C⌋ or ⌈m·k/C⌉ (the classes that get one more are drawn at random), hence every class is used
  whenever m·k ≥ C. Clients are filled one after the other: client i draws its k distinct classes without
  replacement with probability proportional to each class's remaining capacity, except that a class whose remaining
  capacity equals the number of clients still to fill is always taken (this keeps the fill feasible to the end).
  MNIST m=50, k=3: each class goes to 15 clients; CIFAR-10 m=50, k=4: 20; m=30, k=4: 12; CIFAR-100 m=50, k=2
  superclasses: 5 clients per superclass.
Train samples: each class's official training samples are shuffled and split evenly (sizes differ by at most one)
  among the clients holding it (MNIST m=50: ≈400 per class and client, ≈1,200 per client, docs/notes/adaped.md §7.2).
Test samples: the official test set filtered to each client's classes. A test sample can belong to one client only,
  so each class's test samples are shuffled and split evenly and disjointly among the clients holding the class
  (the same rule as for training samples). A consumer that wants every client evaluated on the whole filtered test
  set can rebuild it from ``client_meta["classes"]``.
With ``on="coarse"`` (CIFAR-100) the assignment and the splitting use the superclass (``LabelSet.coarse``); the
labels stay the 100 fine classes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrepro.data.partition import (
    UNUSED,
    LabelSet,
    Partition,
    as_labelset,
    check_params,
    make_rng,
    register,
    split_evenly,
)
from fedrepro.errors import ConfigError

SCHEME = "pathological"


def balanced_assignment(n_clients: int, k: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """(n_clients, k) array of distinct classes per client (sorted per row), every class used ⌊mk/C⌋ or ⌈mk/C⌉
    times."""
    if not 1 <= k <= n_classes:
        raise ConfigError(f"partition {SCHEME}: classes_per_client={k} must be in [1, {n_classes}]")
    total = n_clients * k
    cap = np.full(n_classes, total // n_classes, dtype=np.int64)
    cap[rng.permutation(n_classes)[: total % n_classes]] += 1
    out = np.empty((n_clients, k), dtype=np.int64)
    for i in range(n_clients):
        left = n_clients - i
        forced = np.flatnonzero(cap == left)
        free = np.flatnonzero((cap > 0) & (cap < left))
        need = k - len(forced)
        # weighted sampling without replacement (Efraimidis-Spirakis keys u^(1/w)), weights = remaining capacity
        keys = np.log(rng.random(len(free))) / cap[free]
        chosen = np.concatenate([forced, free[np.argsort(-keys, kind="stable")[:need]]])
        cap[chosen] -= 1
        out[i] = np.sort(chosen)
    assert not cap.any()
    return out


def _split_by_class(assign_labels: np.ndarray, holders: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    client = np.full(len(assign_labels), UNUSED, dtype=np.int64)
    order = np.argsort(assign_labels, kind="stable")
    bounds = np.searchsorted(assign_labels[order], np.arange(len(holders) + 1))
    for c, owners in enumerate(holders):
        idx = order[bounds[c] : bounds[c + 1]]
        client[idx] = split_evenly(idx, owners, rng)
    return client


@register(SCHEME)
def partition(
    train: LabelSet | np.ndarray,
    test: LabelSet | np.ndarray | None = None,
    *,
    seed,
    n_clients: int = 50,
    classes_per_client: int = 3,
    on: str = "label",
    n_classes: int | None = None,
    **extra: Any,
) -> Partition:
    """k classes per client.

    ``on``: "label" (assign the labels) or "coarse" (assign superclasses, ``LabelSet.coarse``).
    ``n_classes``: number of classes (or superclasses) to assign; default max(label)+1 over train and test.
    """
    check_params(SCHEME, extra, set())
    train, test = as_labelset(train), as_labelset(test)
    if on not in ("label", "coarse"):
        raise ConfigError(f"partition {SCHEME}: on={on!r} must be 'label' or 'coarse'")
    if n_clients < 1:
        raise ConfigError(f"partition {SCHEME}: n_clients={n_clients} must be >= 1")

    def key(ls: LabelSet | None) -> np.ndarray | None:
        if ls is None:
            return None
        if on == "coarse":
            if ls.coarse is None:
                raise ConfigError(f"partition {SCHEME}: on='coarse' needs coarse labels (LabelSet.coarse)")
            return ls.coarse
        return ls.labels

    ktr, kte = key(train), key(test)
    if n_classes is None:
        n_classes = int(max(ktr.max(initial=-1), -1 if kte is None else kte.max(initial=-1))) + 1
    for name, arr in (("train", ktr), ("test", kte)):
        if arr is not None and arr.size and (arr.min() < 0 or arr.max() >= n_classes):
            raise ConfigError(f"partition {SCHEME}: {name} {on}s outside [0, {n_classes})")

    rng, seed_rec = make_rng(SCHEME, seed)
    classes = balanced_assignment(n_clients, classes_per_client, n_classes, rng)
    holders = [np.flatnonzero((classes == c).any(axis=1)) for c in range(n_classes)]
    train_client = _split_by_class(ktr, holders, rng)
    test_client = _split_by_class(kte, holders, rng) if kte is not None else np.zeros(0, dtype=np.int64)
    params = {
        "n_clients": n_clients,
        "classes_per_client": classes_per_client,
        "on": on,
        "n_classes": n_classes,
        "assignment": "balanced_random",
        "test_split": "even_disjoint",
        "seed": seed_rec,
    }
    return Partition(SCHEME, params, n_clients, train_client, test_client, {"classes": classes})
