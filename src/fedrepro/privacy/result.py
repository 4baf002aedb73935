"""What every accountant returns: epsilon plus enough provenance to embed in a run's metrics.json."""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import asdict, dataclass


def library_version(dist: str) -> str:
    """Installed version of a distribution, read from its metadata (``"not installed"`` when absent)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def library_columns(accountant: dict | None) -> dict:
    """The library and version columns of a privacy table row, from a run's ``accountant`` record (either an
    EpsilonResult's fields or a ``{"name", "version"}`` pair)."""
    accountant = accountant or {}
    return {
        "library": accountant.get("library", accountant.get("name", "")),
        "library_version": accountant.get("library_version", accountant.get("version", "")),
    }


@dataclass(frozen=True)
class EpsilonResult:
    """(epsilon, delta) of a noise_multiplier / sampling_rate / steps mechanism under one accountant.

    accountant: rdp | rdp_classic | pld | opacus_rdp.
    library, library_version: the package that computed the RDP curve or the PLD (dp-accounting or opacus).
    conversion: how RDP became (epsilon, delta) (or the PLD's epsilon-for-delta query).
    orders: the RDP orders the minimum was taken over (None for pld); optimal_order the minimiser (None for pld);
    order_at_grid_edge: the minimiser is the grid's first or last order.
    pld_discretization: the PLD's value_discretization_interval (None for RDP accountants).
    sampling: poisson | without_replacement | none (q = 1); neighboring_relation as the library names it.
    """

    epsilon: float
    delta: float
    accountant: str
    library: str
    library_version: str
    conversion: str
    noise_multiplier: float
    sampling_rate: float
    steps: int
    sampling: str
    neighboring_relation: str
    orders: tuple[float, ...] | None = None
    optimal_order: float | None = None
    order_at_grid_edge: bool | None = None
    pld_discretization: float | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict for RunOutput.accountant; ``name`` and ``version`` as the other experiments use them."""
        d = asdict(self)
        d["orders"] = list(self.orders) if self.orders is not None else None
        d["epsilon"] = self.epsilon if math.isfinite(self.epsilon) else None
        d["name"] = f"{self.accountant}: {self.library} ({self.conversion})"
        d["version"] = f"{self.library} {self.library_version}"
        return d
