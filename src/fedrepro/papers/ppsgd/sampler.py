"""The official code's client/batch sampler for the real-data experiments ([code] ``main_real.py::batches``,
docs/notes/ppsgd.md §2.4).

Each user's training rows (in stored order) are cut into floor(n_i / m) contiguous chunks of m rows (the last
n_i mod m rows are never used). In every epoch each user visits its chunks in a fresh random order; a user's queue
is the concatenation over ``epochs`` epochs. Each round shuffles the users that still have a batch and takes the
first Q of them (fewer, L < Q, in the tail); training ends when every queue is empty. Users with more data appear
in more rounds. Vectorized: the queues are built with one lexsort per epoch, a round is a few array operations.
"""

from __future__ import annotations

import numpy as np


class BatchSampler:
    """Rounds of (users (L,), rows (L, m)) over users with ``counts`` training rows starting at ``starts``."""

    def __init__(
        self,
        starts: np.ndarray,
        counts: np.ndarray,
        m: int,
        users_per_round: int,
        epochs: int,
        rng: np.random.Generator,
    ):
        self.starts = np.asarray(starts, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        self.m, self.Q, self.rng = int(m), int(users_per_round), rng
        self.nb = counts // self.m  # chunks per user per epoch
        self.offsets = np.r_[0, np.cumsum(self.nb)]
        group = np.repeat(np.arange(len(counts)), self.nb)
        local = np.arange(len(group)) - self.offsets[group]  # 0..nb_i-1 within each user
        self.queue = np.empty((epochs, len(group)), dtype=np.int64)
        for e in range(epochs):
            order = np.lexsort((rng.random(len(group)), group))  # grouped by user, random within a user
            self.queue[e] = local[order]
        self.total = self.nb * epochs
        self.ptr = np.zeros(len(counts), dtype=np.int64)

    def __iter__(self):
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        remaining = np.flatnonzero(self.ptr < self.total)
        if remaining.size == 0:
            raise StopIteration
        users = self.rng.permutation(remaining)[: self.Q]
        j = self.ptr[users]
        nb = self.nb[users]
        chunk = self.queue[j // nb, self.offsets[users] + j % nb]
        self.ptr[users] += 1
        rows = self.starts[users, None] + chunk[:, None] * self.m + np.arange(self.m)[None, :]
        return users, rows


def run_batches(train_off: np.ndarray, p: dict, seed: int) -> BatchSampler:
    """The batch sequence of a real-data run with training seed ``seed`` (users' training rows at ``train_off``, the
    run's ``m``, ``users_per_round``, ``epochs``): every configuration of PPSGD's grid and a method from outside
    (:mod:`fedrepro.papers.ppsgd.method`) draw the same one from the stream [seed, 0]."""
    train_off = np.asarray(train_off)
    return BatchSampler(
        train_off[:-1], np.diff(train_off), p["m"], p["users_per_round"], p["epochs"], np.random.default_rng([seed, 0])
    )
