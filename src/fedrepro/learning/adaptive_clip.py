"""Quantile-based adaptive clipping with a noisy clipped count (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021,
"Differentially Private Learning with Adaptive Clipping", arXiv 2019), as FedHDP's Algorithm 2 uses it (Aldaghri
et al., Sec. 4; docs/notes/fedhdp.md section 2.5 and section 3).

Each round every client whose update is clipped to the current norm S reports the bit b_j = 1[||Delta_j||_2 <= S]
("not clipped"). The server releases the noisy count of *centered* bits (b_j - 1/2 has sensitivity 1/2, Andrew et
al. Sec. 3), estimates the unclipped fraction

    b_bar = 1/2 + ( sum_j (b_j - 1/2) + N(0, z_count^2) ) / n

(n the number of reporting clients, the realized count: Alg. 2 / docs/notes/fedhdp.md §7.18; this equals
(sum_j b_j + N(0, z_count^2)) / n, the printed form), and moves S geometrically towards the kappa-quantile of the
update norms:

    S <- S * exp(-eta_b (b_bar - kappa))                     (docs/notes/fedhdp.md §7.17: the printed formula is
    garbled)

Both the update sum (noise multiplier z_update on sensitivity S) and the count (noise std z_count on sensitivity
1/2) are Gaussian mechanisms on the same sampled clients; Andrew et al. (Thm 1) show the pair composes exactly like
one Gaussian mechanism with the *effective* noise multiplier

    z_eff^-2 = z_update^-2 + (2 z_count)^-2,

so the accountant (fedrepro.privacy) is run with z_eff, and the update noise a given z_eff leaves is
:func:`update_noise_multiplier`. This is the convention of Table 7's "effective noise multiplier" (TFF's
``gaussian_adaptive``: clipped_count_stddev = 0.05 x expected clients per round, z_eff < 2 z_count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor


def update_noise_multiplier(z_eff: float, z_count: float) -> float:
    """z_update with z_update^-2 + (2 z_count)^-2 = z_eff^-2 (Andrew et al. 2019, Thm 1); needs z_eff < 2 z_count."""
    if not z_eff >= 0 or not z_count >= 0:
        raise ValueError(f"need z_eff >= 0 and z_count >= 0, got {z_eff}, {z_count}")
    if z_eff == 0:
        return 0.0
    if z_count == 0:
        raise ValueError("a noiseless clipped count (z_count = 0) leaves no privacy for any z_eff > 0")
    rest = z_eff**-2 - (2 * z_count) ** -2
    if not rest > 0:
        raise ValueError(f"z_eff = {z_eff} needs z_count > z_eff / 2 = {z_eff / 2} (got {z_count})")
    return rest**-0.5


def effective_noise_multiplier(z_update: float, z_count: float) -> float:
    """z_eff of an update noise multiplier and a count noise std (the inverse of :func:`update_noise_multiplier`)."""
    if z_update == 0 or z_count == 0:
        return 0.0
    return (z_update**-2 + (2 * z_count) ** -2) ** -0.5


@dataclass(frozen=True)
class AdaptiveClip:
    """Geometric quantile tracking of the clip norm: ``init`` S^0, target unclipped quantile ``quantile`` (kappa),
    learning rate ``lr`` (eta_b; 0 = a fixed clip), noise std ``count_std`` (z_count) on the sum of centered bits."""

    init: float
    quantile: float = 0.5
    lr: float = 0.2
    count_std: float = 0.0

    def __post_init__(self):
        if not self.init > 0 or not 0 <= self.quantile <= 1 or not self.lr >= 0 or not self.count_std >= 0:
            raise ValueError(f"need init > 0, 0 <= quantile <= 1, lr >= 0, count_std >= 0; got {self}")

    @classmethod
    def parse(cls, spec: AdaptiveClip | Mapping[str, float] | float) -> AdaptiveClip:
        """A clip rule, a fixed clip norm (lr = 0), or a mapping of its fields (``{"init": S0, ...}``)."""
        if isinstance(spec, cls):
            return spec
        if isinstance(spec, (int, float)):
            return cls(float(spec), lr=0.0)
        return cls(**{k: float(v) for k, v in spec.items()})

    @staticmethod
    def bits(norms: Tensor, clip: float) -> Tensor:
        """b_j = 1[||Delta_j|| <= S] (float)."""
        return (norms <= clip).to(norms.dtype)

    def unclipped_fraction(self, bits: Tensor, generator: torch.Generator | None = None) -> float:
        """The released estimate b_bar (noise drawn from ``generator`` when count_std > 0)."""
        n = bits.numel()
        if n == 0:
            raise ValueError("no reporting clients")
        total = float((bits - 0.5).sum())
        if self.count_std > 0:
            total += self.count_std * float(
                torch.randn(
                    (), generator=generator, dtype=torch.float64, device=generator.device if generator else "cpu"
                )
            )
        return 0.5 + total / n

    def update(self, clip: float, bits: Tensor, generator: torch.Generator | None = None) -> float:
        """S^{t+1} from S^t and this round's bits; S is unchanged when nobody reported or lr = 0."""
        if self.lr == 0 or bits.numel() == 0:
            return clip
        return clip * math.exp(-self.lr * (self.unclipped_fraction(bits, generator) - self.quantile))


__all__ = ["AdaptiveClip", "effective_noise_multiplier", "update_noise_multiplier"]
