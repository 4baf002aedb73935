"""AdaPeD Sec. 4 "Political tendencies on county level" (kind ``political_bernoulli``).

Each county i is a client with n = T - 1 Bernoulli samples: X_it = 1 if the Republican candidate won county i in
election t (see :mod:`fedrepro.data.election`). T-fold cross-validation over the elections: fold k holds out
election k; the local estimator is the mean of the other T - 1 outcomes, the personalized one is eq. (6) (posterior
mean with the Beta prior's moments estimated leave-one-out from the other counties' training means). Both are
scored by the squared error against the held-out 0/1 outcome, averaged over counties. Per fold:
gain = 100 (MSE_loc - MSE_pers) / MSE_loc; the metric ``gain_pct`` is the mean over folds and
``gain_pct_fold_std`` their sample std (ddof = 1). The data are fixed, so the seed does not change the result.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedrepro.data.election import republican_wins
from fedrepro.errors import DataError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.papers.adaped import bernoulli as b

DATASET = "election_county_returns"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["years", "minus_one", "centre"],
    "properties": {
        "years": {"type": "array", "minItems": 3, "uniqueItems": True, "items": {"type": "integer"}},
        "minus_one": {"type": "boolean"},
        "centre": {"enum": list(b.CENTRES)},
    },
}


def cross_validate(outcomes: np.ndarray, minus_one: bool = True, centre: str = "mu_i") -> pd.DataFrame:
    """One row per held-out election (column of ``outcomes``, shape (m, T)): MSEs and gain of eq. (6) vs local."""
    y = np.asarray(outcomes, dtype=float)
    m, T = y.shape
    rows = []
    for k in range(T):
        train = np.delete(y, k, axis=1)
        xbar = train.mean(axis=1)
        est = b.loo_estimate(xbar, T - 1, minus_one=minus_one, centre=centre)
        mse_loc = float(np.mean((xbar - y[:, k]) ** 2))
        mse_pers = float(np.mean((est["p_hat"] - y[:, k]) ** 2))
        rows.append(
            {
                "fold": k,
                "mse_local": mse_loc,
                "mse_personalized": mse_pers,
                "gain_pct": 100.0 * (mse_loc - mse_pers) / mse_loc if mse_loc > 0 else float("nan"),
                "a_hat_mean": float(est["a_hat"].mean()),
                "mu_hat_mean": float(est["mu_hat"].mean()),
                "sigma2_hat_mean": float(est["sigma2_hat"].mean()),
                "republican_share": float(y[:, k].mean()),
            }
        )
    return pd.DataFrame(rows)


@experiment_kind(
    "political_bernoulli",
    SCHEMA,
    metrics=("gain_pct", "gain_pct_fold_std", "m", "mse_local", "mse_personalized", "data.*"),
    checks=("personalized_beats_local_every_fold",),
)
def political_bernoulli(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    files = ctx.data.get(DATASET)
    if not files:
        raise DataError(f"{ctx.exp_id}: needs dataset {DATASET} (declare `datasets: [{DATASET}]` in the config)")
    data = republican_wins(files[0], p["years"])
    hist = cross_validate(data.outcomes, p["minus_one"], p["centre"])
    hist.insert(1, "held_out_year", [data.years[k] for k in hist["fold"]])
    gains = hist["gain_pct"].to_numpy()
    metrics = {
        "gain_pct": float(np.mean(gains)),
        "gain_pct_fold_std": float(np.std(gains, ddof=1)),
        "m": len(data.fips),
        "mse_local": float(hist["mse_local"].mean()),
        "mse_personalized": float(hist["mse_personalized"].mean()),
        "data": dict(data.stats),
    }
    checks = {
        "personalized_beats_local_every_fold": Check(
            bool(np.all(gains > 0)),
            "Sec. 4 claim: eq. (6) has lower MSE than the local mean in every fold; per-fold "
            "gains (%): " + ", ".join(f"{y}: {g:.2f}" for y, g in zip(hist["held_out_year"], gains)),
        )
    }
    return RunOutput(metrics=metrics, history=hist, checks=checks)
