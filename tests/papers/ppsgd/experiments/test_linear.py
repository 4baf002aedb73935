"""PPSGD real-data pieces: the official code's batch sampler, pooled accuracy, the Pareto front, a tiny training run."""

import math

import numpy as np
from ppsgd_clients import blob_clients

from fedrepro.config import fill_defaults
from fedrepro.papers.ppsgd import ppsgd_exp
from fedrepro.papers.ppsgd.experiments import linear as lin
from fedrepro.papers.ppsgd.grid import pareto
from fedrepro.papers.ppsgd.sampler import BatchSampler


def test_sampler_visits_every_full_chunk_once_per_epoch():
    counts = np.array([25, 10, 9, 31, 40])
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    s = BatchSampler(starts, counts, m=10, users_per_round=3, epochs=2, rng=np.random.default_rng(0))
    seen = {i: [] for i in range(len(counts))}
    n_rounds = 0
    for users, rows in s:
        n_rounds += 1
        assert 1 <= len(users) <= 3 and len(set(users.tolist())) == len(users)
        for u, r in zip(users, rows):
            assert r[0] >= starts[u] and r[-1] < starts[u] + counts[u] and np.all(np.diff(r) == 1)
            seen[u].append(int((r[0] - starts[u]) // 10))
    for u, c in enumerate(counts):
        nb = c // 10
        assert sorted(seen[u]) == sorted(list(range(nb)) * 2)  # each chunk once per epoch; tail rows unused
        assert sorted(seen[u][:nb]) == list(range(nb))  # the first epoch's chunks come first
    assert n_rounds >= math.ceil(sum(c // 10 for c in counts) * 2 / 3)


def test_pareto_front():
    pts = [(1.0, 0.5), (2.0, 0.4), (3.0, 0.7), (0.5, 0.1), (3.0, 0.6)]
    assert pareto(pts) == [(0.5, 0.1), (1.0, 0.5), (3.0, 0.7)]


def test_accuracy_matches_per_row_loop():
    rng = np.random.default_rng(0)
    cl = blob_clients(rng)
    state = ppsgd_exp.State(rng.standard_normal((5, 3, 2)), rng.standard_normal((6, 5, 3, 2)))
    acc = lin.accuracy(cl, state)
    hits = np.zeros(2)
    for i in range(6):
        for r in range(cl.test_off[i], cl.test_off[i + 1]):
            for g in range(2):
                k = np.argmax(cl.x_test[r] @ (state.w[..., g] + state.theta[i, ..., g]))
                hits[g] += cl.y_test[r, k]
    np.testing.assert_allclose(acc, hits / cl.test_off[-1])


def test_tiny_training_learns_and_alpha_limits_hold():
    rng = np.random.default_rng(1)
    cl = blob_clients(rng)
    p = {
        "m": 5,
        "users_per_round": 3,
        "epochs": 3,
        "clip": 10.0,
        "target_offset": 0.1,
        "eval_every": 4,
        "chunk": 2,
        "dtype": "float64",
    }
    from fedrepro.papers.ppsgd.stepsizes import step_size_arrays

    ew, et = step_size_arrays([0.05, 0.05, 0.05], [0, 1, math.inf])
    its, acc, rounds = lin.train(cl, fill_defaults(p, lin.SCHEMA), 0.0, ew, et, seed=0)
    assert its[0] == 0 and np.all(np.diff(its) == 4)
    assert acc.shape == (len(its), 3)
    assert np.all(acc[-1] > 0.6)  # well-separated clusters: every alpha learns
    assert 36 <= rounds < 6 * 6 * 3  # 108 batches, <= 3 per round (tail rounds may have fewer users)
