"""PPSGD Fig. 1d: the CNN with a shared private representation and an additive personalized output layer on federated
EMNIST digits (Bietti et al. 2022 Sec. 6; docs/notes/ppsgd.md §2.5, E4; model and round in
:mod:`fedrepro.papers.ppsgd.cnn`).

Same protocol as Fig. 1c (:mod:`fedrepro.papers.ppsgd.experiments.linear`): the official sampler (Q users x m images per
round, ``epochs`` passes), every (step, alpha_c) configuration on the same batch sequence, pooled test accuracy
every ``eval_every`` iterations (before that iteration's update), best step per evaluation point, epsilon per
iteration by opacus RDP at q = Q/N (0 for alpha_c = 0). Per-user gradients are one vmapped call per round over
the round's users (torch.func); configurations run one after another.

Claim check ``local_poor`` (Sec. 6 on Fig. 1d: "the local-only models (alpha = 0) perform very poorly, since the
global representation has frozen random weights"): without noise, alpha_c = 0 ends below every alpha_c > 0.

With ``method`` (set by ``python -m fedrepro compare``), a method from outside the package is trained through this
loop in place of the (step, alpha) grid, on the global model (Phi_W, w): :mod:`fedrepro.papers.ppsgd.method`.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrepro.errors import DataError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import INT1
from fedrepro.learning.engine import resolve_device
from fedrepro.papers.ppsgd import cnn, method
from fedrepro.papers.ppsgd.clients import Clients, load_partition
from fedrepro.papers.ppsgd.grid import GRID_PROPERTIES, run_grid
from fedrepro.papers.ppsgd.sampler import run_batches

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
        "pool_padding",
        "checks",
    ],
    "properties": {
        "data": {"type": "string", "minLength": 1},  # a partition name
        "n_classes": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: largest label + 1
        "m": INT1,
        "users_per_round": INT1,
        "epochs": INT1,
        **{k: v for k, v in GRID_PROPERTIES.items() if k != "dtype"},  # float32 always (torch), no dtype setting
        "target_offset": {"type": "number"},
        "eval_every": INT1,
        "max_rounds": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: every round
        "select": {"enum": ["max_test_accuracy_over_steps"]},
        "method": method.METHOD_PROPERTY,  # a method from outside in place of PPSGD's grid (python -m fedrepro compare)
        "pool_padding": {"enum": ["valid", "same_second"]},
        "threads": {**INT1, "default": 1},
        "device": {"enum": ["auto", "cpu", "cuda"], "default": "auto"},  # auto: cuda when torch sees a GPU, else cpu
        "checks": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "beats_chance": {"type": "boolean"},
                "personalized_dominates": {"type": "boolean"},
                "local_poor": {"type": "boolean"},
            },
        },
    },
}


def _images(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(x, dtype=np.float32)).reshape(
        *x.shape[:-1], 28, 28
    )  # a copy: memmaps are read-only


def train_cnn(cl: Clients, p: dict, sigma: float, eta_w: np.ndarray, eta_theta: np.ndarray, seed: int) -> tuple:
    """(eval iterations, accuracy (E, G), rounds) for G configurations, one sigma (run_grid's train function)."""
    K = cl.y_train.shape[1]
    dev = torch.device(resolve_device(p["device"]))
    x_test = _images(cl.x_test).to(dev)
    y_test = torch.from_numpy(cl.y_test.astype(np.int64)).to(dev)
    user_of_row = torch.from_numpy(np.repeat(np.arange(cl.n_users), np.diff(cl.test_off))).to(dev)
    x_train = _images(cl.x_train).to(dev)  # once: every configuration indexes the same rows
    y_train = torch.from_numpy(cl.y_train - p["target_offset"]).to(dev)
    accs, its, rounds = [], [], 0
    for g in range(len(eta_w)):
        sampler = run_batches(cl.train_off, p, seed)  # the same batches for every config
        state = cnn.init_state(cl.n_users, K, np.random.default_rng([seed, 2]), p["pool_padding"]).to(dev)
        gen = torch.Generator(device=dev).manual_seed(int(np.random.default_rng([seed, 1, g]).integers(2**62)))
        its_g, acc_g, t = [], [], 0
        for users, rows in sampler:
            if t % p["eval_every"] == 0:
                its_g.append(t)
                with torch.no_grad():
                    acc_g.append(cnn.accuracy(state, x_test, y_test, user_of_row, p["pool_padding"]))
            if p["max_rounds"] is not None and t >= p["max_rounds"]:
                break
            idx = torch.from_numpy(rows.ravel()).to(dev)
            X = x_train[idx].reshape(*rows.shape, 28, 28)
            Y = y_train[idx].reshape(*rows.shape, K)
            cnn.round_step(
                state, users, X, Y, float(eta_w[g]), float(eta_theta[g]), sigma, p["clip"], gen, p["pool_padding"]
            )
            t += 1
        its, rounds = its_g, t
        accs.append(acc_g)
    return np.array(its), np.array(accs, dtype=float).T, rounds


@experiment_kind(
    "ppsgd_cnn",
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
    checks=("beats_chance", "local_poor", "personalized_dominates", "best_alpha_without_privacy"),
    method_slot=method.METHOD_SLOT,
)
def ppsgd_cnn(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    if p["data"] not in ctx.partitions:
        raise DataError(f"{ctx.exp_id}: partition {p['data']!r} not built (declare `partitions: [{p['data']}]`)")
    cl = load_partition(ctx.partitions[p["data"]], p["n_classes"])
    if cl.x_train.shape[1] != 28 * 28:
        raise DataError(
            f"{ctx.exp_id}: the CNN takes 28x28 images, partition {p['data']!r} has "
            f"{cl.x_train.shape[1]} features per row"
        )
    prev = torch.get_num_threads()
    torch.set_num_threads(p["threads"])
    try:
        linear_checks = {k: v for k, v in p["checks"].items() if k != "local_poor"}
        out = run_grid(cl, p | {"checks": linear_checks}, rng, _method_trainer(cl, p) if p["method"] else train_cnn)
    finally:
        torch.set_num_threads(prev)
    if p["checks"].get("local_poor") and not p["method"]:
        out.checks["local_poor"] = local_poor(out.metrics["final_accuracy"])
    return out


def _method_trainer(cl: Clients, p: dict):
    """A method from outside under this protocol (:mod:`fedrepro.papers.ppsgd.method`): the global model (Phi_W, w)
    initialized exactly as the PPSGD rows' (:func:`fedrepro.papers.ppsgd.cnn.init_state` from the run's [seed, 2]
    stream), the mean squared loss of [code] main_nn.py."""
    K = cl.y_train.shape[1]
    dev = resolve_device(p["device"])

    def model(seed: int) -> cnn.GlobalModel:
        state = cnn.init_state(cl.n_users, K, np.random.default_rng([seed, 2]), p["pool_padding"])
        return cnn.GlobalModel(state.W, state.w, p["pool_padding"])

    loss = method.squared_loss(p["target_offset"], K, half_sum=False)
    return method.trainer(model, loss, False, method.eval_data(cl, dev), dev)


def local_poor(final_accuracy: dict) -> Check:
    """alpha = 0 (frozen random representation) ends below every alpha > 0 without noise (sigma = 0)."""
    s0 = final_accuracy.get("s0")
    if not s0 or "0" not in s0 or len(s0) < 2:
        return Check(False, "needs sigma = 0 with alpha = 0 and some alpha > 0 in the grid")
    others = {a: v for a, v in s0.items() if a != "0"}
    worst_other = min(others.values())
    return Check(
        s0["0"] < worst_other,
        f"sigma = 0: local-only {s0['0']:.4f} vs the worst alpha > 0 {worst_other:.4f} ("
        + ", ".join(f"alpha Q {a}: {v:.4f}" for a, v in others.items())
        + ")",
        s0["0"],
        worst_other,
    )
