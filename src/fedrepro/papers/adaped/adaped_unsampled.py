"""AdaPeD with unsampled client iterations, Algorithm 7 (Ozkara et al., ICLR 2023, App. H.2; docs/notes/adaped.md
section 2.10),
used with DP for Fig. 1b.

Identical to :class:`fedrepro.papers.adaped.adaped.AdaPeD` (Alg. 2, and DP-AdaPeD with ``dp_mu``/``dp_psi``) for the K
sampled clients. In addition, at every iteration each client *not* sampled in the current period updates its
personalized model only (lines 8-10):

    g_i = grad_theta [ f_i(theta_i) + f^KD(theta_i, mu_i^{t'_i}) / (2 psi_i^{t'_i}) ],   theta_i <- theta_i - eta1 g_i

where t'_i is the last time client i *received* the global parameters (mu^{t'_i}, psi^{t'_i}) from the server (read
literally: the received copy, not the client's locally updated mu_i). Before its first participation a client
uses the initialization mu^0, psi^0 (the algorithm's parameters). These steps release nothing, so they cost no
privacy (theta_i never leaves the client): the accounting of DP-AdaPeD is unchanged.

GAP: the paper suggests an optional cap on consecutive unsynchronized steps and gives no value; none is applied
(``max_unsynced`` = None), or a client stops its unsampled steps after that many since its last participation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad
from torch.nn import functional as F

from fedrepro.learning.losses import kd_loss
from fedrepro.learning.net import Net, Params, put, sgd, take
from fedrepro.papers.adaped.adaped import AdaPeD, AdaPeDState


@dataclass
class AdaPeDUnsampledState(AdaPeDState):
    mu_received: Params = field(default_factory=dict)  # (m, ...) mu^{t'_i}: last broadcast each client got
    psi_received: Tensor | None = None  # (m,)    psi^{t'_i}
    unsynced: Tensor | None = None  # (m,)    unsampled steps since last participation


class AdaPeDUnsampled(AdaPeD):
    name = "adaped_unsampled"
    steps_unsampled = True

    def __init__(self, *args, max_unsynced: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if max_unsynced is not None and max_unsynced < 0:
            raise ValueError(f"max_unsynced must be >= 0 or None, got {max_unsynced}")
        self.max_unsynced = max_unsynced

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> AdaPeDUnsampledState:
        base = super().init_state(net, n_clients, generator)
        return AdaPeDUnsampledState(
            **vars(base),
            mu_received=net.replicate(n_clients),
            psi_received=base.psi.clone(),
            unsynced=torch.zeros(n_clients, dtype=torch.long, device=base.psi.device),
        )

    def start_round(self, state: AdaPeDUnsampledState, selected: Tensor) -> None:
        super().start_round(state, selected)
        put(state.mu_received, selected, {k: v[selected] for k, v in state.mu.items()})
        state.psi_received[selected] = state.psi_global
        state.unsynced[selected] = 0

    def unsampled_step(self, state: AdaPeDUnsampledState, x: Tensor, y: Tensor, unselected: Tensor, lr: float) -> None:
        if self.max_unsynced is not None:
            keep = state.unsynced[unselected] < self.max_unsynced
            unselected, x, y = unselected[keep], x[keep], y[keep]
            if len(unselected) == 0:
                return
        net, wd = state.net, self.weight_decay

        def theta_step(theta: Params, mu: Params, psi: Tensor, xb: Tensor, yb: Tensor) -> Params:
            logits_mu = net.logits(mu, xb)

            def objective(th: Params) -> Tensor:
                logits = net.logits(th, xb)
                return F.cross_entropy(logits, yb) + kd_loss(logits_mu, logits) / (2 * psi)

            return sgd(theta, grad(objective)(theta), lr, wd)

        theta_new = net.map(
            theta_step,
            take(state.theta, unselected),
            take(state.mu_received, unselected),
            state.psi_received[unselected],
            x,
            y,
        )
        put(state.theta, unselected, theta_new)
        state.unsynced[unselected] += 1


__all__ = ["AdaPeDUnsampled", "AdaPeDUnsampledState"]
