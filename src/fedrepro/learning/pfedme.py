"""pFedMe (Dinh, Tran, Nguyen, NeurIPS 2020, "Personalized Federated Learning with Moreau Envelopes"), as in its
official code github.com/CharlieDinh/pFedMe that Ozkara et al. 2023 used (App. K.1; docs/notes/adaped.md section 2.12),
vectorized
over clients.

Client i holds a local copy w_i of the global model and a personalized model theta_i. Each local step of a selected
client on its minibatch D (userpFedMe.train):

    theta_hat ~ argmin_theta f_i(theta; D) + (lam/2) ||theta - w_i||^2, by K_p gradient steps on the same D:
        theta <- theta - eta_p (grad f_i(theta; D) + lam (theta - w_i) + weight_decay theta)
    w_i <- w_i - eta lam (w_i - theta_hat)                          (eta: the engine's scheduled lr)

and at the end of a synchronization period the server sets w <- (1 - beta) w + beta (1/K) sum_i w_i. Deployed model
(``deployed``):
- ``"theta"`` (default, the paper's personalized model): each client's theta_hat_i, the last one it computed.
- ``"local"`` (what the official code evaluates as the personalized model): each client's w_i at the end of its last
  local training. In userpFedMe.train, ``persionalized_model_bar`` is the list ``pFedMeOptimizer.step`` returns,
  ``group['params']``: the model's own Parameter objects, not a copy. ``update_parameters(self.local_model)`` at the
  end of train sets those Parameters to w_i, so test_persionalized_model evaluates w_i (CharlieDinh/pFedMe issue #5
  says as much: "persionalized_model_bar is just a copy of local_model").
Either way a client not yet selected deploys the template initialization.

Defaults and GAPs:
- lam = 0.5, K_p = ``inner_steps`` = 3 (App. K.1; K.2 uses lam = 0.1, K_p = 3). K.1's "eta = 0.2" is read as the
  personal lr eta_p (docs/notes/adaped.md section 7 item 24; K.2 prints eta = 0.1); eta_p is constant (official code),
  the main lr
  follows the engine's schedule. beta is not given: default 1 (plain averaging of the w_i).
- Inner solver start: ``restart_from_global=True`` (official code: ``set_parameters`` overwrites the personal model
  with the broadcast w at the start of every round, and the personal model then carries over from one local step to
  the next, i.e. each solve is warm-started from the previous theta_hat of the same period). With False, every solve
  starts from the client's last theta_hat, across periods too. Either way every selected client computes a fresh
  theta_hat in each period (tau >= 1) before any evaluation.
- Weight decay 1e-4 (App. K, "all runs") is added to the inner steps' gradient, where the official optimizer has
  its ``mu`` (0.001) term; the w_i update and the aggregation have none.
- Aggregation is the unweighted mean over the K selected clients (as FedAvg here and in docs/notes/adaped.md); the
official
  code weights clients by training-set size.
- Only the selected clients take local steps (the engine's convention); the official server trains *all* users in
  every round and aggregates only the selected ones, so there unselected users' theta_hat is also refreshed.
- The returned training loss is f_i(theta; D) at the start of each local step's inner solve.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import grad_and_value

from fedrepro.learning.engine import Algorithm, EvalContext
from fedrepro.learning.net import Net, Params, expand, mean, put, stack, take

#: the model each client deploys (see the module docstring)
DEPLOYED = ("theta", "local")


@dataclass
class PFedMeState:
    net: Net
    global_params: Params  # w, no client axis
    local: Params | None  # w_i (K, ...) during a synchronization period
    theta: Params  # (m, ...) theta_hat_i: deployed models and the inner solver's start
    generator: torch.Generator
    last_local: Params | None = None  # (m, ...) each client's w_i after its last period; only for deployed="local"


class PFedMe(Algorithm):
    name = "pfedme"

    def __init__(
        self,
        lam: float = 0.5,
        personal_lr: float = 0.2,
        inner_steps: int = 3,
        beta: float = 1.0,
        weight_decay: float = 1e-4,
        restart_from_global: bool = True,
        deployed: str = "theta",
    ):
        if inner_steps < 1:
            raise ValueError(f"inner_steps must be >= 1, got {inner_steps}")
        if deployed not in DEPLOYED:
            raise ValueError(f"deployed must be one of {', '.join(map(repr, DEPLOYED))}, got {deployed!r}")
        self.deployed = deployed
        self.lam, self.personal_lr, self.inner_steps, self.beta = lam, personal_lr, int(inner_steps), beta
        self.weight_decay = weight_decay
        self.restart_from_global = restart_from_global

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> PFedMeState:
        last_local = net.replicate(n_clients) if self.deployed == "local" else None
        return PFedMeState(net, net.params(), None, net.replicate(n_clients), generator, last_local)

    def start_round(self, state: PFedMeState, selected: Tensor) -> None:
        state.local = stack(state.global_params, len(selected))
        if self.restart_from_global:
            put(state.theta, selected, expand(state.global_params, len(selected)))

    def local_step(self, state: PFedMeState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        net, lam, eta_p, wd = state.net, self.lam, self.personal_lr, self.weight_decay

        def client(w: Params, theta: Params, xb: Tensor, yb: Tensor):
            losses = []
            for _ in range(self.inner_steps):
                g, loss = grad_and_value(lambda th: net.loss(th, xb, yb))(theta)
                losses.append(loss)
                theta = {k: t - eta_p * (g[k] + lam * (t - w[k]) + wd * t) for k, t in theta.items()}
            return {k: v - lr * lam * (v - theta[k]) for k, v in w.items()}, theta, losses[0]

        state.local, theta_hat, losses = net.map(client, state.local, take(state.theta, selected), x, y)
        put(state.theta, selected, theta_hat)
        return losses

    def sync(self, state: PFedMeState, selected: Tensor) -> None:
        if state.last_local is not None:
            put(state.last_local, selected, state.local)
        avg = mean(state.local)
        state.global_params = {k: (1 - self.beta) * v + self.beta * avg[k] for k, v in state.global_params.items()}
        state.local = None

    def deployed_params(self, state: PFedMeState, ctx: EvalContext | None = None) -> Params:
        return state.theta if state.last_local is None else state.last_local


__all__ = ["PFedMe", "PFedMeState"]
