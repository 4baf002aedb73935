"""Natural writer split, several writers per client (AdaPeD FEMNIST, Ozkara et al. ICLR 2023, Sec. 4 and App. K.1;
docs/notes/adaped.md §4.0 "Clients" and §7.4).

Paper: "m = 66 for FEMNIST: 198 LEAF writers, 3 writers per client" (and Table 4: "FEMNIST, m = 30, same model and
same data per client as Sec. 4"). Which 198 writers and how they are grouped is not stated (docs/notes/adaped.md §7.4),
so:
  * eligible writers: those with at least ``min_train`` training samples and ``min_test`` test samples (after the
    optional label filter ``n_classes``: keep only samples with label < n_classes, e.g. 10 for the digits-only
    reading of the paper's 84×10 output layer, docs/notes/adaped.md §7.4);
  * ``n_writers`` of them are drawn uniformly at random without replacement (seeded), shuffled, and dealt in
    order into ``n_writers // writers_per_client`` clients of ``writers_per_client`` writers;
  * each writer keeps its own LEAF train/test split: a client's train (test) samples are the train (test) samples
    of its writers. Samples of writers not chosen get client -1.
``client_meta["writers"]`` (n_clients, writers_per_client) records the writer ids of every client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrepro.data.partition import UNUSED, LabelSet, Partition, as_labelset, check_params, make_rng, register
from fedrepro.errors import ConfigError

SCHEME = "writer_groups"


def writer_positions(groups: np.ndarray, writers: np.ndarray) -> np.ndarray:
    """Position in ``writers`` (sorted unique ids) of every sample's writer, -1 when absent."""
    pos = np.searchsorted(writers, groups)
    pos = np.clip(pos, 0, max(len(writers) - 1, 0))
    ok = (writers[pos] == groups) if len(writers) else np.zeros(len(groups), dtype=bool)
    return np.where(ok, pos, UNUSED).astype(np.int64)


@register(SCHEME)
def partition(
    train: LabelSet | np.ndarray,
    test: LabelSet | np.ndarray | None = None,
    *,
    seed,
    n_writers: int = 198,
    writers_per_client: int = 3,
    min_train: int = 1,
    min_test: int = 1,
    n_classes: int | None = None,
    **extra: Any,
) -> Partition:
    check_params(SCHEME, extra, set())
    train, test = as_labelset(train), as_labelset(test)
    if train.groups is None or (test is not None and test.groups is None):
        raise ConfigError(f"partition {SCHEME}: needs the writer of every sample (LabelSet.groups)")
    if writers_per_client < 1 or n_writers < writers_per_client:
        raise ConfigError(
            f"partition {SCHEME}: need n_writers >= writers_per_client >= 1 (got {n_writers}, {writers_per_client})"
        )
    tr_keep = np.ones(len(train), bool) if n_classes is None else train.labels < n_classes
    te_keep = None
    if test is not None:
        te_keep = np.ones(len(test), bool) if n_classes is None else test.labels < n_classes

    all_ids = np.unique(np.concatenate([train.groups, test.groups]) if test is not None else train.groups)
    tr_pos = writer_positions(train.groups, all_ids)
    n_tr = np.bincount(tr_pos[tr_keep], minlength=len(all_ids))
    eligible = n_tr >= min_train
    if test is not None:
        te_pos = writer_positions(test.groups, all_ids)
        eligible &= np.bincount(te_pos[te_keep], minlength=len(all_ids)) >= min_test
    elig = np.flatnonzero(eligible)
    if len(elig) < n_writers:
        raise ConfigError(
            f"partition {SCHEME}: only {len(elig)} writers have >= {min_train} train and "
            f">= {min_test} test samples, {n_writers} requested"
        )

    rng, seed_rec = make_rng(SCHEME, seed)
    n_clients = n_writers // writers_per_client
    chosen = rng.choice(elig, size=n_clients * writers_per_client, replace=False)  # random order
    client_of_writer = np.full(len(all_ids), UNUSED, dtype=np.int64)
    client_of_writer[chosen] = np.repeat(np.arange(n_clients), writers_per_client)

    train_client = np.where(tr_keep, client_of_writer[tr_pos], UNUSED)
    if test is not None:
        test_client = np.where(te_keep & (te_pos >= 0), client_of_writer[np.maximum(te_pos, 0)], UNUSED)
    else:
        test_client = np.zeros(0, dtype=np.int64)
    writers = all_ids[chosen].reshape(n_clients, writers_per_client)
    params = {
        "n_writers": n_writers,
        "writers_per_client": writers_per_client,
        "n_clients": n_clients,
        "min_train": min_train,
        "min_test": min_test,
        "n_classes": n_classes,
        "eligible_writers": len(elig),
        "seed": seed_rec,
    }
    return Partition(SCHEME, params, n_clients, train_client, test_client, {"writers": writers})
