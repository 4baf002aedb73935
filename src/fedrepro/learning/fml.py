"""Federated Mutual Learning, FML (Shen, Zhang, Zhu, Wu, Wang, Kuang, Wu 2020, arXiv:2006.16765), the "Federated
ML" baseline of Ozkara et al. 2023 (Table 1, App. K.1/K.2; docs/notes/adaped.md sections 2.12 and 7.24), vectorized
over clients.

Client i holds a private model theta_i (never sent, deployed) and a copy w_i of the shared "meme" model. Each
local iteration of a selected client, on one minibatch, deep-mutual-learning style:

    L_local = alpha CE(y, p_theta) + (1 - alpha) KL(p_w || p_theta)      (p_w a constant: teacher detached)
    L_meme  = beta  CE(y, p_w)     + (1 - beta)  KL(p_theta || p_w)      (p_theta a constant)
    theta_i <- theta_i - lr (grad_theta L_local + weight_decay theta_i)
    w_i     <- w_i     - lr (grad_w     L_meme  + weight_decay w_i)

with KL(p_a || p_b) = losses.kd_loss(teacher=a, student=b) (batch mean, temperature 1). At the start of a period
the selected clients receive the meme model w; at its end the server sets w = (1/K) sum of the selected w_i
(unweighted). The skeleton (state, broadcast, aggregation, deployment) is QuPeD's
:class:`fedrepro.learning.quped.DistillationPair`.

Readings, defaults and GAPs:
- Simultaneous updates: both gradients are taken at the current pair (theta_i, w_i) from the same forward pass,
  each model's partner logits treated as constants (as in deep mutual learning); unlike QuPeD/AdaPeD the meme step
  does not see the updated theta_i.
- alpha = beta = 0.25 (K.1/K.2: "authors do not discuss the hyperparameters"; we used alpha = beta = 0.25).
- Both models use the engine's scheduled lr (K.1: "global model has the same learning schedule as the personalized
  models"). Weight decay 1e-4 (K.1, "all runs") on both. Plain SGD without momentum.
- theta_i^0 = w^0 = the template initialization (the FML paper allows different architectures; one is used here).
- Training loss reported per client: CE of theta_i before the step; metric ``kd``: mean KL(p_w || p_theta) over
  the clients of the latest step, before it.
"""

from __future__ import annotations

from torch import Tensor
from torch.func import grad, vjp
from torch.nn import functional as F

from fedrepro.learning.losses import kd_loss
from fedrepro.learning.net import Net, Params, sgd
from fedrepro.learning.quped import DistillationPair


class FML(DistillationPair):
    name = "fml"

    def __init__(self, alpha: float = 0.25, beta: float = 0.25, weight_decay: float = 1e-4):
        self.alpha, self.beta, self.weight_decay = alpha, beta, weight_decay

    def client_step(
        self, net: Net, theta: Params, w: Params, x: Tensor, y: Tensor, lr: float
    ) -> tuple[Params, Params, Tensor, Tensor]:
        a, b = self.alpha, self.beta
        logits_t, theta_vjp = vjp(lambda p: net.logits(p, x), theta)
        logits_w, w_vjp = vjp(lambda p: net.logits(p, x), w)

        def local_loss(lt: Tensor):
            ce, kd = F.cross_entropy(lt, y), kd_loss(logits_w, lt)
            return a * ce + (1 - a) * kd, (ce, kd)

        gt, (ce, kd) = grad(local_loss, has_aux=True)(logits_t)
        gw = grad(lambda lw: b * F.cross_entropy(lw, y) + (1 - b) * kd_loss(logits_t, lw))(logits_w)
        (g,), (h,) = theta_vjp(gt), w_vjp(gw)
        return sgd(theta, g, lr, self.weight_decay), sgd(w, h, lr, self.weight_decay), ce, kd


__all__ = ["FML"]
