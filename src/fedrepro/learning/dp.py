"""User-level differential-privacy hooks for the engine: per-client clipping and Gaussian noise.

DP-AdaPeD (Ozkara et al. 2023, Sec. 3.3, App. I; docs/notes/adaped.md section 2.11) and the default DP-FedAvg
(docs/notes/adaped.md section
2.12) privatize each sampled client's *whole* minibatch update at every local iteration (user level, no per-example
gradients):

    g  ->  g / max(||g||_2 / C, 1) + N(0, (z C)^2 I),

with the L2 norm taken over all of the client's parameters together. The sum over clients of clipped updates
therefore changes by at most C when one client is removed. Noise multipliers z are never computed here: they come
from the accountants in :mod:`fedrepro.privacy` (:func:`calibrated` wraps
:func:`fedrepro.privacy.calibrate_noise_multiplier`; the paper's own Thm 5 is
:mod:`fedrepro.papers.adaped.privacy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_map


def client_norms(tree: Any) -> Tensor:
    """L2 norm of each client's whole update: ``tree`` leaves are stacked (n_clients, ...); returns (n_clients,)."""
    leaves, _ = tree_flatten(tree)
    return torch.stack([v.reshape(v.shape[0], -1).pow(2).sum(1) for v in leaves]).sum(0).sqrt()


def clip_per_client(tree: Any, clip: float) -> Any:
    """Scale each client's whole update by min(1, clip / ||g_i||) (all parameters together)."""
    scale = (clip / client_norms(tree)).clamp(max=1.0)
    return tree_map(lambda v: v * scale.reshape(-1, *([1] * (v.dim() - 1))), tree)


def gaussian_noise(like: Any, std: float, generator: torch.Generator) -> Any:
    """Independent N(0, std^2) entries shaped like every leaf of ``like``."""
    return tree_map(lambda v: std * torch.randn(v.shape, generator=generator, device=v.device, dtype=v.dtype), like)


@dataclass(frozen=True)
class GaussianMechanism:
    """Clip to ``clip`` then add N(0, (noise_multiplier * clip)^2) per coordinate, per client."""

    clip: float
    noise_multiplier: float

    def __post_init__(self):
        if not self.clip > 0 or not self.noise_multiplier >= 0:
            raise ValueError(f"need clip > 0 and noise_multiplier >= 0, got {self}")

    @property
    def std(self) -> float:
        return self.noise_multiplier * self.clip

    def __call__(self, tree: Any, generator: torch.Generator) -> Any:
        clipped = clip_per_client(tree, self.clip)
        if self.std == 0:
            return clipped
        std = self.client_std(tree_flatten(clipped)[0][0].shape[0])
        return tree_map(torch.add, clipped, gaussian_noise(clipped, std, generator))

    def client_std(self, n_clients: int) -> float:
        """The noise std each of the ``n_clients`` of one call adds: the whole ``std`` (local noise)."""
        return self.std

    @classmethod
    def parse(cls, spec: GaussianMechanism | Mapping[str, float] | None) -> GaussianMechanism | None:
        """None, a mechanism, or a mapping ``{"clip": C, "noise_multiplier": z}``."""
        return (
            spec if spec is None or isinstance(spec, cls) else cls(float(spec["clip"]), float(spec["noise_multiplier"]))
        )


@dataclass(frozen=True)
class SharedNoiseMechanism(GaussianMechanism):
    """The server's Gaussian mechanism with its noise drawn at the clients: clip each client's update to ``clip``;
    each of the n clients in one call adds N(0, (noise_multiplier * clip)^2 / n) per coordinate, so the *sum* of the n
    noised updates carries exactly N(0, (noise_multiplier * clip)^2), as when the server noises the sum of the clipped
    updates (PPSGD's w update: sigma C on the sum, sigma C / L on the mean of the L sampled users). The privacy of that
    sum is the Gaussian mechanism's with multiplier ``noise_multiplier`` only if nothing but the sum (or the mean) of
    one call's updates leaves the round: one call per client per round, aggregated by summing or averaging."""

    def client_std(self, n_clients: int) -> float:
        """A share: std / sqrt(n), so that the n shares sum to the server's N(0, std^2)."""
        return self.std / n_clients**0.5


def calibrated(
    clip: float, target_epsilon: float, delta: float, steps: int, sampling_rate: float, accountant: str = "rdp", **kw
) -> GaussianMechanism:
    """The mechanism whose noise multiplier :func:`fedrepro.privacy.calibrate_noise_multiplier` gives for
    (target_epsilon, delta) after ``steps`` releases at ``sampling_rate``."""
    from fedrepro.privacy import calibrate_noise_multiplier

    cal = calibrate_noise_multiplier(target_epsilon, delta, steps, sampling_rate, accountant, **kw)
    return GaussianMechanism(clip, cal.noise_multiplier)


__all__ = [
    "GaussianMechanism",
    "SharedNoiseMechanism",
    "calibrated",
    "client_norms",
    "clip_per_client",
    "gaussian_noise",
]
