"""Natural partition: one client per writer/user, as the dataset gives it.

Used by
  * PPSGD (Bietti et al. ICML 2022, Sec. 6; docs/notes/ppsgd.md §4 E2-E4 and §7.9): TFF StackOverflow, "N = 500 users",
    "about 300-500 training and 10-100 test documents" each; TFF EMNIST digits, "N = 1000 users". The paper does not
    say which users; its code takes the first N client ids in TFF order (StackOverflow: the first 500 of
    ``test.client_ids``) and caps each user's training documents at 500 (the first 500, ``take(500)``):
    ``select="first", order_from="test", max_train_per_client=500`` and ``select="first", n_clients=1000``.
  * FedHDP (Aldaghri et al., Sec. 5 and App. C; docs/notes/fedhdp.md E7/E8): TFF EMNIST digits (3,383 clients) and
    FEMNIST (3,400 clients), all writers, each writer's own train/test split.
  * Private histograms (Setlur et al., Sec. 4; docs/notes/histograms.md E1, G9): LEAF Reddit users (token-level
    filters such as ">= 2500 in-vocabulary tokens" map to ``min_train``).

Filters (applied in this order): ``n_classes`` keeps only samples with label < n_classes; users with fewer than
``min_train`` train or ``min_test`` test samples are dropped; then ``n_clients`` users are selected by ``select``:
  "first"  in order of first appearance of the user in the ``order_from`` split's ``groups`` array (the parsers emit
           samples in the dataset's client order, so this is TFF's ``client_ids`` order),
  "top"    the users with the most training samples (ties by first appearance),
  "random" uniformly at random (seeded);
``n_clients=None`` keeps every remaining user (in first-appearance order). Client ids follow the selection order;
``client_meta["writer"]`` holds each client's user id. ``max_train_per_client`` keeps only a user's first that
many training samples (in array order). A user's train and test samples come from the respective splits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrepro.data.partition import UNUSED, LabelSet, Partition, as_labelset, check_params, make_rng, register
from fedrepro.data.partition.writer_groups import writer_positions
from fedrepro.errors import ConfigError

SCHEME = "natural"
SELECT = ("first", "top", "random")


def first_appearance(pos: np.ndarray, n: int) -> np.ndarray:
    """For each of n ids, the first index where it appears in ``pos`` (len(pos) when absent)."""
    first = np.full(n, len(pos), dtype=np.int64)
    ok = pos >= 0
    np.minimum.at(first, pos[ok], np.flatnonzero(ok))
    return first


def rank_within_group(pos: np.ndarray) -> np.ndarray:
    """0-based rank of every sample among the samples of its group, in array order (vectorized)."""
    order = np.argsort(pos, kind="stable")
    sorted_pos = pos[order]
    start = np.r_[0, np.flatnonzero(np.diff(sorted_pos)) + 1]
    run_start = np.repeat(start, np.diff(np.r_[start, len(pos)]))
    rank = np.empty(len(pos), dtype=np.int64)
    rank[order] = np.arange(len(pos)) - run_start
    return rank


@register(SCHEME)
def partition(
    train: LabelSet | np.ndarray,
    test: LabelSet | np.ndarray | None = None,
    *,
    seed=0,
    n_clients: int | None = None,
    select: str = "first",
    order_from: str = "train",
    min_train: int = 1,
    min_test: int = 0,
    max_train_per_client: int | None = None,
    n_classes: int | None = None,
    **extra: Any,
) -> Partition:
    check_params(SCHEME, extra, set())
    train, test = as_labelset(train), as_labelset(test)
    if train.groups is None or (test is not None and test.groups is None):
        raise ConfigError(f"partition {SCHEME}: needs the user of every sample (LabelSet.groups)")
    if select not in SELECT:
        raise ConfigError(f"partition {SCHEME}: select={select!r} must be one of {SELECT}")
    if order_from not in ("train", "test") or (order_from == "test" and test is None):
        raise ConfigError(
            f"partition {SCHEME}: order_from={order_from!r} must be 'train' or 'test' (with a test split)"
        )
    rng, seed_rec = make_rng(SCHEME, seed)

    ids = np.unique(np.concatenate([train.groups, test.groups]) if test is not None else train.groups)
    tr_pos = writer_positions(train.groups, ids)
    tr_keep = np.ones(len(train), bool) if n_classes is None else train.labels < n_classes
    if max_train_per_client is not None:
        tr_keep &= rank_within_group(np.where(tr_keep, tr_pos, UNUSED)) < max_train_per_client
    n_tr = np.bincount(tr_pos[tr_keep], minlength=len(ids))
    ok = n_tr >= min_train
    if test is not None:
        te_pos = writer_positions(test.groups, ids)
        te_keep = np.ones(len(test), bool) if n_classes is None else test.labels < n_classes
        ok &= np.bincount(te_pos[te_keep], minlength=len(ids)) >= min_test
    order_pos = tr_pos if order_from == "train" else te_pos
    first = first_appearance(order_pos, len(ids))
    elig = np.flatnonzero(ok & (first < len(order_pos)))
    elig = elig[np.argsort(first[elig], kind="stable")]  # first-appearance order
    n = len(elig) if n_clients is None else int(n_clients)
    if n > len(elig) or n == 0:
        raise ConfigError(f"partition {SCHEME}: {n} clients requested, only {len(elig)} users pass the filters")
    if select == "first":
        chosen = elig[:n]
    elif select == "top":
        chosen = elig[np.argsort(-n_tr[elig], kind="stable")[:n]]
    else:
        chosen = rng.choice(elig, size=n, replace=False)
    client_of = np.full(len(ids), UNUSED, dtype=np.int64)
    client_of[chosen] = np.arange(n)
    train_client = np.where(tr_keep, client_of[tr_pos], UNUSED)
    if test is not None:
        test_client = np.where(te_keep, client_of[te_pos], UNUSED)
    else:
        test_client = np.zeros(0, dtype=np.int64)
    params = {
        "n_clients": n,
        "select": select,
        "order_from": order_from,
        "min_train": min_train,
        "min_test": min_test,
        "max_train_per_client": max_train_per_client,
        "n_classes": n_classes,
        "eligible_users": len(elig),
        "seed": seed_rec,
    }
    return Partition(SCHEME, params, n, train_client, test_client, {"writer": ids[chosen]})
