"""PPSGD Fig. 1b/1c, Fig. 2: the linear additive model on a federated dataset (Bietti et al. 2022 Sec. 6; notes
ppsgd.md E2/E3).

Data: a partition (config/partitions.yaml, e.g. TFF EMNIST digits' first 1000 writers) or TFF Stack Overflow via
:func:`fedrepro.data.tff_stackoverflow.ppsgd_clients` (5000-word bag of words, 80 tags). Targets are the one-hot /
multi-hot labels minus ``target_offset`` ([code]: 0.9 / -0.1), no bias. Training: PPSGD-exp
(:mod:`fedrepro.ppsgd.exp`) with the official code's sampler (:mod:`fedrepro.ppsgd.sampler`): Q users per round,
m rows each, ``epochs`` passes. Every (step, alpha_c) configuration of the grid is trained on the same batch
sequence (``chunk`` configurations at a time, vectorized), once per sigma. Evaluation every ``eval_every``
iterations, before that iteration's update ([code]): top-1 test accuracy pooled over all test rows of all users,
each user scored with w + theta_i (a hit when the argmax class is among the row's labels).

Selection ([code], explicit in ``select``): the best test accuracy over steps at each evaluation point (Fig. 1)
and, for Fig. 2, the step with the best final accuracy per (sigma, alpha). Epsilon: opacus RDP at q = Q/N, one
step per round with alpha_c > 0 (0 for alpha_c = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from fedrepro.errors import DataError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import INT1
from fedrepro.experiments.ppsgd_synthetic import ALPHA, GRID_PROPERTIES, alpha_label, sigma_label
from fedrepro.ppsgd import exp
from fedrepro.ppsgd.sampler import BatchSampler
from fedrepro.ppsgd.stepsizes import parse_alpha, step_size_arrays
from fedrepro.privacy import epsilon_curve

SO = "tff_stackoverflow"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["data", "m", "users_per_round", "epochs", "steps", "alphas", "sigmas", "clip", "delta",
                 "target_offset", "eval_every", "select", "chunk", "dtype", "checks"],
    "properties": {
        "data": {"type": "string", "minLength": 1},     # a partition name, or tff_stackoverflow
        "n_users": INT1,                                 # Stack Overflow only
        "word_vocab_size": INT1,
        "tag_vocab_size": INT1,
        "max_train_per_client": INT1,
        "m": INT1,
        "users_per_round": INT1,
        "epochs": INT1,
        **GRID_PROPERTIES,
        "target_offset": {"type": "number"},
        "n_classes": INT1,                               # default: largest label + 1 of the partition
        "eval_every": INT1,
        "max_rounds": INT1,
        "select": {"enum": ["max_test_accuracy_over_steps"]},
        "chunk": INT1,
        "checks": {
            "type": "object", "additionalProperties": False,
            "properties": {"best_alpha_without_privacy": ALPHA,
                           "personalized_dominates": {"type": "boolean"},
                           "beats_chance": {"type": "boolean"}}},
    },
}


@dataclass
class Clients:
    """Rows of every user, grouped by user: x (rows, d) dense array or scipy CSR, y01 (rows, K) 0/1 labels."""

    x_train: object
    y_train: np.ndarray
    train_off: np.ndarray
    x_test: object
    y_test: np.ndarray
    test_off: np.ndarray

    @property
    def n_users(self) -> int:
        return len(self.train_off) - 1


def _rows(x, rows: np.ndarray, dtype) -> np.ndarray:
    if hasattr(x, "toarray"):
        return x[rows.ravel()].toarray().astype(dtype).reshape(*rows.shape, x.shape[1])
    return np.asarray(x[rows.ravel()], dtype=dtype).reshape(*rows.shape, x.shape[1])


def load_partition(path, n_classes: int | None = None) -> Clients:
    from fedrepro.data import fedformat

    ds = fedformat.load(path)
    o = ds.offsets("train")
    K = n_classes or int(ds.labels[o[0]:].max()) + 1     # a digits-only partition of a 62-class source: 10

    def split(name):
        o = ds.offsets(name)
        x = np.asarray(ds.features[o[0]:o[-1]], dtype=np.float32).reshape(o[-1] - o[0], -1)
        y = np.eye(K, dtype=np.float32)[ds.labels[o[0]:o[-1]]]
        return x, y, o - o[0]

    xtr, ytr, otr = split("train")
    xte, yte, ote = split("test")
    return Clients(xtr, ytr, otr, xte, yte, ote)


def load_stackoverflow(files, p: dict, rng: np.random.Generator) -> Clients:
    import scipy.sparse as sp

    from fedrepro.data import tff_stackoverflow as so

    train, test = so.open_split(files, "train"), so.open_split(files, "test")
    clients = so.ppsgd_clients(train, test, so.load_word_counts(files), so.load_tag_counts(files),
                               num_clients=p.get("n_users", 500), word_vocab_size=p.get("word_vocab_size", 5000),
                               tag_vocab_size=p.get("tag_vocab_size", 80),
                               max_train_per_client=p.get("max_train_per_client", 500), rng=rng)

    def stack(xs, ys):
        off = np.r_[0, np.cumsum([y.shape[0] for y in ys])]
        return sp.vstack(xs).tocsr(), np.concatenate(ys).astype(np.float32), off

    xtr, ytr, otr = stack([c.x_train for c in clients], [c.y_train for c in clients])
    xte, yte, ote = stack([c.x_test for c in clients], [c.y_test for c in clients])
    return Clients(xtr, ytr, otr, xte, yte, ote)


def accuracy(cl: Clients, state: exp.State) -> np.ndarray:
    """(G,) pooled top-1 test accuracy: a row is a hit when argmax_k x^T (w + theta_i) has label 1."""
    d, K, G = state.w.shape
    hits = np.zeros(G)
    n = cl.test_off[-1]
    if n == 0:
        return np.full(G, np.nan)
    sizes = np.diff(cl.test_off)
    if hasattr(cl.x_test, "toarray"):
        for i in np.flatnonzero(sizes):        # sparse (Stack Overflow): per user, at evaluation only
            s = slice(cl.test_off[i], cl.test_off[i + 1])
            pred = cl.x_test[s] @ (state.w + state.theta[i]).reshape(d, K * G)
            arg = np.asarray(pred).reshape(-1, K, G).argmax(axis=1)
            hits += np.take_along_axis(cl.y_test[s][:, :, None], arg[:, None, :], axis=1)[:, 0, :].sum(axis=0)
        return hits / n
    width = int(sizes.max())
    j = np.arange(width)
    for lo in range(0, cl.n_users, 64):        # blocks of users: padded rows, one batched product per block
        u = np.arange(lo, min(lo + 64, cl.n_users))
        mask = j[None, :] < sizes[u, None]
        rows = np.where(mask, cl.test_off[u, None] + j[None, :], 0)
        x = np.asarray(cl.x_test[rows.ravel()], dtype=state.w.dtype).reshape(len(u), width, d)
        V = (state.theta[u] + state.w[None]).reshape(len(u), d, K * G)
        arg = (x @ V).reshape(len(u), width, K, G).argmax(axis=2)                     # (B, width, G)
        y = cl.y_test[rows.ravel()].reshape(len(u), width, K)
        hit = np.take_along_axis(y[:, :, :, None], arg[:, :, None, :], axis=2)[:, :, 0, :]
        hits += (hit * mask[:, :, None]).sum(axis=(0, 1))
    return hits / n


def train(cl: Clients, p: dict, sigma: float, eta_w: np.ndarray, eta_theta: np.ndarray, seed: int) -> tuple:
    """(eval iterations, accuracy (E, G), rounds run) for configurations (eta_w, eta_theta), one sigma."""
    dtype = np.dtype(p["dtype"])
    K = cl.y_train.shape[1]
    d = cl.x_train.shape[1]
    counts = np.diff(cl.train_off)
    its = []
    acc_chunks = []
    rounds = 0
    for lo in range(0, len(eta_w), p["chunk"]):  # diverging steps (e.g. 0.01 on raw pixels) give inf/nan, never selected
        sl = slice(lo, lo + p["chunk"])
        # the same batch sequence for every chunk (common random numbers over the grid); own noise per chunk
        sampler = BatchSampler(cl.train_off[:-1], counts, p["m"], p["users_per_round"], p["epochs"],
                               np.random.default_rng([seed, 0]))
        noise_rng = np.random.default_rng([seed, 1, lo])
        state = exp.State.zeros(cl.n_users, d, K, len(eta_w[sl]), dtype=dtype)
        its_c, accs_c, t = [], [], 0
        for users, rows in sampler:
            if t % p["eval_every"] == 0:
                its_c.append(t)
                with np.errstate(over="ignore", invalid="ignore"):
                    accs_c.append(accuracy(cl, state))
            if "max_rounds" in p and t >= p["max_rounds"]:
                break
            X = _rows(cl.x_train, rows, dtype)
            Y = cl.y_train[rows.ravel()].reshape(*rows.shape, K) - p["target_offset"]
            with np.errstate(over="ignore", invalid="ignore"):
                exp.round_step(state, users, X, Y, eta_w[sl], eta_theta[sl], sigma, p["clip"], noise_rng)
            t += 1
        its, rounds = its_c, t
        acc_chunks.append(np.array(accs_c))
    return np.array(its), np.concatenate(acc_chunks, axis=1), rounds


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Upper-left frontier in (epsilon, accuracy): points not dominated (smaller-or-equal eps and higher acc)."""
    out, best = [], -math.inf
    for e, a in sorted(points, key=lambda z: (z[0], -z[1])):
        if a > best:
            out.append((e, a))
            best = a
    return out


@experiment_kind("ppsgd_linear", SCHEMA, stage="estimate")
def ppsgd_linear(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    # single-threaded BLAS: the many small batched products gain nothing from threads, and 2 BLAS threads on 2
    # shared cores spin-wait (measured 15x slower under load)
    with threadpool_limits(limits=1, user_api="blas"):
        return _ppsgd_linear(p, rng, ctx)


def _ppsgd_linear(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    if p["data"] == SO:
        files = ctx.data.get(SO)
        if not files:
            raise DataError(f"{ctx.exp_id}: needs datasets {SO} and tff_stackoverflow_counts (declare them)")
        files = list(files) + list(ctx.data.get("tff_stackoverflow_counts", []))
        cl = load_stackoverflow(files, p, rng)
    else:
        if p["data"] not in ctx.partitions:
            raise DataError(f"{ctx.exp_id}: partition {p['data']!r} not built (declare `partitions: [{p['data']}]`)")
        cl = load_partition(ctx.partitions[p["data"]], p.get("n_classes"))
    return run_grid(cl, p, rng, train)


def run_grid(cl: Clients, p: dict, rng: np.random.Generator, train_fn) -> RunOutput:
    """Train every (step, alpha) configuration once per sigma with ``train_fn(cl, p, sigma, eta_w, eta_theta, seed)
    -> (eval iterations, accuracy (E, G), rounds)``, select the best step per evaluation point / at the end (the
    code's rule), attach epsilon per iteration, and evaluate the configured checks. Shared by the linear model and
    the CNN of Fig. 1d."""
    N, K = cl.n_users, cl.y_train.shape[1]
    q = min(1.0, p["users_per_round"] / N)
    alphas = [parse_alpha(a) for a in p["alphas"]]
    steps = [float(s) for s in p["steps"]]
    eta_w, eta_theta = step_size_arrays([s for a in alphas for s in steps], [a for a in alphas for s in steps])
    seed = int(rng.integers(2**31))
    rows, final = [], {}
    for sigma in p["sigmas"]:
        its, acc, rounds = train_fn(cl, p, sigma, eta_w, eta_theta, seed)
        counts = [int(t) for t in its if t > 0]
        eps = np.zeros(len(its))
        if counts:
            if sigma == 0:
                eps[its > 0] = np.inf
            else:
                eps[its > 0] = [r.epsilon for r in epsilon_curve(sigma, q, counts, p["delta"], "opacus_rdp")]
        for j, a in enumerate(alphas):
            block = acc[:, j * len(steps):(j + 1) * len(steps)]
            for k, s in enumerate(steps):
                rows.append(pd.DataFrame({"sigma": sigma, "alpha": a, "alpha_label": alpha_label(a), "step": s,
                                          "iteration": its, "accuracy": block[:, k],
                                          "epsilon": np.zeros(len(its)) if a == 0 else eps}))
            k_best = int(np.nanargmax(block[-1])) if np.isfinite(block[-1]).any() else 0
            final[(sigma, a)] = (float(block[-1, k_best]), steps[k_best], 0.0 if a == 0 else float(eps[-1]))
    history = pd.concat(rows, ignore_index=True)

    metrics: dict = {
        "final_accuracy": {f"s{sigma_label(s)}": {alpha_label(a): final[(s, a)][0] for a in alphas}
                           for s in p["sigmas"]},
        "final_step": {f"s{sigma_label(s)}": {alpha_label(a): final[(s, a)][1] for a in alphas}
                       for s in p["sigmas"]},
        "final_epsilon": {f"s{sigma_label(s)}": float(max(final[(s, a)][2] for a in alphas)) for s in p["sigmas"]},
        "n_users": N, "n_classes": K, "sampling_rate": q,
    }
    checks = {}
    want = p["checks"]
    if "best_alpha_without_privacy" in want and 0 in p["sigmas"]:
        target = parse_alpha(want["best_alpha_without_privacy"])
        accs0 = {a: final[(0, a)][0] for a in alphas}
        best = max(accs0, key=accs0.get)
        metrics["best_alpha_without_privacy"] = best
        checks["best_alpha_without_privacy"] = Check(
            best == target, f"sigma = 0: best final accuracy (best step) at alpha Q = {alpha_label(best)}, paper: "
            f"{alpha_label(target)}; " + ", ".join(f"{alpha_label(a)}: {v:.4f}" for a, v in accs0.items()))
    if want.get("personalized_dominates"):
        mid = [a for a in alphas if 0 < a < math.inf]
        parts, ok, strict = [], bool(mid) and 0 in alphas and math.inf in alphas, False
        for s in (s for s in p["sigmas"] if s > 0):
            if not ok:
                break
            best_mid = max(final[(s, a)][0] for a in mid)
            local, glob = final[(s, 0.0)][0], final[(s, math.inf)][0]
            ok &= max(best_mid, local) >= glob       # the frontier includes the local point ([code] epsmin)
            strict |= best_mid > max(local, glob)
            parts.append(f"sigma={s:g}: best intermediate {best_mid:.4f}, local {local:.4f}, global {glob:.4f}")
        checks["personalized_dominates"] = Check(
            bool(ok and strict), "Fig. 2: best personalized (max of the best 0 < alpha Q < inf and local-only, best "
            "step) >= global-only at every sigma > 0, and an intermediate alpha Q beats both at some sigma: "
            + "; ".join(parts))
    if want.get("beats_chance"):
        chance = 1.0 / K
        worst = min((v for (s, a), (v, _, _) in final.items() if s == 0), default=-1.0)   # -1: no sigma = 0 run
        checks["beats_chance"] = Check(worst > chance, f"every alpha at sigma = 0 beats chance {chance:.3f}: "
                                       f"worst final accuracy {worst:.4f}", worst, chance)
    for s in p["sigmas"]:
        pts = [(final[(s, a)][2], final[(s, a)][0]) for a in alphas if a != 0]
        metrics.setdefault("pareto_size", {})[f"s{sigma_label(s)}"] = len(pareto(pts))
    acc_info = epsilon_curve(next((s for s in p["sigmas"] if s > 0), 1.0), q, [1], p["delta"], "opacus_rdp")[0]
    return RunOutput(metrics=metrics, history=history, checks=checks, accountant=acc_info.to_dict())
