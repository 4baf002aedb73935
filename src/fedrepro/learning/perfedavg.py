"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach"), first-order variant (Per-FedAvg FO), as a baseline of Ozkara et
al. 2023 (App. K.1; docs/notes/adaped.md section 2.12), vectorized over clients.

Each local step of a selected client draws two disjoint minibatches D, D' (``batches_per_step = 2``) and, from its
local copy w_i of the global model,

    w'  = w_i - alpha (grad f_i(w_i; D) + weight_decay w_i)
    w_i <- w_i - beta (grad f_i(w'; D') + weight_decay w_i)       (beta: the engine's scheduled lr)

FO: the gradient at w' is applied to w_i as is (no Hessian term). The server averages like FedAvg (the synchronization
is FedAvg's). Deployed model: every client adapts a copy of the current global w with ``eval_steps`` SGD steps of lr
alpha on fresh minibatches of its own training data (FedAvgFT's fine-tuning at lr alpha; the copies are discarded).

Defaults and GAPs:
- Variant not stated (docs/notes/adaped.md section 7 item 24): default FO, which is also what the Per-FedAvg
implementation in the
  pFedMe repository (``userperavg.py``) that the paper says it built on computes.
- alpha = 0.001 (K.1; K.2 uses 1e-4); the outer lr beta is the tuned main lr (K.1: 0.075, K.2: 0.1) with the engine's
  schedule; alpha is constant.
- Evaluation: one adaptation step with lr alpha on a training minibatch of size ``batch_size`` (``eval_steps`` = 1;
  the official code adapts on a *test* minibatch, which we do not copy).
- Weight decay 1e-4 (App. K, "all runs") is added at both steps and in the evaluation step, as a PyTorch SGD
  optimizer with weight decay would (at the outer step it acts on w_i, the parameters being updated).
- The returned training loss is f_i(w_i; D).
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from fedrepro.learning.engine import EvalContext, client_grads
from fedrepro.learning.fedavg import FedAvgFT, FedAvgState
from fedrepro.learning.net import Params, sgd, split_batches


class PerFedAvg(FedAvgFT):
    name = "perfedavg"
    batches_per_step = 2

    def __init__(self, alpha: float = 1e-3, eval_steps: int = 1, weight_decay: float = 1e-4):
        super().__init__(ft_steps=int(eval_steps), weight_decay=weight_decay)
        self.alpha = alpha

    @property
    def eval_steps(self) -> int:
        return self.ft_steps

    def local_step(self, state: FedAvgState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        (x1, y1), (x2, y2) = split_batches(x, y, 2)
        g, losses = client_grads(state.net, state.local, x1, y1)
        adapted = sgd(state.local, g, self.alpha, self.weight_decay)
        g_adapted, _ = client_grads(state.net, adapted, x2, y2)
        state.local = sgd(state.local, g_adapted, lr, self.weight_decay)
        return losses

    # its step, like FedAvg's, trains each client alone and draws nothing: FedAvg's client blocks hold for it
    block_bytes = FedAvgFT.block_bytes

    def deployed_params(self, state: FedAvgState, ctx: EvalContext | None = None) -> Params:
        return super().deployed_params(state, None if ctx is None else replace(ctx, lr=self.alpha))


__all__ = ["PerFedAvg"]
