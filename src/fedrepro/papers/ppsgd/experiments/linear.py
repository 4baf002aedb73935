"""PPSGD Fig. 1b/1c, Fig. 2: the linear additive model on a federated dataset (Bietti et al. 2022 Sec. 6; notes
ppsgd.md E2/E3).

Data: a partition (config/partitions.yaml, e.g. TFF EMNIST digits' first 1000 writers) or TFF Stack Overflow via
:func:`fedrepro.papers.ppsgd.stackoverflow_tags.tag_prediction_clients` (5000-word bag of words, 80 tags). Targets
are the one-hot / multi-hot labels minus ``target_offset`` ([code]: 0.9 / -0.1), no bias. Training: PPSGD-exp
(:mod:`fedrepro.papers.ppsgd.ppsgd_exp`) with the official code's sampler (:mod:`fedrepro.papers.ppsgd.sampler`): Q
users per round, m rows each, ``epochs`` passes. Every (step, alpha_c) configuration of the grid is trained on the same
batch sequence (``chunk`` configurations at a time, vectorized), once per sigma. Evaluation every ``eval_every``
iterations, before that iteration's update ([code]): top-1 test accuracy pooled over all test rows of all users,
each user scored with w + theta_i (a hit when the argmax class is among the row's labels).

Selection ([code], explicit in ``select``): the best test accuracy over steps at each evaluation point (Fig. 1)
and, for Fig. 2, the step with the best final accuracy per (sigma, alpha). Epsilon: opacus RDP at q = Q/N, one
step per round with alpha_c > 0 (0 for alpha_c = 0).

With ``method`` (set by ``python -m fedrepro compare``), a method from outside the package is trained through this
loop in place of the (step, alpha) grid: :mod:`fedrepro.papers.ppsgd.method`.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from fedrepro.errors import DataError
from fedrepro.experiments import RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import INT1
from fedrepro.papers.ppsgd import method, ppsgd_exp
from fedrepro.papers.ppsgd.clients import Clients, load_partition, rows_of
from fedrepro.papers.ppsgd.grid import ALPHA, GRID_PROPERTIES, run_grid
from fedrepro.papers.ppsgd.sampler import run_batches

SO_RELEASES = ("tff_stackoverflow_sqlite", "tff_stackoverflow")  # TFF's sqlite release (today's), its h5 release

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "data",
        "m",
        "users_per_round",
        "epochs",
        "steps",
        "alphas",
        "sigmas",
        "clip",
        "delta",
        "target_offset",
        "eval_every",
        "select",
        "chunk",
        "dtype",
        "checks",
    ],
    "properties": {
        "data": {"type": "string", "minLength": 1},  # a partition name, or one of SO_RELEASES
        # Stack Overflow only
        "n_users": {**INT1, "default": 500},
        "word_vocab_size": {**INT1, "default": 5000},
        "tag_vocab_size": {**INT1, "default": 80},
        "max_train_per_client": {**INT1, "default": 500},
        "m": INT1,
        "users_per_round": INT1,
        "epochs": INT1,
        **GRID_PROPERTIES,
        "target_offset": {"type": "number"},
        "n_classes": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: largest label + 1 of the partition
        "eval_every": INT1,
        "max_rounds": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: every round
        "select": {"enum": ["max_test_accuracy_over_steps"]},
        "method": method.METHOD_PROPERTY,  # a method from outside in place of PPSGD's grid (python -m fedrepro compare)
        "chunk": INT1,
        "checks": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "best_alpha_without_privacy": ALPHA,
                "personalized_dominates": {"type": "boolean"},
                "beats_chance": {"type": "boolean"},
            },
        },
    },
}


def load_stackoverflow(files, p: dict, rng: np.random.Generator) -> Clients:
    import scipy.sparse as sp

    from fedrepro.data import tff_stackoverflow as so
    from fedrepro.papers.ppsgd.stackoverflow_tags import tag_prediction_clients

    train, test = so.open_split(files, "train"), so.open_split(files, "test")
    clients = tag_prediction_clients(
        train,
        test,
        so.load_word_counts(files),
        so.load_tag_counts(files),
        num_clients=p["n_users"],
        word_vocab_size=p["word_vocab_size"],
        tag_vocab_size=p["tag_vocab_size"],
        max_train_per_client=p["max_train_per_client"],
        rng=rng,
    )

    def stack(xs, ys):
        off = np.r_[0, np.cumsum([y.shape[0] for y in ys])]
        return sp.vstack(xs).tocsr(), np.concatenate(ys).astype(np.float32), off

    xtr, ytr, otr = stack([c.x_train for c in clients], [c.y_train for c in clients])
    xte, yte, ote = stack([c.x_test for c in clients], [c.y_test for c in clients])
    return Clients(xtr, ytr, otr, xte, yte, ote)


def accuracy(cl: Clients, state: ppsgd_exp.State) -> np.ndarray:
    """(G,) pooled top-1 test accuracy: a row is a hit when argmax_k x^T (w + theta_i) has label 1."""
    d, K, G = state.w.shape
    hits = np.zeros(G)
    n = cl.test_off[-1]
    if n == 0:
        return np.full(G, np.nan)
    sizes = np.diff(cl.test_off)
    if hasattr(cl.x_test, "toarray"):
        for i in np.flatnonzero(sizes):  # sparse (Stack Overflow): per user, at evaluation only
            s = slice(cl.test_off[i], cl.test_off[i + 1])
            pred = cl.x_test[s] @ (state.w + state.theta[i]).reshape(d, K * G)
            arg = np.asarray(pred).reshape(-1, K, G).argmax(axis=1)
            hits += np.take_along_axis(cl.y_test[s][:, :, None], arg[:, None, :], axis=1)[:, 0, :].sum(axis=0)
        return hits / n
    width = int(sizes.max())
    j = np.arange(width)
    for lo in range(0, cl.n_users, 64):  # blocks of users: padded rows, one batched product per block
        u = np.arange(lo, min(lo + 64, cl.n_users))
        mask = j[None, :] < sizes[u, None]
        rows = np.where(mask, cl.test_off[u, None] + j[None, :], 0)
        x = np.asarray(cl.x_test[rows.ravel()], dtype=state.w.dtype).reshape(len(u), width, d)
        V = (state.theta[u] + state.w[None]).reshape(len(u), d, K * G)
        arg = (x @ V).reshape(len(u), width, K, G).argmax(axis=2)  # (B, width, G)
        y = cl.y_test[rows.ravel()].reshape(len(u), width, K)
        hit = np.take_along_axis(y[:, :, :, None], arg[:, :, None, :], axis=2)[:, :, 0, :]
        hits += (hit * mask[:, :, None]).sum(axis=(0, 1))
    return hits / n


def train(cl: Clients, p: dict, sigma: float, eta_w: np.ndarray, eta_theta: np.ndarray, seed: int) -> tuple:
    """(eval iterations, accuracy (E, G), rounds run) for configurations (eta_w, eta_theta), one sigma."""
    dtype = np.dtype(p["dtype"])
    K = cl.y_train.shape[1]
    d = cl.x_train.shape[1]
    its = []
    acc_chunks = []
    rounds = 0
    for lo in range(
        0, len(eta_w), p["chunk"]
    ):  # diverging steps (e.g. 0.01 on raw pixels) give inf/nan, never selected
        sl = slice(lo, lo + p["chunk"])
        # the same batch sequence for every chunk (common random numbers over the grid); own noise per chunk
        sampler = run_batches(cl.train_off, p, seed)
        noise_rng = np.random.default_rng([seed, 1, lo])
        state = ppsgd_exp.State.zeros(cl.n_users, d, K, len(eta_w[sl]), dtype=dtype)
        its_c, accs_c, t = [], [], 0
        for users, rows in sampler:
            if t % p["eval_every"] == 0:
                its_c.append(t)
                with np.errstate(over="ignore", invalid="ignore"):
                    accs_c.append(accuracy(cl, state))
            if p["max_rounds"] is not None and t >= p["max_rounds"]:
                break
            X = rows_of(cl.x_train, rows, dtype)
            Y = cl.y_train[rows.ravel()].reshape(*rows.shape, K) - p["target_offset"]
            with np.errstate(over="ignore", invalid="ignore"):
                ppsgd_exp.round_step(state, users, X, Y, eta_w[sl], eta_theta[sl], sigma, p["clip"], noise_rng)
            t += 1
        its, rounds = its_c, t
        acc_chunks.append(np.array(accs_c))
    return np.array(its), np.concatenate(acc_chunks, axis=1), rounds


@experiment_kind(
    "ppsgd_linear",
    SCHEMA,
    stage="estimate",
    metrics=(
        "final_accuracy.*",
        "final_epsilon.*",
        "epsilon.*",  # per sigma and row (alpha Q, or a method from outside): the epsilon its final step spent
        "final_step.*",
        "n_classes",
        "n_users",
        "pareto_size.*",
        "sampling_rate",
        "best_alpha_without_privacy",
    ),
    checks=("beats_chance", "personalized_dominates", "best_alpha_without_privacy"),
    method_slot=method.METHOD_SLOT,
)
def ppsgd_linear(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    # single-threaded BLAS: the many small batched products gain nothing from threads, and 2 BLAS threads on 2
    # shared cores spin-wait (measured 15x slower under load)
    with threadpool_limits(limits=1, user_api="blas"):
        return _ppsgd_linear(p, rng, ctx)


def _ppsgd_linear(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    if p["data"] in SO_RELEASES:
        files = ctx.data.get(p["data"])
        if not files:
            raise DataError(
                f"{ctx.exp_id}: needs datasets {p['data']} and tff_stackoverflow_counts (declare them under "
                f"`datasets:`; fetch them with `python -m fedrepro data fetch {p['data']}` and "
                "`python -m fedrepro data fetch tff_stackoverflow_counts`)"
            )
        files = list(files) + list(ctx.data.get("tff_stackoverflow_counts", []))
        cl = load_stackoverflow(files, p, rng)
    else:
        if p["data"] not in ctx.partitions:
            raise DataError(f"{ctx.exp_id}: partition {p['data']!r} not built (declare `partitions: [{p['data']}]`)")
        cl = load_partition(ctx.partitions[p["data"]], p["n_classes"])
    if p["method"]:
        return _run_method(cl, p, rng, multilabel=p["data"] in SO_RELEASES)
    return run_grid(cl, p, rng, train)


def _run_method(cl: Clients, p: dict, rng: np.random.Generator, multilabel: bool) -> RunOutput:
    """A method from outside under this protocol (:mod:`fedrepro.papers.ppsgd.method`): the linear global model from 0
    and the loss whose gradient PPSGD-exp takes, on one torch thread (the BLAS reason above)."""
    import torch

    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    loss = method.squared_loss(p["target_offset"], K, half_sum=True)
    train_fn = method.trainer(lambda seed: method.Linear(d, K), loss, multilabel, method.eval_data(cl, "cpu"))
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_grid(cl, p, rng, train_fn)
    finally:
        torch.set_num_threads(prev)
