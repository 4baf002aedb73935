"""PPSGD's own privacy statements as an experiment: the sufficient noise of Thms 4.1 / 5.1 for each epsilon.

A deterministic closed form; the rng is unused.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedrepro.experiments import RunContext, RunOutput, experiment_kind
from fedrepro.experiments.keys import eps_key
from fedrepro.experiments.params import DELTA, INT1, POSITIVE, POSITIVE_LIST
from fedrepro.papers.ppsgd import privacy as ppsgd

PPSGD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["epsilons", "delta", "n", "N", "T", "M", "q", "clip"],
    "properties": {
        "epsilons": POSITIVE_LIST,
        "delta": DELTA,
        "n": INT1,
        "N": INT1,
        "T": INT1,
        "M": POSITIVE,
        "q": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "clip": POSITIVE,
        "c": {**POSITIVE, "default": 1.0},
        "c1": {**POSITIVE, "default": 1.0},
        "c2": {**POSITIVE, "default": 1.0},
    },
}


@experiment_kind(
    "ppsgd_theorems",
    PPSGD_SCHEMA,
    deterministic=True,
    stage="privacy",
    epsilon_rows=ppsgd.theorem_rows,
    metrics=("thm41_sigma_zeta.*", "thm51_applies.*", "thm51_epsilon_limit", "thm51_sigma_zeta.*"),
    checks=(),
)
def ppsgd_theorems(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Thm 4.1 / 5.1 sufficient noise std sigma_zeta per epsilon, with the unspecified constants c, c1, c2 (default
    1): orders of magnitude only, not comparable with any printed number."""
    c, c1, c2 = p["c"], p["c1"], p["c2"]
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
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(rows),
        accountant={
            "name": f"closed form: Bietti et al. Thms 4.1/5.1 with c={c:g}, c1={c1:g}, "
            f"c2={c2:g} (unspecified in the paper)",
            "version": "paper",
        },
    )
