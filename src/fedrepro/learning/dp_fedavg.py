"""DP-FedAvg with server-side noise (McMahan, Ramage, Talwar, Zhang, ICLR 2018, "Learning Differentially Private
Recurrent Language Models"; the user-level DP-FedAvg that FedHDP and most DP-FL work build on).

At each synchronization the K sampled clients run tau local SGD steps from the global model w (as FedAvg). Each
client's model update Delta_i = w_i - w is clipped to L2 norm C (all parameters together,
:func:`fedrepro.learning.dp.clip_per_client`), and the server releases

    w <- w + (sum_i clip_C(Delta_i) + N(0, (z C)^2 I)) / K,

so one client changes the pre-noise sum by at most C and each round is a Gaussian mechanism with noise multiplier
z on a sum of sensitivity C, subsampled at K/m; :func:`fedrepro.papers.adaped.fl_privacy.plan_noise` calibrates z
with a library accountant (dp-accounting), never with a formula here. The fixed denominator K (not the realized
count) is McMahan et al.'s fixed-size estimator.

This is the "common alternative" docs/notes/adaped.md (section 2.12) mention beside the per-step local noise of
:class:`fedrepro.learning.fedavg.FedAvg` with ``dp=...``; which DP-FedAvg a table uses is a config choice.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from fedrepro.learning.dp import GaussianMechanism, clip_per_client, gaussian_noise
from fedrepro.learning.fedavg import FedAvg, FedAvgState
from fedrepro.learning.net import expand


class DPFedAvgServer(FedAvg):
    name = "dp_fedavg_server"

    def __init__(self, server_dp: GaussianMechanism | Mapping[str, float], weight_decay: float = 1e-4):
        super().__init__(weight_decay=weight_decay)
        self.server_dp = GaussianMechanism.parse(server_dp)
        if self.server_dp is None:
            raise ValueError("DPFedAvgServer needs server_dp={'clip': C, 'noise_multiplier': z}")

    def sync(self, state: FedAvgState, selected: Tensor) -> None:
        K = len(selected)
        deltas = {k: v - w for (k, v), w in zip(state.local.items(), expand(state.global_params, K).values())}
        total = {k: v.sum(0) for k, v in clip_per_client(deltas, self.server_dp.clip).items()}
        if self.server_dp.std > 0:
            total = tree_map(torch.add, total, gaussian_noise(total, self.server_dp.std, state.generator))
        state.global_params = {k: w + total[k] / K for k, w in state.global_params.items()}
        state.local = None


__all__ = ["DPFedAvgServer"]
