"""HDP-FedAvg (Aldaghri et al., Sec. 5 baselines; docs/notes/fedhdp.md section 2.5 "Experiment baselines"): private
clients are clipped and noised exactly as in DP-FedAvg, non-private clients are not noised, and the two groups are
combined with uniform per-client weights, i.e. FedHDP with r = 1 (:class:`fedrepro.papers.fedhdp.fedhdp.FedHDP`;
Sec. 5: "a special case of FedHDP with uniform averaging, i.e., r = 1"). The non-private updates are clipped only
with ``clip_nonprivate`` (Alg. 2 clips every client's; the config's reading): then the global model is DP-FedAvg's,
draw for draw, since the noise std z S on the private group's sum is what DP-FedAvg adds to everyone's (tested).
"+Ditto" adds the Ditto personal models (``lams``).

:class:`HDPFedAvgRelease` is the same server step as a protocol's release of any method's client messages (privacy
by construction for a method from outside under FedHDP's protocol, ``python -m fedrepro compare``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedrepro.learning.adaptive_clip import AdaptiveClip
from fedrepro.learning.engine import MessageRelease
from fedrepro.learning.net import Params
from fedrepro.papers.fedhdp.fedhdp import FedHDP, aggregate


class HDPFedAvg(FedHDP):
    name = "hdp_fedavg"

    def __init__(self, **kw):
        if kw.pop("r", 1.0) != 1.0:
            raise ValueError("HDP-FedAvg is FedHDP with r = 1; use FedHDP for another ratio")
        super().__init__(r=1.0, **kw)


@dataclass
class HDPFedAvgRelease(MessageRelease):
    """HDP-FedAvg's server step applied to whatever the clients send (:class:`MessageRelease`): each private client's
    message (all its entries together, one vector) clipped to the adaptive norm S, the private group's mean noised
    with N(0, (z S / N_p)^2), the opt-out clients' messages as they are, the two groups weighted per client
    (N_np : N_p); then S moves with the noisy count of the private clients' unclipped bits. The private clients'
    guarantee is therefore DP-FedAvg's and HDP-FedAvg's: the same z, clip and count noise, one release per round at
    q = K/m. A method whose message is its local update (theta_j - theta) and whose server adds the release gets
    HDP-FedAvg's global model, draw for draw (tested)."""

    private: Tensor  # (n_clients,) bool: the protocol's private clients
    noise_multiplier: float  # z of the private group's update (z_update, see fedrepro.learning.adaptive_clip)
    clip: AdaptiveClip
    norm: float  # S^t

    def __call__(self, message: Params, selected: Tensor, generator: torch.Generator) -> Params:
        if not message:
            raise ValueError("client_message returned no entries")
        priv = self.private[selected]
        S = self.norm
        update, norms = aggregate(message, priv, torch.ones_like(priv), priv, S, 1.0, self.noise_multiplier, generator)
        self.norm = self.clip.update(S, AdaptiveClip.bits(norms, S), generator)
        return update

    def metrics(self) -> dict[str, float]:
        return {"clip": float(self.norm)}


__all__ = ["HDPFedAvg", "HDPFedAvgRelease"]
