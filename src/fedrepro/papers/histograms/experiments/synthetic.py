"""Private personalized histograms on the paper's own generative model (Setlur et al. Sec. 2.1; docs/notes/histograms.md
§6, §8).

The paper has no synthetic experiment; this one is an extra beyond it. A mixture of K Dirichlets Dir(alpha P_k)
(:mod:`fedrepro.papers.histograms.generator`), n users with m train tokens, a public validation proxy of n_val further
users with m_val tokens, and the nine Table 1 methods in both privacy regimes
(:mod:`fedrepro.papers.histograms.pipeline`), scored by KL(Q_u || estimate_u) against the TRUE histograms Q_u (the
paper's objective, Sec. 2).

Closed forms (docs/notes/histograms.md C5), the n -> infinity risks of estimators with fixed centers: the Bayes risk
(Lemma 2.2), the
oracle clusters fine-tuned with the run's lambda, FedAvg's mixture mean with and without FT, and Local (additive
smoothing is FT of the uniform histogram with lambda = d beta / (m + d beta), so its expected KL is exact at any n).

Checks: the paper's ordering (clustering + FT beats FedAvg + FT beats Local), clustering beats FedAvg and FT helps
each method (non-private), Local equals its closed form within z standard errors, Alg. 2 + FT is within z SE
(+ a relative slack for finite-n center error) of the oracle-cluster FT risk, and the non-private Lloyd objective
never increases. Privately: no private method beats its non-private counterpart (Sec. 4, one-sided) and the private
methods keep the non-private gains over Local and FedAvg (Sec. 1).

Alg. 3's clip c (and private IFCA's clip) given as a list is tuned on validation users as in Sec. 4: n_val of the
training users get m_val held-out tokens from their Q_u (:func:`fedrepro.papers.histograms.pipeline.run_pipeline`).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import MemoryNeed
from fedrepro.experiments.method_slot import MethodSlot
from fedrepro.experiments.params import INT1, INT2, NONNEG, POSITIVE
from fedrepro.papers.histograms import closed_forms as cf
from fedrepro.papers.histograms.claims import CLAIMS, table1_claims
from fedrepro.papers.histograms.finetune import bayes_lambda
from fedrepro.papers.histograms.generator import make_mixture, multinomial_rows, sample_users
from fedrepro.papers.histograms.pipeline import (
    ALGO_PROPERTIES,
    ALGO_REQUIRED,
    METHODS,
    HistData,
    run_pipeline,
    tuning_requested,
)
from fedrepro.papers.histograms.privacy import ACCOUNTANT

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["n_users", "d", "clusters", "alpha", "m", "zipf", "gamma", "n_val", "m_val", "z", "near_oracle_rtol"]
    + ALGO_REQUIRED,
    "properties": {
        "n_users": INT2,
        "d": INT2,
        "clusters": INT1,
        "alpha": POSITIVE,
        "m": INT1,
        "zipf": NONNEG,
        "gamma": NONNEG,
        "n_val": INT2,
        "m_val": INT1,
        "z": POSITIVE,
        "near_oracle_rtol": NONNEG,
        **ALGO_PROPERTIES,
        # a method from outside the package (compare): only its row is computed, on the same users (no default:
        # absent, the nine methods run, and runs made before this option keep their parameter digest)
        "estimator": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}},
        },
    },
}


def _outside(p: dict, data: HistData, rng: np.random.Generator) -> RunOutput:
    """A method from outside the package on the run's users, in every regime (fedrepro.papers.histograms.estimator):
    its mean KL and standard error, as the nine methods' metrics; the private regime releases cross-user means only
    through Alg. 3 at the per-step budget the paper's rows spend (the first candidate of a tuned clip)."""
    from fedrepro.papers.histograms.estimator import Release, Users, get_estimator
    from fedrepro.papers.histograms.pipeline import Evaluator, candidates
    from fedrepro.papers.histograms.privacy import per_step_budget

    name = p["estimator"]["name"]
    method = get_estimator(name)()
    ev = Evaluator(data, p["center_floor"], p["lam"], p["local_beta"])
    settings = {k: p[k] for k in ("K", "T", "lam", "center_floor", "local_beta")}
    users = Users(counts=data.counts, S=data.S, validation=data.Sval, settings=settings)
    kl, se, spent = {}, {}, {}
    for regime in p["regimes"]:
        private = regime == "private"
        release = Release(S=data.S, private=private, T=p["T"], floor=p["center_floor"], rng=rng)
        if private:
            pr = p["private"]
            b = per_step_budget(pr["total_epsilon"], pr["delta"], p["T"], pr["reading"])
            release.budget = {
                "per_step_epsilon": b.per_step_epsilon,
                "per_step_delta": b.per_step_delta,
                "total_epsilon": b.total_epsilon,
                "total_delta": b.total_delta,
            }
            release.clip, release.s = candidates(pr["clip"])[0], pr["s"]
        est = np.asarray(method.estimate(users, rng, release), dtype=np.float64)
        if est.shape != data.S.shape:
            raise ValueError(f"{name}.estimate returned shape {est.shape}, not (n, d) = {data.S.shape}")
        per_user = ev.estimates(est)
        if not np.isfinite(per_user).all():
            raise ValueError(f"{name}.estimate gave a zero where a user's true histogram is positive (infinite KL)")
        kl[regime] = {name: float(per_user.mean())}
        se[regime] = {name: float(per_user.std(ddof=1) / np.sqrt(len(per_user)))}
        spent[regime] = {name: float(release.calls)}
    return RunOutput(metrics={"kl": kl, "kl_se": se, "release_calls": spent})


def references(mix, m: int, lam: float, beta: float) -> dict[str, float]:
    """n -> infinity expected KL(Q || estimate) of the fixed-center estimators (docs/notes/histograms.md C5)."""
    qbar = mix.weights @ mix.centers
    lam_local = mix.d * beta / (m + mix.d * beta)
    uniform = np.full(mix.d, 1.0 / mix.d)
    return {
        "bayes": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, None, bayes_lambda(mix.alpha, m)),
        "oracle_ft": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, None, lam),
        "oracle_cluster": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, None, 1.0),
        "fedavg": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, qbar, 1.0),
        "fedavg_ft": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, qbar, lam),
        "local": cf.mixture_risk(mix.centers, mix.weights, mix.alpha, m, uniform, lam_local),
    }


def _cells(metrics: dict, name: str) -> dict[str, float]:
    """Mean KL(Q_u || estimate_u) of one method, one column per privacy regime."""
    return {f"KL {regime}": float(v[name]) for regime, v in metrics.get("kl", {}).items() if name in v}


def _register(cls) -> str:
    from fedrepro.papers.histograms.estimator import register_external

    return register_external(cls)


def _interface():
    from fedrepro.papers.histograms.estimator import HistogramEstimator

    return HistogramEstimator


METHOD_SLOT = MethodSlot(
    only=lambda p, name, private: p | {"estimator": {"name": name}},
    private=lambda p: "private" in p["regimes"],
    methods=lambda p: list(METHODS),
    cells=_cells,
    what=(
        "mean over users of KL(Q_u || estimate_u) against the true histograms (lower is better), per privacy regime "
        "(private: (epsilon, delta) of the paper's rows, Theorem 3.1; your estimator's cross-user statistics count "
        "against it only through release.centers, and one computed otherwise is outside the guarantee)"
    ),
    private_text="",
    interface=_interface(),
    register=_register,
)


def monotone_check(objective: list[float], rtol: float = 1e-9) -> Check:
    """C2: the non-private Alg. 2 objective never increases (the cluster mean is the exact Bregman centroid). The
    objective is summed in float64 (lloyd.Assigner), so ``rtol`` of its first value is far above its rounding."""
    obj = np.asarray(objective, dtype=np.float64)
    rise = float(np.max(np.diff(obj))) if len(obj) > 1 else 0.0
    return Check(
        rise <= rtol * abs(obj[0]),
        f"non-private Alg. 2 objective (1/n) sum_u min_k KL(Q^_u || P_k) over {len(obj) - 1} iterations: "
        f"{obj[0]:.5f} -> {obj[-1]:.5f}, largest increase {rise:.2g}",
        rise,
        0.0,
        rtol * abs(obj[0]),
    )


@experiment_kind(
    "histograms_synthetic",
    SCHEMA,
    metrics=("kl.*", "kl_se.*", "reference.*", "diagnostics.*", "release_calls.*"),
    checks=(
        "alg2_ft_near_oracle",
        "clustering_beats_fedavg_nonprivate",
        "finetuning_helps_nonprivate",
        "lloyd_objective_monotone",
        "local_matches_closed_form",
        "ordering_nonprivate",
        *CLAIMS,
    ),
    # every user's true histogram (float32) and token counts (int32), (n_users + n_val, d) each
    memory=MemoryNeed(("n_users", "n_val", "d"), lambda p: 8 * (p["n_users"] + p["n_val"]) * p["d"]),
    method_slot=METHOD_SLOT,
)
def histograms_synthetic(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(p, rng)


def _run(p: dict, rng: np.random.Generator) -> RunOutput:
    t0 = time.perf_counter()
    dtype = np.dtype(p["dtype"])
    mix = make_mixture(p["d"], p["clusters"], p["alpha"], p["zipf"], p["gamma"], rng)
    users = sample_users(mix, p["n_users"], p["m"], 0, rng, dtype=dtype)
    val = sample_users(mix, p["n_val"], p["m_val"], 0, rng, dtype=dtype)
    S = (users.train / np.asarray(p["m"], dtype=dtype)).astype(dtype, copy=False)
    Sval = (val.train / np.asarray(p["m_val"], dtype=dtype)).astype(dtype, copy=False)
    data = HistData(S=S, counts=users.train, Qeval=users.Q, Sval=Sval, truth=users.clusters)
    if tuning_requested(p):
        # Sec. 4's validation users: n_val of the training users with m_val extra tokens from their Q_u, drawn from
        # a spawned generator so the data and the rest of the run's random stream are those of an untuned run
        data.tune_index = np.arange(min(p["n_val"], p["n_users"]))
        extra = multinomial_rows(p["m_val"], np.asarray(users.Q[data.tune_index], dtype=np.float64), rng.spawn(1)[0])
        data.tune_eval = extra / p["m_val"]
    t_gen = time.perf_counter() - t0
    if p.get("estimator") is not None:
        return _outside(p, data, rng)
    kl, se, diag, rows = run_pipeline(data, p, rng, regimes=p["regimes"])
    t_run = time.perf_counter() - t0 - t_gen
    ref = references(mix, p["m"], p["lam"], p["local_beta"])

    checks: dict[str, Check] = {}
    z = p["z"]
    if "nonprivate" in kl:
        k, s = kl["nonprivate"], se["nonprivate"]
        checks["ordering_nonprivate"] = Check(
            k["alg2_ft"] < k["fedavg_ft"] < k["local"],
            f"non-private KL: Alg. 2 + FT {k['alg2_ft']:.4f} < FedAvg + FT {k['fedavg_ft']:.4f} < Local "
            f"{k['local']:.4f} (the paper's ordering)",
        )
        checks["clustering_beats_fedavg_nonprivate"] = Check(
            k["alg2"] < k["fedavg"] and k["alg2_ft"] < k["fedavg_ft"],
            f"Alg. 2 {k['alg2']:.4f} < FedAvg {k['fedavg']:.4f}; Alg. 2 + FT {k['alg2_ft']:.4f} < FedAvg + FT "
            f"{k['fedavg_ft']:.4f}",
        )
        checks["finetuning_helps_nonprivate"] = Check(
            all(k[f"{m}_ft"] < k[m] for m in ("fedavg", "ifca", "alg2_dimred", "alg2")),
            "FT lowers KL for "
            + ", ".join(f"{m}: {k[m]:.4f} -> {k[m + '_ft']:.4f}" for m in ("fedavg", "ifca", "alg2_dimred", "alg2")),
        )
        tol = z * s["local"]
        checks["local_matches_closed_form"] = Check(
            abs(k["local"] - ref["local"]) <= tol,
            f"Local (additive smoothing = FT of the uniform histogram) {k['local']:.5f} vs closed form "
            f"{ref['local']:.5f} within {z} SE ({tol:.2g})",
            k["local"],
            ref["local"],
            tol,
        )
        tol = z * s["alg2_ft"] + p["near_oracle_rtol"] * ref["oracle_ft"]
        checks["alg2_ft_near_oracle"] = Check(
            abs(k["alg2_ft"] - ref["oracle_ft"]) <= tol,
            f"Alg. 2 + FT {k['alg2_ft']:.5f} vs the oracle centers fine-tuned with lambda = {p['lam']} "
            f"{ref['oracle_ft']:.5f} (Bayes risk {ref['bayes']:.5f}) within {z} SE + {p['near_oracle_rtol']:g} "
            f"relative ({tol:.2g})",
            k["alg2_ft"],
            ref["oracle_ft"],
            tol,
        )
        obj = [r["objective"] for r in rows if r["regime"] == "nonprivate" and r["method"] == "alg2"]
        checks["lloyd_objective_monotone"] = monotone_check(obj)
    checks.update(table1_claims(kl, se, diag, p))  # Table 1's sentences on the generative model

    metrics = {
        "kl": kl,
        "kl_se": se,
        "reference": ref,
        "diagnostics": diag,
        "seconds": {"generate": t_gen, "pipeline": t_run},
    }
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(rows),
        checks=checks,
        accountant=ACCOUNTANT if "private" in kl else None,
    )
