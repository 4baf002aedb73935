"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020) as a method from outside the
package: run it under a paper's protocol with

    python -m fedrepro compare examples/fedprox.py:FedProx \
        --experiment adaped.table4_femnist_sample --scale quick --out D

Each selected client minimizes its local objective f_i(w) + (mu/2) ||w - w_global||^2 by ``tau`` SGD steps starting
from the global model w_global; the server averages the K local models (unweighted, as the engine's FedAvg). Deployed
model: w_global for every client. With ``mu = 0`` it is FedAvg.

Under AdaPeD's private protocols the protocol applies the privacy (README "Compare your method"): ``x`` is the
step's Released minibatches and ``client_sgd`` takes each client's gradient of f_i clipped to C and noised with
N(0, (z C)^2 I), DP-FedAvg's mechanism; the proximal term depends only on released models and is added after the
noise. Under PPSGD's private protocols, which release client messages, a method without ``client_message`` (as this
one) is handed ``dp`` (clip C, noise multiplier z) and applies it to every gradient itself, the ``self.dp`` branch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedrepro.learning.dp import GaussianMechanism
from fedrepro.learning.engine import Algorithm, EvalContext, client_grads, client_sgd
from fedrepro.learning.net import Net, Params, expand, mean, stack


@dataclass
class FedProxState:
    net: Net
    n_clients: int
    global_params: Params  # w_global, no client axis
    local: Params | None  # (K, ...) during a synchronization period
    generator: torch.Generator


class FedProx(Algorithm):
    name = "fedprox"

    def __init__(self, mu: float = 0.01, weight_decay: float = 1e-4, dp=None):
        self.mu = float(mu)  # Li et al. tune mu in {0.001, 0.01, 0.1, 1}; 0.01 is one of their grid's values
        self.weight_decay = weight_decay
        self.dp = GaussianMechanism.parse(dp)

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> FedProxState:
        return FedProxState(net, n_clients, net.params(), None, generator)

    def start_round(self, state: FedProxState, selected: Tensor) -> None:
        state.local = stack(state.global_params, len(selected))

    def local_step(self, state: FedProxState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        anchor = state.global_params
        if self.dp is None:  # the engine's fused step with the proximal term mu (w_i - w_global)
            mu = torch.full((len(selected),), self.mu, device=selected.device)
            state.local, losses = client_sgd(state.net, state.local, x, y, lr, self.weight_decay, prox=(mu, anchor))
            return losses
        grads, losses = client_grads(state.net, state.local, x, y)
        noised = self.dp(grads, state.generator)
        state.local = {
            k: p - lr * (noised[k] + self.mu * (p - anchor[k]) + self.weight_decay * p) for k, p in state.local.items()
        }
        return losses

    def sync(self, state: FedProxState, selected: Tensor) -> None:
        state.global_params, state.local = mean(state.local), None

    def deployed_params(self, state: FedProxState, ctx: EvalContext | None = None) -> Params:
        return expand(state.global_params, state.n_clients)
