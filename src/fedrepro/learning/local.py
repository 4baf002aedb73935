"""Local training baseline (docs/notes/adaped.md section 2.12; Ozkara et al. 2023, Fig. 1b and Table 3): every client
runs SGD on
its own cross-entropy f_i only; no server, no communication. Deployed model: the client's own.

GAP defaults: all clients start from the same initialization (the template model); weight decay 1e-4 (K.1,
"all runs"). Every client steps at every iteration, sampled or not (``steps_unsampled``): client sampling only
schedules communication, which local training has none of (Fig. 1b compares it with DP-AdaPeD at sampling 0.33).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedrepro.learning.engine import Algorithm, EvalContext, client_sgd
from fedrepro.learning.net import Net, Params, put, take


@dataclass
class LocalState:
    net: Net
    theta: Params  # (m, ...) per-client models
    generator: torch.Generator


class Local(Algorithm):
    """Each client: theta_i <- theta_i - lr (grad f_i(theta_i; batch) + weight_decay theta_i)."""

    name = "local"
    steps_unsampled = True

    def __init__(self, weight_decay: float = 1e-4):
        self.weight_decay = weight_decay

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> LocalState:
        return LocalState(net, net.replicate(n_clients), generator)

    def local_step(self, state: LocalState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        theta, losses = client_sgd(state.net, take(state.theta, selected), x, y, lr, self.weight_decay)
        put(state.theta, selected, theta)
        return losses

    def unsampled_step(self, state: LocalState, x: Tensor, y: Tensor, unselected: Tensor, lr: float) -> None:
        self.local_step(state, x, y, unselected, lr)

    def deployed_params(self, state: LocalState, ctx: EvalContext | None = None) -> Params:
        return state.theta


__all__ = ["Local", "LocalState"]
