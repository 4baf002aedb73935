"""DP-FedAvg with adaptive clipping (McMahan et al. 2018 with the quantile-based clip of Andrew et al. 2019), the
DP-FEDAVG baseline of FedHDP (Aldaghri et al., Sec. 5, App. C; docs/notes/fedhdp.md section 2.5): every client is
private with the same (epsilon, delta).

Round t: the K sampled clients run tau local SGD steps from theta^t; each update Delta_j = theta_j - theta^t is
clipped to the current norm S^t and reports b_j = 1[||Delta_j|| <= S^t]; the server sets

    theta^{t+1} = theta^t + (1/K) ( sum_j clip(Delta_j) + N(0, (z S^t)^2 I) )

and moves S with the noisy count (:class:`fedrepro.learning.adaptive_clip.AdaptiveClip`). z is the update noise
multiplier (z_update; the accountant uses z_eff, see adaptive_clip). Written independently of
:mod:`fedrepro.papers.fedhdp.fedhdp` (shared pieces: clipping norms, noise, the clip rule, Ditto), so the tests can
check that FedHDP with r = 1 reduces to it. ``lams`` adds Ditto personal models (DP-FedAvg+Ditto).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedrepro.learning.adaptive_clip import AdaptiveClip
from fedrepro.learning.ditto import Ditto, DittoAlgorithmMixin, DittoState
from fedrepro.learning.dp import client_norms, clip_per_client, gaussian_noise
from fedrepro.learning.engine import Algorithm
from fedrepro.learning.net import Net, Params


@dataclass
class DPFedAvgAdaptiveState:
    net: Net
    n_clients: int
    global_params: Params
    local: Params | None
    generator: torch.Generator
    clip: float
    ditto: DittoState | None


class DPFedAvgAdaptive(DittoAlgorithmMixin, Algorithm):
    name = "dp_fedavg_adaptive"

    def __init__(
        self,
        noise_multiplier: float = 0.0,
        clip: AdaptiveClip | Mapping[str, float] | float = 1.0,
        lams: Sequence[float] | None = None,
        weight_decay: float = 0.0,
    ):
        self.noise_multiplier = float(noise_multiplier)
        self.clip = AdaptiveClip.parse(clip)
        self.ditto = Ditto(lams) if lams else None
        self.weight_decay = weight_decay
        self.state: DPFedAvgAdaptiveState | None = None

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> DPFedAvgAdaptiveState:
        g = net.params()
        self.state = DPFedAvgAdaptiveState(
            net,
            n_clients,
            g,
            None,
            generator,
            self.clip.init,
            self.ditto.init_state(g, n_clients) if self.ditto else None,
        )
        return self.state

    def start_round(self, state: DPFedAvgAdaptiveState, selected: Tensor) -> None:
        self.start_local_and_personal(state, selected)

    def sync(self, state: DPFedAvgAdaptiveState, selected: Tensor) -> None:
        K = len(selected)
        deltas = {k: v - state.global_params[k] for k, v in self.local_models(state).items()}
        state.local = None
        if state.ditto is not None:
            self.ditto.finish_round(state.ditto)
        S = state.clip
        norms = client_norms(deltas)
        mean = {k: v.sum(0) / K for k, v in clip_per_client(deltas, S).items()}
        if self.noise_multiplier > 0:
            noise = gaussian_noise(mean, self.noise_multiplier * S / K, state.generator)
            mean = {k: v + noise[k] for k, v in mean.items()}
        state.global_params = {k: w + mean[k] for k, w in state.global_params.items()}
        state.clip = self.clip.update(S, AdaptiveClip.bits(norms, S), state.generator)

    def metrics(self, state: DPFedAvgAdaptiveState) -> dict[str, float]:
        return {"clip": float(state.clip)}


__all__ = ["DPFedAvgAdaptive"]
