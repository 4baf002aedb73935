"""The papers' own privacy statements as experiments: the histograms paper's Thm 3.1 composition (per-step budget
for eps' = 15), PPSGD's Thms 4.1 / 5.1 noise scales (AdaPeD's are in fedrepro.papers.adaped.experiments.privacy).

All deterministic closed forms; the rng is unused.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import DELTA, INT1, POSITIVE, POSITIVE_LIST
from fedrepro.experiments.keys import eps_key
from fedrepro.privacy.papers import histograms, ppsgd
from fedrepro.privacy.solve import RTOL as ROUND_TRIP_RTOL

HIST_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["total_epsilon", "delta", "T"],
    "properties": {"total_epsilon": POSITIVE, "delta": DELTA, "T": INT1,
                   "readings": {"type": "array", "minItems": 1, "uniqueItems": True,
                                "items": {"enum": list(histograms.READINGS)}}},
}


@experiment_kind("histograms_thm31", HIST_SCHEMA, deterministic=True, stage="privacy")
def histograms_thm31(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Alg. 3's per-step epsilon and sigma for a total (eps', delta') over T iterations, under each delta reading."""
    budgets = [histograms.per_step_budget(p["total_epsilon"], p["delta"], p["T"], r)
               for r in p.get("readings", histograms.READINGS)]
    fields = ("per_step_epsilon", "per_iteration_epsilon", "per_step_delta", "sigma", "total_epsilon", "total_delta")
    metrics = {f: {b.reading: getattr(b, f) for b in budgets} for f in fields}
    err = max(abs(b.total_epsilon - p["total_epsilon"]) / p["total_epsilon"] for b in budgets)
    checks = {
        "composition_round_trip": Check(err <= ROUND_TRIP_RTOL,
                                        f"composing the solved per-step epsilon over T={p['T']} gives back "
                                        f"{p['total_epsilon']} (max rel. error {err:.2g})", err, 0.0, ROUND_TRIP_RTOL),
        "per_step_epsilon_below_one": Check(all(b.per_step_epsilon < 1 for b in budgets),
                                            "Theorem 3.1 and the classical Gaussian mechanism need eps < 1"),
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame([b.to_dict() for b in budgets]), checks=checks,
                     accountant={"name": "closed form: Setlur et al. Thm 3.1 + advanced composition (eq. 4), "
                                         "classical Gaussian mechanism sigma = sqrt(2 ln(1.25/delta))/eps",
                                 "version": "paper"})


PPSGD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["epsilons", "delta", "n", "N", "T", "M", "q", "clip"],
    "properties": {"epsilons": POSITIVE_LIST, "delta": DELTA, "n": INT1, "N": INT1, "T": INT1, "M": POSITIVE,
                   "q": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "clip": POSITIVE,
                   "c": POSITIVE, "c1": POSITIVE, "c2": POSITIVE},
}


@experiment_kind("ppsgd_theorems", PPSGD_SCHEMA, deterministic=True, stage="privacy")
def ppsgd_theorems(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Thm 4.1 / 5.1 sufficient noise std sigma_zeta per epsilon, with the unspecified constants c, c1, c2 (default
    1): orders of magnitude only, not comparable with any printed number."""
    c, c1, c2 = p.get("c", 1.0), p.get("c1", 1.0), p.get("c2", 1.0)
    metrics = {"thm41_sigma_zeta": {}, "thm51_sigma_zeta": {}, "thm51_applies": {}}
    rows = []
    for e in p["epsilons"]:
        k = eps_key(e)
        s41 = ppsgd.thm41_noise_std(e, p["delta"], p["n"], p["N"], p["clip"], c)
        s51 = ppsgd.thm51_noise_std(e, p["delta"], p["T"], p["M"], p["clip"], c2)
        ok = ppsgd.thm51_applies(e, p["q"], p["T"], c1)
        metrics["thm41_sigma_zeta"][k], metrics["thm51_sigma_zeta"][k] = s41, s51
        metrics["thm51_applies"][k] = float(ok)
        rows.append({"epsilon": e, "thm41_sigma_zeta": s41, "thm51_sigma_zeta": s51, "thm51_applies": ok})
    metrics["thm51_epsilon_limit"] = c1 * p["q"] ** 2 * p["T"]
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows),
                     accountant={"name": f"closed form: Bietti et al. Thms 4.1/5.1 with c={c:g}, c1={c1:g}, "
                                         f"c2={c2:g} (unspecified in the paper)", "version": "paper"})
