"""QuPeD in full precision (Ozkara, Singh, Data, Diggavi, NeurIPS 2021, "QuPeD: Quantized Personalization via
Distillation with Applications to Federated Learning"), the "QuPeD (FP)" baseline of Ozkara et al. 2023 (Table 1,
App. K.1/K.2; docs/notes/adaped.md sections 2.12 and 7.24), vectorized over clients. No quantization.

Client i holds a personalized model theta_i (never sent, deployed) and a copy w_i of the global model. Each local
iteration of a selected client, on one minibatch:

    theta_i <- theta_i - eta1 (grad_theta [CE(theta_i) + lam_p f^KD(theta_i, w_i)]     + weight_decay theta_i)
    w_i     <- w_i     - eta2 (grad_w     [CE(w_i)     + lam_p f^KD(w_i, theta_i_new)] + weight_decay w_i)

    f^KD(a, b) = batch mean of KL( softmax(g_b(x)) || softmax(g_a(x)) )   (losses.kd_loss(teacher=b, student=a))

At the start of a period the selected clients receive w; at its end the server sets w = (1/K) sum of the selected
w_i (unweighted, latest values, as AdaPeD). :class:`DistillationPair` holds this two-models-per-client skeleton
(state, broadcast, aggregation, deployment); QuPeD and FML (fedrepro.learning.fml) differ only in the client step.

Readings, defaults and GAPs:
- f^KD as in docs/notes/adaped.md (section 2.9 / 7.6): first argument the student, second the teacher, temperature 1.
  Each update differentiates only the model being updated; the other model's logits are a constant (teacher
  detached). GAP: as a joint objective f_i(theta) + f_i(w) + lam_p [f^KD(theta, w) + f^KD(w, theta)], grad_w would
  also contain the teacher-side term grad_w f^KD(theta, w); docs/notes/adaped.md's reconstruction (section 2.12) drops
  it and
  so do we.
- GAP: the QuPeD paper (not in the shared material; recalled, unverified) weights the CE terms by (1 - lam_p); the
  docs/notes/adaped.md's form CE + lam_p f^KD is implemented (with lam_p = 0.25 the KD/CE ratio is 0.25 instead of 1/3).
- Alternating / sequential, as AdaPeD's Alg. 2: the w step uses the already updated theta_i (theta_i_new) as its
  teacher, on the same minibatch.
- eta1 is the engine's scheduled lr; eta2 = ``global_lr_ratio`` * eta1 (K.1: eta1 = "eta3" = 0.1, K.2: eta1 =
  eta2 = 0.1, so ratio 1 and both follow the x0.99-per-epoch schedule). lam_p = 0.25 (K.1, K.2). Weight decay
  1e-4 (K.1, "all runs") on both models. Plain SGD without momentum.
- theta_i^0 = w^0 = the template initialization.
- Training loss reported per client: CE of theta_i before the step; metric ``kd``: mean f^KD(theta_i, w_i) over
  the clients of the latest step, before it.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.func import grad, vjp
from torch.nn import functional as F

from fedrepro.learning.engine import Algorithm, EvalContext
from fedrepro.learning.losses import kd_loss
from fedrepro.learning.net import Net, Params, mean, put, sgd, take


@dataclass
class DistillationPairState:
    net: Net
    theta: Params  # (m, ...) personalized / private models (deployed)
    w: Params  # (m, ...) clients' copies of the shared (averaged) model
    w_global: Params  # no client axis
    generator: torch.Generator
    last_kd: Tensor = field(default_factory=lambda: torch.tensor(float("nan")))


class DistillationPair(Algorithm):
    """Two models per client: theta_i (personal, deployed) and w_i (shared, averaged over the selected clients at
    every synchronization). Subclasses define one client's local iteration, :meth:`client_step`."""

    weight_decay: float

    @abstractmethod
    def client_step(
        self, net: Net, theta: Params, w: Params, x: Tensor, y: Tensor, lr: float
    ) -> tuple[Params, Params, Tensor, Tensor]:
        """One client (no client axis): (theta_new, w_new, CE of theta before the step, KL(p_w || p_theta))."""

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> DistillationPairState:
        return DistillationPairState(net, net.replicate(n_clients), net.replicate(n_clients), net.params(), generator)

    def start_round(self, state: DistillationPairState, selected: Tensor) -> None:
        for k, v in state.w.items():
            v[selected] = state.w_global[k]

    def local_step(self, state: DistillationPairState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        net = state.net
        theta_new, w_new, ce, kd = net.map(
            lambda th, w, xb, yb: self.client_step(net, th, w, xb, yb, lr),
            take(state.theta, selected),
            take(state.w, selected),
            x,
            y,
        )
        put(state.theta, selected, theta_new)
        put(state.w, selected, w_new)
        state.last_kd = kd.mean()
        return ce

    def sync(self, state: DistillationPairState, selected: Tensor) -> None:
        state.w_global = mean(take(state.w, selected))

    def deployed_params(self, state: DistillationPairState, ctx: EvalContext | None = None) -> Params:
        return state.theta

    def metrics(self, state: DistillationPairState) -> dict[str, float]:
        return {"kd": float(state.last_kd)}


class QuPeD(DistillationPair):
    name = "quped"

    def __init__(self, lam_p: float = 0.25, global_lr_ratio: float = 1.0, weight_decay: float = 1e-4):
        self.lam_p, self.global_lr_ratio, self.weight_decay = lam_p, global_lr_ratio, weight_decay

    def client_step(
        self, net: Net, theta: Params, w: Params, x: Tensor, y: Tensor, lr: float
    ) -> tuple[Params, Params, Tensor, Tensor]:
        lam, wd = self.lam_p, self.weight_decay
        logits_w, w_vjp = vjp(lambda p: net.logits(p, x), w)

        def theta_objective(th: Params):
            logits = net.logits(th, x)
            ce, kd = F.cross_entropy(logits, y), kd_loss(logits_w, logits)
            return ce + lam * kd, (ce, kd)

        g, (ce, kd) = grad(theta_objective, has_aux=True)(theta)
        theta_new = sgd(theta, g, lr, wd)
        teacher = net.logits(theta_new, x)
        (h,) = w_vjp(grad(lambda lw: F.cross_entropy(lw, y) + lam * kd_loss(teacher, lw))(logits_w))
        return theta_new, sgd(w, h, self.global_lr_ratio * lr, wd), ce, kd


__all__ = ["DistillationPair", "DistillationPairState", "QuPeD"]
