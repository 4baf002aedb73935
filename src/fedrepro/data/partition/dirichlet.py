"""Dirichlet(α) label skew: a general heterogeneity knob (none of the four papers uses it; offered as an option).

``variant="hsu"`` (default) is the recipe of Hsu, Qi & Brown 2019, "Measuring the Effects of Non-Identical Data
Distribution for Federated Visual Classification", Sec. 3: every client draws its class proportions
q_j ~ Dir(α·p), p the class distribution of the training set, and holds the same number of samples
(``samples_per_client``, default ⌊n_train / n_clients⌋). Samples are drawn without replacement, so clients stay
disjoint: clients are filled in turn; client j's class counts are Multinomial(size, q_j); when a class runs out
the missing samples are redrawn from q_j restricted to the classes that still have samples (as in FedLab's
implementation of the recipe), so late clients can deviate from their q_j when α is small.
``variant="per_class"`` is the other common reading (Yurochkin et al. 2019; Wang et al. 2020 FedMA; Li et al.
2022 NIID-Bench): every class c draws proportions over clients p_c ~ Dir_m(α) and its training samples are
split in those proportions (largest remainder); client sizes then vary. No minimum-size resampling is done.
α → ∞ gives IID clients (q_j = p); small α puts each client on few classes.
Test samples: each class's test samples are split disjointly among the clients in proportion to their training
counts of that class (largest remainder), so a client's test labels follow its training labels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedrepro.data.partition import (
    UNUSED,
    LabelSet,
    Partition,
    as_labelset,
    check_params,
    largest_remainder,
    make_rng,
    register,
    split_proportional,
)
from fedrepro.errors import ConfigError

SCHEME = "dirichlet"


def _dirichlet(rng: np.random.Generator, alpha: float, base: np.ndarray, size: int) -> np.ndarray:
    if math.isinf(alpha):
        return np.broadcast_to(base / base.sum(), (size, len(base))).copy()
    conc = np.maximum(alpha * base, 1e-12)  # a class with no samples gets (almost) no mass
    return rng.dirichlet(conc, size=size)


def _hsu_counts(rng: np.random.Generator, alpha: float, avail: np.ndarray, n_clients: int, size: int) -> np.ndarray:
    prior = avail / avail.sum()
    q = _dirichlet(rng, alpha, prior, n_clients)
    avail = avail.copy()
    counts = np.zeros((n_clients, len(avail)), dtype=np.int64)
    for j in range(n_clients):
        need = size
        while need > 0:
            w = q[j] * (avail > 0)
            if w.sum() <= 0:  # q_j has no mass left on classes with samples: fall back to what is available
                w = avail.astype(np.float64)
            draw = rng.multinomial(need, w / w.sum())
            draw = np.minimum(draw, avail)
            counts[j] += draw
            avail -= draw
            need -= int(draw.sum())
    return counts


@register(SCHEME)
def partition(
    train: LabelSet | np.ndarray,
    test: LabelSet | np.ndarray | None = None,
    *,
    seed,
    n_clients: int = 100,
    alpha: float = 0.5,
    variant: str = "hsu",
    samples_per_client: int | None = None,
    n_classes: int | None = None,
    **extra: Any,
) -> Partition:
    check_params(SCHEME, extra, set())
    train, test = as_labelset(train), as_labelset(test)
    if not alpha > 0:
        raise ConfigError(f"partition {SCHEME}: alpha={alpha} must be > 0 (inf for IID)")
    if variant not in ("hsu", "per_class"):
        raise ConfigError(f"partition {SCHEME}: variant={variant!r} must be 'hsu' or 'per_class'")
    y = train.labels
    if n_classes is None:
        n_classes = int(max(y.max(initial=-1), -1 if test is None else test.labels.max(initial=-1))) + 1
    rng, seed_rec = make_rng(SCHEME, seed)
    n_per_class = np.bincount(y, minlength=n_classes)

    if variant == "hsu":
        size = len(y) // n_clients if samples_per_client is None else int(samples_per_client)
        if size < 1 or size * n_clients > len(y):
            raise ConfigError(f"partition {SCHEME}: {size} samples x {n_clients} clients exceed {len(y)} samples")
        counts = _hsu_counts(rng, float(alpha), n_per_class, n_clients, size)
    else:
        if samples_per_client is not None:
            raise ConfigError(f"partition {SCHEME}: samples_per_client applies to variant 'hsu' only")
        size = None
        props = _dirichlet(rng, float(alpha), np.ones(n_clients), n_classes)  # (n_classes, n_clients)
        counts = np.stack(
            [largest_remainder(props[c] * n_per_class[c], int(n_per_class[c]), rng) for c in range(n_classes)], axis=1
        )

    train_client = np.full(len(y), UNUSED, dtype=np.int64)
    order = np.argsort(y, kind="stable")
    bounds = np.searchsorted(y[order], np.arange(n_classes + 1))
    owners = np.arange(n_clients)
    for c in range(n_classes):
        pool = rng.permutation(order[bounds[c] : bounds[c + 1]])
        take = int(counts[:, c].sum())
        train_client[pool[:take]] = np.repeat(owners, counts[:, c])

    if test is not None:
        yt = test.labels
        test_client = np.full(len(yt), UNUSED, dtype=np.int64)
        order_t = np.argsort(yt, kind="stable")
        bounds_t = np.searchsorted(yt[order_t], np.arange(n_classes + 1))
        for c in range(n_classes):
            idx = order_t[bounds_t[c] : bounds_t[c + 1]]
            test_client[idx] = split_proportional(idx, owners, counts[:, c], rng)
    else:
        test_client = np.zeros(0, dtype=np.int64)

    params = {
        "n_clients": n_clients,
        "alpha": float(alpha),
        "variant": variant,
        "samples_per_client": size,
        "n_classes": n_classes,
        "test_split": "proportional_to_train",
        "seed": seed_rec,
    }
    return Partition(SCHEME, params, n_clients, train_client, test_client)
