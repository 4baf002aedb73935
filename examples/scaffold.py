"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", ICML 2020,
Alg. 1 with option II) as a method from outside the package:

    python -m fedrepro compare examples/scaffold.py:Scaffold --experiment ppsgd.x_fig1c_femnist_sample \\
        --scale quick --seeds 0 1 --lr 0.01 0.03 0.1 --out D

Each selected client i runs its local steps on y_i (from the global model x) with the corrected gradient
g_i(y_i) - c_i + c, then updates its control variate c_i+ = c_i - c + (x - y_i) / (steps lr) (option II) and sends
the server (Delta y_i, Delta c_i) = ((x - y_i) / lr, c_i+ - c_i); the server steps x <- x - global_lr lr mean(Delta y)
and c <- c + (K / N) mean(Delta c). Deployed model: x for every client.

Privacy by construction: the pair is sent through ``client_message`` / ``server_update``, so under a protocol that
releases client messages (PPSGD's: fedrepro.papers.ppsgd.method.release; FedHDP's: HDP-FedAvg's server step,
fedrepro.papers.fedhdp.hdp_fedavg.HDPFedAvgRelease) the protocol clips each private client's whole message
(Delta y_i / lr and Delta c_i together, one vector) and adds its noise, and the server state x and c
is computed from releases only: SCAFFOLD's control variate c, which re-enters every later message, is a function of
what the protocol released (post-processing), and each c_i is the client's own. Where the engine aggregates
(``sync``, the protocols without a release), the same update runs on the unclipped mean. Under AdaPeD's private
protocols the release is per local step instead: ``client_grads`` returns the protocol's clipped and noised
gradients (``x`` is a Released), and everything SCAFFOLD computes from them is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedrepro.learning.dp import GaussianMechanism
from fedrepro.learning.engine import Algorithm, EvalContext, client_grads
from fedrepro.learning.net import Net, Params, expand, mean, stack, take


@dataclass
class ScaffoldState:
    net: Net
    n_clients: int
    x: Params  # the global model, no client axis
    c: Params  # the server's control variate
    c_i: Params  # every client's control variate, stacked over all clients
    local: Params | None  # y_i of the selected clients during a period
    steps: int
    lr: float
    generator: torch.Generator


class Scaffold(Algorithm):
    name = "scaffold"

    def __init__(self, weight_decay: float = 0.0, dp=None, global_lr: float = 1.0):
        self.weight_decay = weight_decay
        self.global_lr = float(global_lr)
        self.dp = GaussianMechanism.parse(dp)  # a protocol that hands over dp= (no release of its own)

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> ScaffoldState:
        x = net.params()
        zeros = {k: torch.zeros_like(v) for k, v in x.items()}
        return ScaffoldState(net, n_clients, x, zeros, stack(zeros, n_clients), None, 0, 0.0, generator)

    def start_round(self, state: ScaffoldState, selected: Tensor) -> None:
        state.local, state.steps = stack(state.x, len(selected)), 0

    def local_step(self, state: ScaffoldState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        grads, losses = client_grads(state.net, state.local, x, y)
        if self.dp is not None:
            grads = self.dp(grads, state.generator)
        c_i = take(state.c_i, selected)
        state.local = {
            k: p - lr * (grads[k] - c_i[k] + state.c[k] + self.weight_decay * p) for k, p in state.local.items()
        }
        state.steps, state.lr = state.steps + 1, lr
        return losses

    def client_message(self, state: ScaffoldState, selected: Tensor) -> Params:
        dy = {k: (state.x[k] - v) / state.lr for k, v in state.local.items()}  # the period's step, per unit of lr
        c_old = take(state.c_i, selected)
        c_new = {k: c_old[k] - state.c[k] + dy[k] / state.steps for k in dy}  # option II
        for k, v in c_new.items():  # the client keeps its own control variate
            state.c_i[k][selected] = v
        return {**{f"y.{k}": v for k, v in dy.items()}, **{f"c.{k}": c_new[k] - c_old[k] for k in dy}}

    def server_update(self, state: ScaffoldState, selected: Tensor, released: Params) -> None:
        frac = len(selected) / state.n_clients
        state.x = {k: v - self.global_lr * state.lr * released[f"y.{k}"] for k, v in state.x.items()}
        state.c = {k: v + frac * released[f"c.{k}"] for k, v in state.c.items()}
        state.local = None

    def sync(self, state: ScaffoldState, selected: Tensor) -> None:
        self.server_update(state, selected, mean(self.client_message(state, selected)))

    def deployed_params(self, state: ScaffoldState, ctx: EvalContext | None = None) -> Params:
        return expand(state.x, state.n_clients)
