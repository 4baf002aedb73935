"""AdaPeD, Algorithm 2 (Ozkara et al., ICLR 2023, Sec. 3.2, eq. 11) and DP-AdaPeD (Sec. 3.3, App. I), vectorized
over clients (docs/notes/adaped.md sections 2.9 and 2.11).

Client i holds a personalized model theta_i (never sent), a copy mu_i of the global model and a scalar psi_i, and
minimizes (eq. 11)

    f_i(theta) + 1/2 log(2 psi) + f^KD(theta, mu) / (2 psi),
    f^KD(theta, mu) = batch mean of KL( softmax(g_mu(x)) || softmax(g_theta(x)) )   (temperature 1; App. H).

Each local iteration of a selected client, on one minibatch (Alg. 2, lines 10-15):

    g_i = grad_theta [CE(theta_i) + f^KD(theta_i, mu_i) / (2 psi_i)]        theta_i <- theta_i - eta1 g_i
    h_i = grad_mu f^KD(theta_i_new, mu_i) / (2 psi_i)                         mu_i    <- mu_i - eta2 h_i
    k_i = 1/(2 psi_i) - c f^KD(theta_i_new, mu_i_new) / (2 psi_i^2)           psi_i   <- max(psi_i - eta3 k_i, psi_min)

so mu is trained only through the KD term. At the start of a period the selected clients receive (mu, psi); at
its end the server sets mu = (1/K) sum mu_i, psi = (1/K) sum psi_i (latest values; docs/notes/adaped.md section 7.8).
Deployed
model: theta_i.

DP-AdaPeD (``dp_mu``, ``dp_psi``): lines 13 and 15 become mu_i <- mu_i - eta2 (clip_C1(h_i) + N(0, sigma_q1^2 I)),
psi_i <- psi_i - eta3 (clip_C2(k_i) + N(0, sigma_q2^2)) at every local iteration, sigma_qj = z_j C_j (user level:
the whole client minibatch gradient is clipped). theta's update and the aggregation are unchanged.

Defaults and GAPs: psi^0 = 3.5, psi_min = 0.5, eta3 = 5e-2, c = 5 (App. K.1: "multiplying the right term by some
constant (5 in our experiments)"; Alg. 2 prints c = 1); K.2 uses psi^0 = 4 (CIFAR) / 3 (FEMNIST), psi_min = 1.
eta1 is the engine's scheduled lr; eta2 = ``eta2_ratio`` * eta1 (the paper always has eta1 = eta2, so both
follow the x0.99-per-epoch schedule); eta3 is constant (GAP: the schedule is stated for the tuned model lr).
theta_i^0 = mu^0 = the template initialization. Weight decay (1e-4, "all runs") is added to the theta and mu
gradients (after clipping and noise in DP-AdaPeD), not to psi.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad, vjp
from torch.nn import functional as F

from fedrepro.learning.dp import GaussianMechanism
from fedrepro.learning.engine import Algorithm, EvalContext
from fedrepro.learning.losses import kd_loss
from fedrepro.learning.net import Net, Params, mean, put, sgd, take

DPSpec = GaussianMechanism | Mapping[str, float] | None


def psi_grad(psi: Tensor, kd: Tensor, c: float) -> Tensor:
    """k = 1/(2 psi) - c f^KD / (2 psi^2) (Alg. 2, line 14, with App. K.1's constant c)."""
    return 1 / (2 * psi) - c * kd / (2 * psi**2)


@dataclass
class AdaPeDState:
    net: Net
    theta: Params  # (m, ...) personalized models
    mu: Params  # (m, ...) clients' copies of the global model
    psi: Tensor  # (m,)
    mu_global: Params  # no client axis
    psi_global: Tensor  # 0-d
    generator: torch.Generator
    last_kd: Tensor = field(default_factory=lambda: torch.tensor(float("nan")))


class AdaPeD(Algorithm):
    name = "adaped"

    def __init__(
        self,
        psi0: float = 3.5,
        psi_min: float = 0.5,
        eta2_ratio: float = 1.0,
        eta3: float = 5e-2,
        c: float = 5.0,
        weight_decay: float = 1e-4,
        dp_mu: DPSpec = None,
        dp_psi: DPSpec = None,
    ):
        if not psi0 >= psi_min > 0:
            raise ValueError(f"need psi0 >= psi_min > 0, got psi0={psi0}, psi_min={psi_min}")
        self.psi0, self.psi_min, self.eta2_ratio, self.eta3, self.c = psi0, psi_min, eta2_ratio, eta3, c
        self.weight_decay = weight_decay
        self.dp_mu, self.dp_psi = GaussianMechanism.parse(dp_mu), GaussianMechanism.parse(dp_psi)

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> AdaPeDState:
        p = net.params()
        psi = torch.full((n_clients,), self.psi0, device=next(iter(p.values())).device)
        return AdaPeDState(net, net.replicate(n_clients), net.replicate(n_clients), psi, p, psi[0].clone(), generator)

    def start_round(self, state: AdaPeDState, selected: Tensor) -> None:
        for k, v in state.mu.items():
            v[selected] = state.mu_global[k]
        state.psi[selected] = state.psi_global

    def local_step(self, state: AdaPeDState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        net, wd = state.net, self.weight_decay

        def theta_and_h(theta: Params, mu: Params, psi: Tensor, xb: Tensor, yb: Tensor):
            logits_mu, mu_vjp = vjp(lambda m: net.logits(m, xb), mu)

            def objective(th: Params):
                logits = net.logits(th, xb)
                ce = F.cross_entropy(logits, yb)
                return ce + kd_loss(logits_mu, logits) / (2 * psi), ce

            g, ce = grad(objective, has_aux=True)(theta)
            theta_new = sgd(theta, g, lr, wd)
            logits_new = net.logits(theta_new, xb)
            (h,) = mu_vjp(grad(lambda lm: kd_loss(lm, logits_new) / (2 * psi))(logits_mu))
            return theta_new, h, logits_new, ce

        def kd_new(mu: Params, xb: Tensor, logits_new: Tensor) -> Tensor:
            return kd_loss(net.logits(mu, xb), logits_new)

        mu, psi = take(state.mu, selected), state.psi[selected]
        theta_new, h, logits_new, ce = net.map(theta_and_h, take(state.theta, selected), mu, psi, x, y)
        if self.dp_mu is not None:
            h = self.dp_mu(h, state.generator)
        mu_new = sgd(mu, h, self.eta2_ratio * lr, wd)
        kd = net.map(kd_new, mu_new, x, logits_new)
        k = psi_grad(psi, kd, self.c)
        if self.dp_psi is not None:
            k = self.dp_psi(k, state.generator)
        put(state.theta, selected, theta_new)
        put(state.mu, selected, mu_new)
        state.psi[selected] = (psi - self.eta3 * k).clamp(min=self.psi_min)
        state.last_kd = kd.mean()
        return ce

    def sync(self, state: AdaPeDState, selected: Tensor) -> None:
        state.mu_global = mean(take(state.mu, selected))
        state.psi_global = state.psi[selected].mean()

    def deployed_params(self, state: AdaPeDState, ctx: EvalContext | None = None) -> Params:
        return state.theta

    def metrics(self, state: AdaPeDState) -> dict[str, float]:
        return {"psi": float(state.psi_global), "kd": float(state.last_kd)}


__all__ = ["AdaPeD", "AdaPeDState", "kd_loss", "psi_grad"]
