"""FedAvg (McMahan et al., AISTATS 2017), FedAvg + fine-tuning (Jiang et al. 2019) and DP-FedAvg, as used for the
baselines of Ozkara et al. 2023 (docs/notes/adaped.md section 2.12).

FedAvg: at each synchronization the K selected clients start from the global model w, take tau local SGD steps
w_i <- w_i - lr (grad f_i(w_i; batch) + weight_decay w_i), and the server sets w = (1/K) sum_i w_i (unweighted, as
in docs/notes/adaped.md). Deployed model: w for every client.

FedAvgFT: FedAvg; at evaluation every client fine-tunes a copy of the current w for ``ft_steps`` local SGD steps
on its own training data at the current lr and is evaluated with the result (the copies are discarded).
GAP: the number of steps is not given; default one local epoch (``iters_per_epoch`` steps).

DP-FedAvg (``dp={"clip": C1, "noise_multiplier": z}``), docs/notes/adaped.md's default reading (section 2.12, Table 2):
at
every local step each selected client's whole minibatch gradient is clipped to C1 and N(0, (z C1)^2 I) is added,
exactly like DP-AdaPeD's mu update; weight decay is added after the noise (data independent). The common
alternative (clip the round's model delta, noise at the server) is not implemented.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from fedrepro.learning.dp import GaussianMechanism
from fedrepro.learning.engine import Algorithm, EvalContext, client_grads, client_sgd
from fedrepro.learning.net import Net, Params, expand, mean, param_bytes, rows_of, sgd, stack, write_rows


@dataclass
class FedAvgState:
    net: Net
    n_clients: int
    global_params: Params  # w, no client axis
    local: Params | None  # (K, ...) during a synchronization period
    generator: torch.Generator


class FedAvg(Algorithm):
    name = "fedavg"

    def __init__(self, weight_decay: float = 1e-4, dp: GaussianMechanism | Mapping[str, float] | None = None):
        self.weight_decay = weight_decay
        self.dp = GaussianMechanism.parse(dp)

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> FedAvgState:
        return FedAvgState(net, n_clients, net.params(), None, generator)

    def start_round(self, state: FedAvgState, selected: Tensor) -> None:
        state.local = stack(state.global_params, len(selected))

    def local_step(self, state: FedAvgState, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        """One SGD step of the sampled clients' models. Without DP the step may write into ``state.local``'s tensors
        (its own copies, made by :meth:`start_round`): the MLP's fused step then spares a copy of every model a step
        (a subclass that keeps the round's starting models must copy them)."""
        if self.dp is None:
            state.local, losses = client_sgd(state.net, state.local, x, y, lr, self.weight_decay, inplace=True)
            return losses
        grads, losses = client_grads(state.net, state.local, x, y)
        state.local = sgd(state.local, self.dp(grads, state.generator), lr, self.weight_decay)
        return losses

    def block_bytes(self, state: FedAvgState) -> int | None:
        """Without DP a local step trains each client alone and draws nothing: one client's model, this many
        bytes (with DP each step draws noise from the shared generator, in client order: no blocks)."""
        if self.dp is not None:
            return None
        return param_bytes(state.global_params)

    def client_block(self, state: FedAvgState, rows: slice) -> FedAvgState:
        return replace(state, local=rows_of(state.local, rows))

    def merge_client_block(self, state: FedAvgState, block: FedAvgState, rows: slice) -> None:
        write_rows(state.local, rows, block.local)

    def sync(self, state: FedAvgState, selected: Tensor) -> None:
        state.global_params, state.local = mean(state.local), None

    def deployed_params(self, state: FedAvgState, ctx: EvalContext | None = None) -> Params:
        return expand(state.global_params, state.n_clients)

    def diverged(self, state: FedAvgState) -> bool:
        # every round starts each client from the global model: once it holds a NaN or inf, so does every later
        # model (a subclass whose clients start elsewhere must say so here)
        return not all(bool(torch.isfinite(v).all()) for v in state.global_params.values())


class FedAvgFT(FedAvg):
    name = "fedavg_ft"

    def __init__(
        self,
        ft_steps: int | None = None,
        weight_decay: float = 1e-4,
        dp: GaussianMechanism | Mapping[str, float] | None = None,
    ):
        super().__init__(weight_decay, dp)
        self.ft_steps = ft_steps

    def deployed_params(self, state: FedAvgState, ctx: EvalContext | None = None) -> Params:
        if ctx is None:
            raise ValueError("FedAvgFT needs the EvalContext (local training data) to fine-tune")
        theta = stack(state.global_params, state.n_clients)
        clients = np.arange(state.n_clients)
        for _ in range(ctx.iters_per_epoch if self.ft_steps is None else self.ft_steps):
            x, y = ctx.data.sample(clients, ctx.batch_size, ctx.rng)
            theta, _ = client_sgd(state.net, theta, x, y, ctx.lr, self.weight_decay)
        return theta


__all__ = ["FedAvg", "FedAvgFT", "FedAvgState"]
