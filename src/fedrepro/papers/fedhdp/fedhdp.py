"""FedHDP (Aldaghri, Mahdavifar, Beirami, "Federated Learning with Heterogeneous Differential Privacy", Alg. 2;
docs/notes/fedhdp.md section 2.5) on the shared engine, two privacy levels: private clients and non-private (opt-out).

Round t (the engine samples K clients; each runs tau local SGD steps from the global model theta^t):

    Delta_j = theta_j - theta^t,  clipped to S^t for private clients (and for non-private ones if
              ``clip_nonprivate``), bit b_j = 1[||Delta_j|| <= S^t] from every clipped client
    per group i (non-private np, private p), N_i the realized count:
        Delta~_np = (1/N_np) sum_{np} Delta_j                                  (z_np = 0)
        Delta~_p  = (1/N_p)  sum_{p}  clip(Delta_j) + N(0, (z S^t / N_p)^2 I)  (Gaussian mechanism, sensitivity S^t)
    Delta = w_np Delta~_np + w_p Delta~_p,  w_np = N_np / (N_np + r N_p),  w_p = r N_p / (N_np + r N_p)
    theta^{t+1} = theta^t + Delta                                             (server learning rate 1)
    S^{t+1} from the noisy count of the bits (:class:`fedrepro.learning.adaptive_clip.AdaptiveClip`)

plus Ditto personal models (:class:`fedrepro.learning.ditto.Ditto`) with lambda_p / lambda_np, trained on the same
minibatches. r = 1 is HDP-FedAvg (:mod:`fedrepro.papers.fedhdp.hdp_fedavg`): the group noise zS/N_p weighted by N_p/K
is the DP-FedAvg noise zS/K on the mean, so with clipped non-private updates r = 1 gives exactly DP-FedAvg's
update (docs/notes/fedhdp.md §7.4; tested). All clients non-private gives FedAvg (+ Ditto). With r = 0 the server uses
only the
non-private clients: private clients are never trained (neither globally nor personally; docs/notes/fedhdp.md §2.5,
C13), and a
round without a non-private client leaves the model unchanged (docs/notes/fedhdp.md §7.18). How the server picks its
round's
clients at r = 0 is a reading (App. C: "the server only communicates with non-private clients during training"):
``r0_population="all"`` (default) samples K of all m clients and uses the ~rho_np K non-private ones among them;
``"nonprivate"`` samples K of the non-private clients only (all of them if fewer than K).

GAPs (docs/notes/fedhdp.md §7.16): non-private updates are not clipped by default (they carry no guarantee and the
NON-PRIVATE
baseline is plain FedAvg); ``clip_nonprivate=True`` follows Alg. 2 literally (every ClientUpdate clips). Only
clipped clients report bits. The engine samples a fixed K per round (accounting at q = K/m, docs/notes/fedhdp.md §7.15).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedrepro.learning.adaptive_clip import AdaptiveClip
from fedrepro.learning.ditto import Ditto, DittoAlgorithmMixin, DittoState
from fedrepro.learning.dp import client_norms, gaussian_noise
from fedrepro.learning.engine import Algorithm
from fedrepro.learning.net import Net, Params, expand

R0_POPULATIONS = ("all", "nonprivate")


@dataclass
class FedHDPState:
    net: Net
    n_clients: int
    global_params: Params
    local: Params | None
    generator: torch.Generator
    private: Tensor  # (n_clients,) bool
    clip: float  # S^t
    ditto: DittoState | None
    skipped: int = 0  # rounds that left the model unchanged (r = 0 and no non-private client)
    no_private: int = 0  # rounds without a private client among those used (no noise drawn)


class FedHDP(DittoAlgorithmMixin, Algorithm):
    """``private``: (n_clients,) bools (True = private) or None (all private); ``r`` the private:non-private weight
    ratio; ``noise_multiplier`` z of the private group's update (z_update, see adaptive_clip); ``clip`` an
    :class:`AdaptiveClip`, a mapping of its fields (init, quantile, lr, count_std) or a fixed clip norm;
    ``lams``: Ditto lambda pairs (lambda_p, lambda_np) or single lambdas, None = no personalization."""

    name = "fedhdp"

    def __init__(
        self,
        private: Sequence[bool] | np.ndarray | None = None,
        r: float = 1.0,
        noise_multiplier: float = 0.0,
        clip: AdaptiveClip | Mapping[str, float] | float = 1.0,
        lams: Sequence[float | Sequence[float]] | None = None,
        clip_nonprivate: bool = False,
        weight_decay: float = 0.0,
        r0_population: str = "all",
    ):
        if not r >= 0 or not noise_multiplier >= 0:
            raise ValueError(f"need r >= 0 and noise_multiplier >= 0, got r={r}, z={noise_multiplier}")
        self.private = None if private is None else np.asarray(private, dtype=bool)
        self.r = float(r)
        self.noise_multiplier = float(noise_multiplier)
        self.clip = AdaptiveClip.parse(clip)
        self.ditto = Ditto(lams) if lams else None
        self.clip_nonprivate = clip_nonprivate
        self.weight_decay = weight_decay
        if r0_population not in R0_POPULATIONS:
            raise ValueError(f"r0_population must be one of {R0_POPULATIONS}, got {r0_population!r}")
        self.r0_population = r0_population
        self.state: FedHDPState | None = None  # the last trained state (the experiment evaluates it after training)

    # ---------------------------------------------------------------------------------------------- engine hooks

    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> FedHDPState:
        g = net.params()
        device = next(iter(g.values())).device
        if self.private is None:
            private = torch.ones(n_clients, dtype=torch.bool, device=device)
        else:
            if self.private.shape != (n_clients,):
                raise ValueError(f"private has {self.private.shape} entries for {n_clients} clients")
            private = torch.from_numpy(self.private).to(device)
        ditto = self.ditto.init_state(g, n_clients) if self.ditto else None
        if self.r == 0 and self.r0_population == "nonprivate":
            self.population = np.flatnonzero(~private.cpu().numpy())
            if not len(self.population):
                raise ValueError("r = 0 with r0_population='nonprivate' needs at least one non-private client")
        self.state = FedHDPState(net, n_clients, g, None, generator, private, self.clip.init, ditto)
        return self.state

    def _active(self, state: FedHDPState, selected: Tensor) -> Tensor:
        """Selected clients that take part this round (r = 0: only the non-private ones)."""
        if self.r > 0:
            return torch.ones(len(selected), dtype=torch.bool, device=selected.device)
        return ~state.private[selected]

    def start_round(self, state: FedHDPState, selected: Tensor) -> None:
        self.start_local_and_personal(state, selected, state.private, self._active(state, selected))

    def sync(self, state: FedHDPState, selected: Tensor) -> None:
        K = len(selected)
        local = self.local_models(state)
        deltas = {k: v - w for (k, v), w in zip(local.items(), expand(state.global_params, K).values())}
        state.local = None
        if state.ditto is not None:
            self.ditto.finish_round(state.ditto)
        priv = state.private[selected]
        use = self._active(state, selected)
        clipped = (priv | self.clip_nonprivate) & use
        S = state.clip
        update, norms = aggregate(deltas, priv, use, clipped, S, self.r, self.noise_multiplier, state.generator)
        state.no_private += not bool((priv & use).any())
        if update is None:
            state.skipped += 1
        else:
            state.global_params = {k: w + update[k] for k, w in state.global_params.items()}
        state.clip = self.clip.update(S, AdaptiveClip.bits(norms, S), state.generator)

    def metrics(self, state: FedHDPState) -> dict[str, float]:
        return {"clip": float(state.clip), "skipped_rounds": float(state.skipped)}


def aggregate(
    deltas: Params,
    priv: Tensor,
    use: Tensor,
    clipped: Tensor,
    S: float,
    r: float,
    noise_multiplier: float,
    generator: torch.Generator,
) -> tuple[Params | None, Tensor]:
    """Alg. 2's server step from the round's client updates ``deltas`` (stacked (K, ...); ``priv``, ``use``,
    ``clipped``: (K,) bools): each ``clipped`` client's whole update scaled to L2 norm <= S, per group the mean over
    its ``use``d clients, the private group's plus N(0, (z S / N_p)^2), combined with weights N_np : r N_p. Returns
    the update (None when no client counts) and the clipped clients' norms before clipping (their bits move S)."""
    norms = client_norms(deltas)
    scale = torch.where(clipped, (S / norms).clamp(max=1.0), torch.ones_like(norms))
    deltas = {k: v * scale.reshape(-1, *([1] * (v.dim() - 1))) for k, v in deltas.items()}
    n_np, n_p = int((~priv & use).sum()), int((priv & use).sum())
    denom = n_np + r * n_p
    if denom == 0:
        return None, norms[clipped]
    w_np, w_p = n_np / denom, r * n_p / denom
    update = {k: torch.zeros_like(v[0]) for k, v in deltas.items()}
    if n_np:
        m = (~priv & use).to(norms.dtype)
        update = {k: u + w_np * _masked_mean(deltas[k], m, n_np) for k, u in update.items()}
    if n_p and w_p > 0:
        m = (priv & use).to(norms.dtype)
        group = {k: _masked_mean(deltas[k], m, n_p) for k in deltas}
        if noise_multiplier > 0:
            noise = gaussian_noise(group, noise_multiplier * S / n_p, generator)
            group = {k: v + noise[k] for k, v in group.items()}
        update = {k: u + w_p * group[k] for k, u in update.items()}
    return update, norms[clipped]


def _masked_mean(v: Tensor, mask: Tensor, n: int) -> Tensor:
    return (v * mask.reshape(-1, *([1] * (v.dim() - 1)))).sum(0) / n


__all__ = ["FedHDP", "FedHDPState", "aggregate"]
