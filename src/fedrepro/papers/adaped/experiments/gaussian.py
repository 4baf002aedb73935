"""AdaPeD Fig. 1a / 3a / 3b (DP personalized Gaussian estimation) and Remark 1."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.montecarlo import matches_closed_form
from fedrepro.experiments.params import INT0, INT1, INT2, INT3, NONNEG, POSITIVE
from fedrepro.papers.adaped import gaussian as g

DP_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "m",
        "n",
        "d",
        "sigma_theta",
        "sigma_x",
        "mu",
        "r",
        "delta",
        "eps0",
        "reps",
        "a_rule",
        "recover_rel_tol",
        "z",
    ],
    "properties": {
        "m": INT3,
        "n": INT1,
        "d": INT1,
        "sigma_theta": NONNEG,
        "sigma_x": POSITIVE,
        "mu": {"type": "number"},
        "r": NONNEG,
        "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "eps0": {"type": "array", "minItems": 2, "items": POSITIVE},
        "reps": INT0,  # 0: the exact closed forms only (no Monte Carlo checks)
        "a_rule": {"enum": ["eq5", "nonprivate"]},
        "b_rule": {"enum": list(g.B_RULES), "default": "theorem"},  # the projection bound b: Thm 2's or the proof's c2
        "recover_rel_tol": POSITIVE,
        "z": POSITIVE,
    },
}


# per repetition theta, Xbar and the shared noise (m, d); over all repetitions every client's squared error of the
# local, the personalized and each eps0's estimator (m x reps each)
DP_MEMORY = MemoryNeed(
    ("m", "d", "reps", "eps0"), lambda p: FLOAT64 * p["m"] * (3 * p["d"] + (2 + len(p["eps0"])) * p["reps"])
)


def _dp_standard_error(errs, a, st, sx, n, m, d, sq, reps) -> float:
    """Standard error of the DP estimator's MC MSE.

    All clients of one repetition share the noisy mean mu_q, whose error Z per coordinate is ~N(0, v) with
    v <= (s_theta^2 + s + sigma_q^2)/m; its contribution (1-a)^2 Z^2 has variance 2 (1-a)^4 v^2 and does not
    average out over clients, only over repetitions. The per-client spread adds the usual var/(m reps).
    """
    v = (st**2 + sx**2 / n + sq**2) / m
    shared = 2.0 * d * ((1.0 - a) ** 2 * v) ** 2 / reps
    return math.sqrt(shared + float(np.var(errs)) / (m * reps))


@experiment_kind(
    "gaussian_dp_estimation",
    DP_SCHEMA,
    metrics=("a_personalized", "closed_form_*", "mse_*", "projection_bound_b", "recover.*"),
    checks=(
        "dp_decreases_with_eps0",
        "dp_matches_closed_form",
        "dp_recovers_personalized_at_max_eps0",
        "local_flat_matches_closed_form",
        "personalized_flat_matches_closed_form",
    ),
    memory=DP_MEMORY,
)
def gaussian_dp_estimation(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Monte Carlo of the three estimators (``reps`` datasets; 0: closed forms only) beside their exact MSEs: Thm 1
    for local / personalized, :func:`gaussian.mse_dp_exact` (eq. (19) with the projection) for the DP one. The
    sentences about the figure are judged on the exact values (no Monte Carlo error); the Monte Carlo checks the
    implementation against them."""
    m, n, d = p["m"], p["n"], p["d"]
    st, sx = p["sigma_theta"], p["sigma_x"]
    a_np = g.shrinkage_weight(st, sx, n)
    b = g.projection_bound(p["r"], st, sx, m, n, p["b_rule"])
    noise = [(e, g.ldp_noise_std(b, e, p["delta"])) for e in p["eps0"]]
    weight = {e: g.shrinkage_weight(st, sx, n, sq, m) if p["a_rule"] == "eq5" else a_np for e, sq in noise}
    err_local, err_pers, err_dp = [], [], {e: [] for e in p["eps0"]}
    for _ in range(p["reps"]):
        theta, xbar = g.simulate_means(m, n, d, st, sx, p["mu"], rng)
        err_local.append(((xbar - theta) ** 2).sum(axis=1))
        err_pers.append(((g.personalized(xbar, a_np, xbar.mean(axis=0)) - theta) ** 2).sum(axis=1))
        # Common random numbers: one standard-normal draw per repetition, scaled by each eps0's sigma_q, so the
        # curve over eps0 is compared on the same noise (the mechanism's law at each eps0 is unchanged).
        xi = rng.standard_normal(xbar.shape)
        for e, sq in noise:
            mu_q = (np.clip(xbar, -b, b) + sq * xi).mean(axis=0)
            err_dp[e].append(((g.personalized(xbar, weight[e], mu_q) - theta) ** 2).sum(axis=1))
    cf_local = g.mse_local(sx, n, d)
    cf_pers = g.mse_shrinkage(a_np, st, sx, n, m, 0.0, d)
    exact = {e: g.mse_dp_exact(weight[e], st, sx, n, m, p["mu"], b, sq**2 / m, d) for e, sq in noise}
    mc = p["reps"] > 0
    if mc:
        err_local, err_pers = np.concatenate(err_local), np.concatenate(err_pers)
        err_dp = {e: np.concatenate(v) for e, v in err_dp.items()}
    rows = [
        {
            "eps0": e,
            "sigma_q": sq,
            "a": weight[e],
            "mse_dp": float(err_dp[e].mean()) if mc else exact[e],
            "mse_dp_closed_form": exact[e],
            "mse_dp_eq19": g.mse_shrinkage(weight[e], st, sx, n, m, sq, d),
            "mse_local": float(err_local.mean()) if mc else cf_local,
            "mse_personalized": float(err_pers.mean()) if mc else cf_pers,
        }
        for e, sq in noise
    ]
    hist = pd.DataFrame(rows)
    checks = {}
    if mc:
        checks["local_flat_matches_closed_form"] = matches_closed_form("local", err_local, cf_local, p["z"])
        checks["personalized_flat_matches_closed_form"] = matches_closed_form("personalized", err_pers, cf_pers, p["z"])
        dp_ok = [
            abs(r["mse_dp"] - r["mse_dp_closed_form"])
            <= p["z"] * _dp_standard_error(err_dp[r["eps0"]], r["a"], st, sx, n, m, d, r["sigma_q"], p["reps"])
            for r in rows
        ]
        checks["dp_matches_closed_form"] = Check(
            all(dp_ok),
            f"DP MSE vs its exact form (eq. (19) with the projection on [-{b:.4g}, {b:.4g}]) at "
            f"eps0={p['eps0']}: within {p['z']} SE at {sum(dp_ok)}/{len(dp_ok)} points",
        )
    cf = np.array([exact[e] for e in p["eps0"]])
    checks["dp_decreases_with_eps0"] = Check(
        bool(np.all(np.diff(cf) < 0)), f"DP MSE (exact) across eps0: {np.round(cf * 100, 4).tolist()} (x1e-2)"
    )
    checks["dp_recovers_personalized_at_max_eps0"], recover = _recovers(p, b, noise[-1], cf[-1], cf_pers, a_np)
    metrics = {
        "mse_local_e2": 100 * (float(err_local.mean()) if mc else cf_local),
        "mse_personalized_e2": 100 * (float(err_pers.mean()) if mc else cf_pers),
        "closed_form_local_e2": 100 * cf_local,
        "closed_form_personalized_e2": 100 * cf_pers,
        "a_personalized": a_np,
        "projection_bound_b": b,
        "mse_dp_e2": {f"{r['eps0']:g}": 100 * r["mse_dp"] for r in rows},
        "closed_form_dp_e2": {f"{e:g}": 100 * exact[e] for e in p["eps0"]},
        "recover": recover,
    }
    return RunOutput(
        metrics=metrics,
        history=hist,
        checks=checks,
        accountant={"name": "closed form: Gaussian LDP mechanism, Ozkara et al. Thm 2.2 (eq. 24)", "version": "paper"},
    )


def _recovers(p: dict, b: float, last: tuple[float, float], dp: float, pers: float, a_np: float) -> tuple[Check, dict]:
    """'The private estimator recovers the personalized one when eps0 is high': the exact DP MSE at the largest eps0
    within recover_rel_tol of the personalized MSE. Also the largest per-client sigma_q that would do it, against the
    sigma_q Thm 2's mechanism gives there (what the figure needs vs what the mechanism can give)."""
    e, sq = last
    st, sx, n, m, d = p["sigma_theta"], p["sigma_x"], p["n"], p["m"], p["d"]
    gap = dp / pers - 1
    need = g.largest_recovering_sigma_q((1 + p["recover_rel_tol"]) * pers, st, sx, n, m, p["mu"], b, p["a_rule"], d)
    ratio = sq / need if need > 0 else math.inf
    # eq. (24)'s sigma_q = (b / eps0) sqrt(8 log(2 / delta)) <= need  <=>  delta >= 2 exp(-(need eps0 / b)^2 / 8)
    delta_needed = 2 * math.exp(-((need * e / b) ** 2) / 8) if b > 0 else math.inf
    check = Check(
        gap <= p["recover_rel_tol"],
        f"at eps0={e:g} the DP MSE (exact) is {dp * 100:.4f}e-2 vs personalized {pers * 100:.4f}e-2 "
        f"({gap:+.1%}; claim holds if within {p['recover_rel_tol']:.0%}); that needs sigma_q <= "
        f"{need:.3g}, the mechanism's sigma_q is {sq:.3g} ({ratio:.3g}x) at b = {b:.4g}, "
        f"delta = {p['delta']:g}; eq. (24) gives sigma_q <= {need:.3g} only for delta >= {delta_needed:.2g}",
        gap,
        0.0,
        p["recover_rel_tol"],
    )
    return check, {
        "gap": gap,
        "sigma_q_needed": need,
        "sigma_q": sq,
        "sigma_q_ratio": ratio,
        "delta_needed": delta_needed,
    }


REMARK1_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["m", "n", "sigma_x2", "sigma_theta2"],
    "properties": {"m": INT2, "n": INT1, "sigma_x2": POSITIVE, "sigma_theta2": NONNEG},
}


@experiment_kind("gaussian_remark1", REMARK1_SCHEMA, metrics=("a", "ratio"), checks=())
def gaussian_remark1(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    ratio = g.remark1_ratio(p["m"], p["n"], p["sigma_x2"], p["sigma_theta2"])
    a = p["sigma_theta2"] / (p["sigma_theta2"] + p["sigma_x2"] / p["n"])
    return RunOutput(metrics={"ratio": ratio, "a": a}, history=pd.DataFrame([{**p, "a": a, "ratio": ratio}]))
