"""Table 1 of the histograms paper (Setlur et al. Sec. 4): LEAF Reddit token histograms, nine methods, non-private
and private (eps' = 15, delta' = 1e-10), each number the mean over ``runs`` random runs (the caption: 20).

Data (:mod:`fedrepro.papers.histograms.reddit`, dataset ``reddit``): vocabulary of 10^3 tokens, users with >= 2,500
in-vocabulary tokens, m = 500 train tokens (Q^_u) and 2,000 test tokens (the empirical "true" Q_u the KL is scored
against) per user, 5,000 users with 1,000 extra validation tokens. The validation users' validation histograms are
the public proxy that seeds Alg. 1 in the private regime and gives DimRed its statistics (docs/notes/histograms.md G7).
The token split
is fixed by ``split_seed``; a run's randomness is Alg. 1, the DP noise and IFCA (docs/notes/histograms.md G10). Metric
keys
``kl.<regime>.<method>`` (the registry's), with ``kl_std`` the std over runs and ``kl_ci95`` = 1.96 std / sqrt(runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from fedrepro.errors import DataError
from fedrepro.experiments import RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import INT0, INT1, POSITIVE
from fedrepro.papers.histograms.claims import CLAIMS, table1_claims
from fedrepro.papers.histograms.pipeline import (
    ALGO_PROPERTIES,
    ALGO_REQUIRED,
    HistData,
    run_pipeline,
)
from fedrepro.papers.histograms.privacy import ACCOUNTANT

DATASET = "reddit"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["vocab_size", "train_tokens", "test_tokens", "val_users", "val_tokens", "split_seed", "runs", "z"]
    + ALGO_REQUIRED,
    "properties": {
        "vocab_size": INT1,
        "train_tokens": INT1,
        "test_tokens": INT1,
        "val_users": INT1,
        "val_tokens": INT1,
        "split_seed": INT0,
        "runs": INT1,
        "max_users": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: every user
        "z": POSITIVE,
        **ALGO_PROPERTIES,
    },
}


def histogram_data(hist, p: dict) -> HistData:
    """HistData from :class:`fedrepro.papers.histograms.reddit.TokenHistograms` (its first ``max_users`` users;
    null: all)."""
    dtype = np.dtype(p["dtype"])
    n = min(len(hist.users), p["max_users"] or len(hist.users))
    train, test = hist.train[:n], hist.test[:n]
    S = (train / train.sum(axis=1, keepdims=True)).astype(dtype)
    Qeval = (test / test.sum(axis=1, keepdims=True)).astype(dtype)
    Sval = (hist.val / np.maximum(hist.val.sum(axis=1, keepdims=True), 1)).astype(dtype)
    tune = hist.val_index < n  # validation users among the first n (their validation tokens score tuning)
    return HistData(S=S, counts=train, Qeval=Qeval, Sval=Sval, tune_index=hist.val_index[tune], tune_eval=Sval[tune])


def run_table1(data: HistData, p: dict, rng: np.random.Generator) -> RunOutput:
    per_run, diags, rows = [], [], []
    for r in range(p["runs"]):
        kl, _, diag, hist_rows = run_pipeline(data, p, rng, regimes=p["regimes"])
        per_run.append(kl)
        diags.append(diag)
        rows += [dict(row, run=r) for row in hist_rows]
    metrics: dict = {"kl": {}, "kl_std": {}, "kl_ci95": {}}
    for regime in per_run[0]:
        for m in per_run[0][regime]:
            v = np.array([k[regime][m] for k in per_run])
            sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
            metrics["kl"].setdefault(regime, {})[m] = float(v.mean())
            metrics["kl_std"].setdefault(regime, {})[m] = sd
            metrics["kl_ci95"].setdefault(regime, {})[m] = 1.96 * sd / np.sqrt(len(v))
    metrics["n_users"] = data.S.shape[0]
    metrics["n_val_users"] = data.Sval.shape[0]
    metrics["diagnostics_last_run"] = diag
    # the paper's sentences on the run means (SE over runs); a method converged only if it did in every run
    se = {g: {m: sd / np.sqrt(p["runs"]) for m, sd in v.items()} for g, v in metrics["kl_std"].items()}
    over_runs = {
        g: {
            m: {
                "converged": all(d[g][m]["converged"] for d in diags),
                "iterations": max(d[g][m]["iterations"] for d in diags),
            }
            for m in ("alg2", "ifca")
        }
        for g in diag
        if g in ("nonprivate", "private")
    }
    checks = table1_claims(metrics["kl"], se, over_runs, p)
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(rows),
        checks=checks,
        accountant=ACCOUNTANT if "private" in p["regimes"] else None,
    )


@experiment_kind(
    "histograms_table1",
    SCHEMA,
    metrics=("kl.*", "kl_std.*", "kl_ci95.*", "n_users", "n_val_users", "diagnostics_last_run.*"),
    checks=CLAIMS,
    no_method_slot=(
        "Table 1's protocol (20 runs per seed on LEAF Reddit) takes no method of your own yet; the same pipeline on "
        "the paper's generative model does: --experiment histograms.x_synthetic (a HistogramEstimator)"
    ),
)
def histograms_table1(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    from fedrepro.data.leaf import load_reddit
    from fedrepro.papers.histograms.reddit import token_histograms

    files = ctx.data.get(DATASET)
    if not files:
        raise DataError(f"{ctx.exp_id}: needs dataset {DATASET!r} (declare it under datasets:)")
    hist = token_histograms(
        load_reddit(files[0]),
        vocab_size=p["vocab_size"],
        train_tokens=p["train_tokens"],
        test_tokens=p["test_tokens"],
        val_users=p["val_users"],
        val_tokens=p["val_tokens"],
        seed=p["split_seed"],
    )
    with threadpool_limits(limits=1, user_api="blas"):
        return run_table1(histogram_data(hist, p), p, rng)
