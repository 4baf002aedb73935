"""A method from outside the package under PPSGD's real-data protocols (Figs. 1b-1d, 2; ``python -m fedrepro compare``).

PPSGD's runs train with their own loop, not the engine's rounds (:mod:`fedrepro.papers.ppsgd.experiments.linear`).
A user's engine :class:`~fedrepro.learning.engine.Algorithm` runs through that same loop:

- **data order**: the official sampler (:class:`~fedrepro.papers.ppsgd.sampler.BatchSampler`) from the seed stream
  the PPSGD rows use, so every step of the grid and every sigma meets their batch sequence. Each round's L <= Q users
  (in increasing id, as the engine hands them) take one local step on their m rows: ``start_round``, one
  ``local_step``, ``sync``.
- **model**: the protocol's global model: the linear map x -> x^T w (w (d, K) from 0, as PPSGD's w) or Fig. 1d's CNN
  (Phi_W, w) initialized as PPSGD's (:class:`~fedrepro.papers.ppsgd.cnn.GlobalModel`); no personal part: a method
  personalizes as it likes and deploys one model per user.
- **loss** (``Net(loss=...)``, what ``client_grads``/``client_sgd`` differentiate): the protocol's squared loss on
  the one-hot / multi-hot targets minus ``target_offset``: for the linear model (1/m) sum_rows 1/2 ||pred - y||^2
  (PPSGD-exp's gradient), for the CNN the mean over rows and outputs of (pred - y)^2 ([code] main_nn.py). ``y`` handed
  to ``local_step``: integer labels (L, m), or on Stack Overflow the 0/1 tag matrix (L, m, tags).
- **lr grid and selection**: the protocol's ``steps`` (PPSGD's step is global learning's eta_w), each trained on the
  same batch sequence; the best step by the protocol's rule (the best test accuracy at each evaluation point, at the
  end for Fig. 2). A step whose training loss turns non-finite has diverged: its accuracy is NaN from there on and it
  is never selected, as PPSGD's own diverging steps; every step diverging fails the method.
- **privacy**: per noise sigma of the grid, ``dp=`` :class:`~fedrepro.learning.dp.SharedNoiseMechanism` (clip C,
  sigma): each user's minibatch gradient clipped to C and the L users' noise shares summing to PPSGD's sigma C on the
  sum, so a method that releases only the mean of its users' noised gradients has PPSGD's epsilon (opacus RDP at
  q = Q/N, one release per round). At sigma = 0 the gradients are still clipped, as PPSGD's are.
- **no weight decay** (PPSGD has none): ``weight_decay=0``.
- **evaluation**: every ``eval_every`` rounds before that round's update ([code]), the pooled top-1 test accuracy,
  each user's test rows scored with its deployed model (a hit when the argmax is among the row's labels). A method
  that fine-tunes at evaluation gets an ``EvalContext`` on a partition (batch m, the step's lr); on Stack Overflow's
  sparse bag of words there is none (``ctx=None``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from fedrepro.errors import ConfigError, DataError
from fedrepro.experiments.method_slot import MethodSlot
from fedrepro.learning.algorithms import build_algorithm
from fedrepro.learning.dp import SharedNoiseMechanism
from fedrepro.learning.engine import Diverged, EvalContext
from fedrepro.learning.net import Net, take
from fedrepro.papers.ppsgd.clients import Clients, rows_of
from fedrepro.papers.ppsgd.grid import alpha_label
from fedrepro.papers.ppsgd.sampler import run_batches
from fedrepro.seeding import rng_for

# the kinds' schema entry: which method runs instead of PPSGD's (step, alpha) grid (None: PPSGD's rows)
METHOD_PROPERTY = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "dp"],
            "properties": {"name": {"type": "string", "minLength": 1}, "dp": {"type": "boolean"}},
        },
    ],
    "default": None,
}
EVAL_BUDGET = 1 << 22  # feature values per evaluation block (16 MiB of float32)


class Linear(nn.Module):
    """x -> x^T w, w (d, K) from 0: PPSGD's global linear model (no bias)."""

    def __init__(self, d: int, k: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(d, k))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.w


def squared_loss(offset: float, n_classes: int, half_sum: bool) -> Callable[[Tensor, Tensor], Tensor]:
    """The protocol's training loss of one minibatch: targets one-hot (integer labels) or the 0/1 label matrix, minus
    ``offset``; ``half_sum``: mean over rows of 1/2 the summed squared error (the linear model's), else the mean over
    rows and outputs (the CNN's)."""

    def loss(logits: Tensor, y: Tensor) -> Tensor:
        if not y.is_floating_point():  # one-hot without F.one_hot, which reads the labels' values (not under vmap)
            y = (y[..., None] == torch.arange(n_classes, device=y.device)).to(logits.dtype)
        target = y - offset
        err = (logits - target) ** 2
        return 0.5 * err.sum(-1).mean() if half_sum else err.mean()

    return loss


def pooled_accuracy(net: Net, params: dict[str, Tensor], cl: Clients, device) -> float:
    """Top-1 accuracy pooled over every test row of every user, each row scored with its user's deployed model (a
    hit when the argmax class has label 1): users of similar test size in blocks, one mapped forward per block."""
    sizes = np.diff(cl.test_off)
    n, d = int(sizes.sum()), cl.x_test.shape[1]
    if n == 0:
        return math.nan
    hits, order, lo = 0.0, np.argsort(sizes, kind="stable"), 0
    order = order[sizes[order] > 0]
    while lo < len(order):
        hi = lo + 1
        while hi < len(order) and (hi + 1 - lo) * sizes[order[hi]] * d <= EVAL_BUDGET:
            hi += 1
        u = order[lo:hi]
        width = int(sizes[u].max())
        mask = np.arange(width)[None, :] < sizes[u, None]
        rows = np.where(mask, cl.test_off[u, None] + np.arange(width)[None, :], cl.test_off[u, None])
        x = torch.from_numpy(rows_of(cl.x_test, rows, np.float32)).to(device)
        with torch.no_grad():
            logits = net.map(net.logits, take(params, torch.from_numpy(u).to(device)), x)
        arg = logits.argmax(-1).cpu().numpy()
        y = cl.y_test[rows.ravel()].reshape(len(u), width, -1)
        hits += float((np.take_along_axis(y, arg[..., None], axis=2)[..., 0] * mask).sum())
        lo = hi
    return hits / n


def trainer(model: Callable[[int], nn.Module], loss: Callable, multilabel: bool, eval_data=None, device="cpu"):
    """run_grid's train function for the method named in ``p["method"]``: ``train(cl, p, sigma, lrs, _, seed) ->
    (eval iterations, accuracy (E, len(lrs)), rounds)``, one training per lr on PPSGD's batch sequence. ``model(seed)``
    builds the initial global model; ``eval_data``: a ClientData of the partition for a method's EvalContext."""
    dev = torch.device(device)

    def train(cl: Clients, p: dict, sigma: float, lrs: np.ndarray, _eta_theta, seed: int) -> tuple:
        name, counts = p["method"]["name"], np.diff(cl.train_off)
        labels = None if multilabel else torch.from_numpy(cl.y_train.argmax(axis=1)).to(dev)
        accs, its, rounds, n_diverged = [], [], 0, 0
        for g, lr in enumerate(float(v) for v in lrs):
            sampler = run_batches(cl.train_off, p, seed)  # the PPSGD rows' batch sequence
            gen = torch.Generator(device=dev).manual_seed(int(np.random.default_rng([seed, 1, g]).integers(2**62)))
            noise = torch.Generator(device=dev).manual_seed(int(np.random.default_rng([seed, 2, g]).integers(2**62)))
            constructed = by_construction(name)
            dp = {"dp": SharedNoiseMechanism(p["clip"], float(sigma))} if p["method"]["dp"] and not constructed else {}
            algo = build_algorithm(name, weight_decay=0.0, **dp)
            net = Net(model(seed).to(dev), loss=loss)
            state = algo.init_state(net, cl.n_users, gen)
            _refuse_unsupported(algo, name)
            its_g, acc_g, t, diverged = [], [], 0, False
            for users, rows in sampler:
                if t % p["eval_every"] == 0:
                    its_g.append(t)
                    acc = math.nan
                    if not diverged:
                        ctx = _eval_context(eval_data, p, counts, lr, rng_for(f"ppsgd.method.eval.{t}", seed))
                        try:
                            acc = _accuracy(algo, state, net, cl, ctx, dev)
                        except Diverged:  # a non-finite deployed model (compare's guard)
                            diverged, n_diverged = True, n_diverged + 1
                    acc_g.append(acc)
                if p["max_rounds"] is not None and t >= p["max_rounds"]:
                    break
                t += 1
                if diverged:
                    continue  # the batch sequence goes on (its evaluation points), the step is not trained further
                order = np.argsort(users, kind="stable")
                users, rows = users[order], rows[order]
                x = torch.from_numpy(rows_of(cl.x_train, rows, np.float32)).to(dev)
                if multilabel:
                    y = torch.from_numpy(cl.y_train[rows.ravel()].reshape(*rows.shape, -1)).to(dev)
                else:
                    y = labels[torch.from_numpy(rows).to(dev)]
                selected = torch.from_numpy(users).to(dev)
                try:
                    algo.start_round(state, selected)
                    losses = algo.local_step(state, x, y, selected, lr)
                    if not torch.isfinite(torch.as_tensor(losses)).all():
                        raise Diverged(f"{name}: non-finite training loss at lr={lr:g}")
                    if constructed:  # the protocol releases what the clients send; the server sees only that
                        message = algo.client_message(state, selected)
                        algo.server_update(state, selected, release(message, p["clip"], float(sigma), noise))
                    else:
                        algo.sync(state, selected)
                except Diverged:
                    diverged, n_diverged = True, n_diverged + 1
            its, rounds = its_g, t
            accs.append(acc_g)
        if n_diverged == len(lrs):
            raise Diverged(f"{name}: the training loss became non-finite at every step of the grid ({list(lrs)})")
        return np.array(its), np.array(accs, dtype=float).T, rounds

    return train


def by_construction(name: str) -> bool:
    """Whether the method registered as ``name`` sends client messages (Algorithm.client_message): then the protocol,
    not the method, clips and noises what each client sends (:func:`release`)."""
    from fedrepro.learning.algorithms import get_algorithm
    from fedrepro.learning.engine import sends_messages

    return sends_messages(get_algorithm(name))


def release(message: dict[str, Tensor], clip: float, sigma: float, generator: torch.Generator) -> dict[str, Tensor]:
    """PPSGD's release of one round, applied to whatever the clients send: each client's message (all its entries
    together, as one vector) clipped to L2 norm ``clip``, summed over the L clients, Gaussian noise of std
    ``sigma * clip`` added to the sum (PPSGD's sigma C; none at sigma = 0), divided by L. A method that releases only
    through this spends PPSGD's epsilon (opacus RDP at q = Q/N, one release per round) whatever it sends."""
    if not message:
        raise ValueError("client_message returned no entries")
    first = next(iter(message.values()))
    n = first.shape[0]
    sq = sum(v.reshape(n, -1).pow(2).sum(1) for v in message.values())
    scale = torch.clamp(clip / torch.sqrt(sq).clamp_min(1e-12), max=1.0)
    out = {}
    for k, v in message.items():
        total = (v * scale.reshape(n, *([1] * (v.dim() - 1)))).sum(0)
        if sigma > 0:
            total = total + sigma * clip * torch.randn(total.shape, generator=generator, device=v.device, dtype=v.dtype)
        out[k] = total / n
    return out


def _accuracy(algo, state, net: Net, cl: Clients, ctx, dev) -> float:
    """Pooled accuracy of the deployed models; ``deployed_params`` runs with gradients on, as the engine calls it (a
    method may fine-tune there), the forward without."""
    return pooled_accuracy(net, algo.deployed_params(state, ctx), cl, dev)


def _eval_context(data, p: dict, counts: np.ndarray, lr: float, rng: np.random.Generator) -> EvalContext | None:
    if data is None:
        return None
    return EvalContext(data, rng, p["m"], lr, max(1, int(np.median(counts // p["m"]))))


def _refuse_unsupported(algo, name: str) -> None:
    why = [
        f"batches_per_step = {algo.batches_per_step} (PPSGD's sampler gives each user one minibatch of m rows)"
        if algo.batches_per_step != 1
        else "",
        "steps_unsampled (PPSGD's unsampled users take no step)" if algo.steps_unsampled else "",
        "a population of its own (PPSGD's sampler draws from every user)" if algo.population is not None else "",
    ]
    if any(why):
        raise ConfigError(f"{name} cannot run under PPSGD's protocol: it sets {'; '.join(w for w in why if w)}")


def eval_data(cl: Clients, device):
    """The partition as a ClientData for a method's EvalContext (fine-tuning), feature values as PPSGD reads them."""
    from fedrepro.learning.data import ClientData

    ds = cl.source
    if ds is None:
        return None
    if not np.issubdtype(ds.features.dtype, np.floating):
        raise DataError(
            f"{ds.path}: features are {ds.features.dtype}; PPSGD's protocol reads feature values as stored, which the "
            "engine's ClientData would rescale (uint8 / 255): a method would fine-tune on other values than it trains"
        )
    return ClientData(ds, device, feature_shape=(int(np.prod(ds.features.shape[1:])),), preload=False)


# ------------------------------------------------------------------------------------------------ method slot

ROW = "PPSGD αQ="


def _methods(p: dict) -> list[str]:
    from fedrepro.papers.ppsgd.stepsizes import parse_alpha

    return [ROW + alpha_label(parse_alpha(a)) for a in p["alphas"]]


def _only(p: dict, name: str, private: bool) -> dict:
    """``p`` with the method ``name`` in place of PPSGD's (step, alpha) grid: the same sampler, steps, sigmas, clip,
    evaluation; no checks (they read PPSGD's alphas)."""
    return p | {"method": {"name": name, "dp": private}, "checks": {}}


def _with_lr(p: dict, name: str, grid: list[float]) -> dict:
    """The method's run over its own steps in place of the protocol's ``steps``, picked by the official rule."""
    return p | {"steps": list(grid)}


def _privacy_note(cls) -> str:
    from fedrepro.learning.engine import sends_messages

    if sends_messages(cls):
        return (
            "privacy by construction: your method sends client_message and the protocol releases it (each client's "
            "message clipped to C, the sum noised with σC, as PPSGD's rows): the ε columns hold for it as for them"
        )
    return (
        "privacy applied by your method: it implements no client_message, so it aggregates in sync with the dp= "
        "mechanism the protocol hands it (each gradient clipped to C, noise shares summing to σC); the ε columns hold "
        "only if it releases nothing but the mean of those noised gradients, which is not checked"
    )


def _label(name: str) -> str:
    return name[len(ROW) :] if name.startswith(ROW) else name


def _cells(metrics: dict, name: str) -> dict[str, float]:
    """Final test accuracy (%) at the best step, one column per sigma, and the epsilon the row spent at each sigma
    (the protocol's accountant: opacus RDP at q = Q/N; inf without noise, 0 for a row that releases nothing)."""
    label, out = _label(name), {}
    for key, row in metrics.get("final_accuracy", {}).items():
        if label in row:
            out[f"acc σ={key[1:].replace('p', '.')}"] = 100 * float(row[label])
    for key, row in metrics.get("epsilon", {}).items():
        if label in row:
            out[f"ε σ={key[1:].replace('p', '.')}"] = float(row[label])
    return out


def _paired(p: dict, baseline: str, constructed: bool = False) -> list[str]:
    """Paired differences of the accuracy columns (the epsilon columns are the protocol's, not a seed's outcome)."""
    return [f"acc σ={s:g}" for s in p["sigmas"]]


def _curves(history: pd.DataFrame, name: str) -> pd.DataFrame:
    """Test accuracy (%) vs iteration at the best step of each evaluation point (Fig. 1), one series per sigma."""
    h = history[history["alpha_label"] == _label(name)]
    best = h.groupby(["sigma", "iteration"], as_index=False)["accuracy"].max()
    return pd.DataFrame(
        {"x": best["iteration"], "y": 100 * best["accuracy"], "series": best["sigma"].map(lambda s: f"σ={s:g}")}
    )


METHOD_SLOT = MethodSlot(
    only=_only,
    private=lambda p: any(s > 0 for s in p["sigmas"]),
    methods=_methods,
    cells=_cells,
    curves=_curves,
    x_label="iteration",
    y_label="test accuracy (%), pooled",
    what=(
        "final test accuracy (%) pooled over every user's test rows, each user with its deployed model, at the best "
        "step of the protocol's grid (the official code's rule), one column per noise multiplier σ, and the ε each row "
        "spent at each σ (opacus RDP at q = Q/N over the rounds, δ the protocol's; αQ = 0 releases nothing: 0; σ = 0 "
        "has no finite ε: —)"
    ),
    private_text="",
    privacy_note=_privacy_note,
    paired=_paired,
    paired_text="the accuracy columns (the ε columns are what the protocol's accountant gives each row at each σ)",
    with_lr=_with_lr,
    lr_text="your steps in place of the protocol's grid, the best picked per evaluation point by the official rule "
    "as for PPSGD's rows (a diverging step dropped; the row fails only when every step diverges)",
)
