"""The histograms paper's own privacy statement as an experiment: Thm 3.1's composition solved for the per-step
budget of a total (eps', delta') over T iterations (Table 1's caption: eps' = 15, delta' = 1e-10).

A deterministic closed form; the rng is unused.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import DELTA, INT1, POSITIVE
from fedrepro.papers.histograms import privacy as histograms
from fedrepro.privacy.solve import RTOL as ROUND_TRIP_RTOL

HIST_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["total_epsilon", "delta", "T"],
    "properties": {
        "total_epsilon": POSITIVE,
        "delta": DELTA,
        "T": INT1,
        "readings": {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"enum": list(histograms.READINGS)},
            "default": list(histograms.READINGS),
        },
    },
}


@experiment_kind(
    "histograms_thm31",
    HIST_SCHEMA,
    deterministic=True,
    stage="privacy",
    epsilon_rows=histograms.thm31_rows,
    metrics=(
        "per_iteration_epsilon.*",
        "per_step_delta.*",
        "per_step_epsilon.*",
        "sigma.*",
        "total_delta.*",
        "total_epsilon.*",
    ),
    checks=("composition_round_trip", "per_step_epsilon_below_one"),
)
def histograms_thm31(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Alg. 3's per-step epsilon and sigma for a total (eps', delta') over T iterations, under each delta reading."""
    budgets = [histograms.per_step_budget(p["total_epsilon"], p["delta"], p["T"], r) for r in p["readings"]]
    fields = ("per_step_epsilon", "per_iteration_epsilon", "per_step_delta", "sigma", "total_epsilon", "total_delta")
    metrics = {f: {b.reading: getattr(b, f) for b in budgets} for f in fields}
    err = max(abs(b.total_epsilon - p["total_epsilon"]) / p["total_epsilon"] for b in budgets)
    checks = {
        "composition_round_trip": Check(
            err <= ROUND_TRIP_RTOL,
            f"composing the solved per-step epsilon over T={p['T']} gives back "
            f"{p['total_epsilon']} (max rel. error {err:.2g})",
            err,
            0.0,
            ROUND_TRIP_RTOL,
        ),
        "per_step_epsilon_below_one": Check(
            all(b.per_step_epsilon < 1 for b in budgets),
            "Theorem 3.1 and the classical Gaussian mechanism need eps < 1",
        ),
    }
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame([b.to_dict() for b in budgets]),
        checks=checks,
        accountant={
            "name": "closed form: Setlur et al. Thm 3.1 + advanced composition (eq. 4), "
            "classical Gaussian mechanism sigma = sqrt(2 ln(1.25/delta))/eps",
            "version": "paper",
        },
    )
