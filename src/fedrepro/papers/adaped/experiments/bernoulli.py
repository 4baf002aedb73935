"""AdaPeD App. K "Personalized estimation: synthetic experiments in Bernoulli setting" (kind ``bernoulli_synthetic``).

m clients, n samples each, p_i drawn from one of four priors (normal, uniform, 3-spike, Beta); the metric is the
MSE decrease of the eq. (6) personalized estimator against the local Z_i/n, in percent, per prior:
100 (MSE_local - MSE_pers) / MSE_local, with both MSEs averaged over all clients and all ``reps`` datasets.

Priors: uniform U[0, 1]; 3-spike = equal mass at ``spikes``; Beta(beta_alpha, beta_beta); normal N(normal_mean,
normal_std^2) restricted to [0, 1] by ``normal_support``: "truncate" (the truncated normal: exact inverse-CDF
sampling, i.e. out-of-range draws are redrawn) or "clip" (project onto [0, 1], putting atoms at 0 and 1).

Checks (closed forms; each can fail): local MSE = E p(1-p)/n; eq. (6) MSE and the paired MSE decrease equal their
large-m limits (docs/notes/adaped.md §8.9, see :func:`fedrepro.papers.adaped.bernoulli.eq6_large_m_limit`) within z
Monte Carlo
standard errors; for the Beta prior, the known-prior posterior mean (31)
attains its Bayes risk, eq. (6) does not beat it, and eq. (6) lies under the Thm 3 bound; and the paper's claim that
less spread-out priors give larger gains.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import integrate, stats

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.montecarlo import matches_closed_form
from fedrepro.experiments.params import INT1, INT3, POSITIVE, UNIT
from fedrepro.papers.adaped import bernoulli as b

PRIORS = ("normal", "uniform", "spike3", "beta")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "m",
        "n",
        "reps",
        "normal_mean",
        "normal_std",
        "normal_support",
        "spikes",
        "beta_alpha",
        "beta_beta",
        "minus_one",
        "centre",
        "z",
    ],
    "properties": {
        "m": INT3,
        "n": INT1,
        "reps": INT1,
        "normal_mean": UNIT,
        "normal_std": POSITIVE,
        "normal_support": {"enum": ["truncate", "clip"]},
        "spikes": {"type": "array", "minItems": 1, "items": UNIT},
        "beta_alpha": POSITIVE,
        "beta_beta": POSITIVE,
        "minus_one": {"type": "boolean"},
        "centre": {"enum": list(b.CENTRES)},
        "z": POSITIVE,
    },
}


def _truncnorm(p: dict):
    lo, hi = (0.0 - p["normal_mean"]) / p["normal_std"], (1.0 - p["normal_mean"]) / p["normal_std"]
    return stats.truncnorm(lo, hi, loc=p["normal_mean"], scale=p["normal_std"])


def sample_prior(name: str, p: dict, size, rng: np.random.Generator) -> np.ndarray:
    """Draw p_i from prior ``name`` with the experiment's parameters ``p``."""
    if name == "uniform":
        return rng.random(size)
    if name == "spike3":
        return rng.choice(np.asarray(p["spikes"], dtype=float), size=size)
    if name == "beta":
        return rng.beta(p["beta_alpha"], p["beta_beta"], size=size)
    if name == "normal":
        if p["normal_support"] == "truncate":
            return _truncnorm(p).rvs(size=size, random_state=rng)
        return np.clip(p["normal_mean"] + p["normal_std"] * rng.standard_normal(size), 0.0, 1.0)
    raise ValueError(f"unknown prior {name!r}")


def prior_moments(name: str, p: dict) -> tuple[float, float]:
    """Exact mean and variance of prior ``name`` (numerical quadrature only for the clipped normal)."""
    if name == "uniform":
        return 0.5, 1.0 / 12.0
    if name == "spike3":
        s = np.asarray(p["spikes"], dtype=float)
        return float(s.mean()), float(s.var())
    if name == "beta":
        return b.beta_moments(p["beta_alpha"], p["beta_beta"])
    if name == "normal":
        if p["normal_support"] == "truncate":
            mean, var = _truncnorm(p).stats(moments="mv")
            return float(mean), float(var)
        nd = stats.norm(p["normal_mean"], p["normal_std"])
        upper = nd.sf(1.0)  # atom at 1 (the atom at 0 adds nothing to either moment)
        m1 = integrate.quad(lambda y: y * nd.pdf(y), 0.0, 1.0)[0] + upper
        m2 = integrate.quad(lambda y: y * y * nd.pdf(y), 0.0, 1.0)[0] + upper
        return m1, m2 - m1 * m1
    raise ValueError(f"unknown prior {name!r}")


def _gain(mse_local: float, mse_pers: float) -> float:
    return 100.0 * (mse_local - mse_pers) / mse_local


@experiment_kind(
    "bernoulli_synthetic",
    SCHEMA,
    metrics=(
        "a_hat_mean.*",
        "beta_known_prior.*",
        "gain_pct.*",
        "gain_pct_limit.*",
        "mse_local.*",
        "mse_personalized.*",
    ),
    checks=(
        "*_eq6_matches_large_m_limit",
        "*_local_matches_closed_form",
        "*_mse_decrease_matches_large_m_limit",
        "beta_eq6_not_below_bayes_risk",
        "beta_known_prior_matches_bayes_risk",
        "beta_within_thm3_bound",
        "claim_less_spread_more_gain",
    ),
    # per prior, (reps, m) arrays: p_i, Z_i, the local and the eq. (6) estimates, eq. (6)'s weights, two squared errors
    memory=MemoryNeed(("m", "reps"), lambda p: 7 * FLOAT64 * p["m"] * p["reps"]),
)
def bernoulli_synthetic(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    m, n, reps, z = p["m"], p["n"], p["reps"], p["z"]
    metrics: dict = {k: {} for k in ("gain_pct", "mse_local", "mse_personalized", "gain_pct_limit", "a_hat_mean")}
    checks: dict[str, Check] = {}
    rows = []
    variances = {}
    for prior in PRIORS:
        theta = sample_prior(prior, p, (reps, m), rng)
        zs = rng.binomial(n, theta)
        xbar = b.local_estimate(zs, n)
        est = b.loo_estimate(xbar, n, minus_one=p["minus_one"], centre=p["centre"])
        err_loc = (xbar - theta) ** 2
        err_pers = (est["p_hat"] - theta) ** 2
        for r in range(reps):
            ml, mp = float(err_loc[r].mean()), float(err_pers[r].mean())
            rows.append(
                {
                    "prior": prior,
                    "rep": r,
                    "mse_local": ml,
                    "mse_personalized": mp,
                    "gain_pct": _gain(ml, mp),
                    "a_hat_mean": float(est["a_hat"][r].mean()),
                    "a_hat_min": float(est["a_hat"][r].min()),
                    "a_hat_max": float(est["a_hat"][r].max()),
                    "mu_hat_mean": float(est["mu_hat"][r].mean()),
                    "sigma2_hat_mean": float(est["sigma2_hat"][r].mean()),
                }
            )
        ml, mp = float(err_loc.mean()), float(err_pers.mean())
        mu, var = prior_moments(prior, p)
        variances[prior] = var
        lim = b.eq6_large_m_limit(mu, var, n, p["minus_one"])
        metrics["gain_pct"][prior] = _gain(ml, mp)
        metrics["mse_local"][prior] = ml
        metrics["mse_personalized"][prior] = mp
        metrics["gain_pct_limit"][prior] = lim["gain_pct"]
        metrics["a_hat_mean"][prior] = float(est["a_hat"].mean())
        checks[f"{prior}_local_matches_closed_form"] = matches_closed_form(
            f"{prior} local MSE vs E p(1-p)/n", err_loc.ravel(), lim["mse_local"], z
        )
        checks[f"{prior}_eq6_matches_large_m_limit"] = matches_closed_form(
            f"{prior} eq. (6) MSE vs its large-m limit (a_inf = {lim['a']:.4f})",
            err_pers.ravel(),
            lim["mse_personalized"],
            z,
        )
        checks[f"{prior}_mse_decrease_matches_large_m_limit"] = matches_closed_form(
            f"{prior} paired MSE_local - MSE_eq6 vs its large-m limit",
            (err_loc - err_pers).ravel(),
            lim["mse_local"] - lim["mse_personalized"],
            z,
        )
        if prior == "beta":
            al, be = p["beta_alpha"], p["beta_beta"]
            err_bayes = (b.posterior_mean(zs, n, al, be) - theta) ** 2
            risk = b.bayes_risk_posterior_mean(n, al, be)
            metrics["beta_known_prior"] = {
                "mse": float(err_bayes.mean()),
                "bayes_risk": risk,
                "gain_pct": _gain(ml, float(err_bayes.mean())),
            }
            checks["beta_known_prior_matches_bayes_risk"] = matches_closed_form(
                "Beta: eq. (31) MSE vs its Bayes risk", err_bayes.ravel(), risk, z
            )
            diff = (err_pers - err_bayes).ravel()
            se = float(diff.std(ddof=1) / math.sqrt(diff.size))
            checks["beta_eq6_not_below_bayes_risk"] = Check(
                float(diff.mean()) >= -z * se,
                f"Beta: eq. (6) MSE - known-prior (Bayes) MSE = {diff.mean():.3g} (must be >= -{z} SE = {-z * se:.3g})",
                float(diff.mean()),
                0.0,
                z * se,
            )
            bound = b.thm3_bound(est["a_hat"], n, al, be, m)
            checks["beta_within_thm3_bound"] = Check(
                mp <= bound, f"Beta: eq. (6) MSE {mp:.6g} <= Thm 3 bound {bound:.6g}", mp, bound
            )
    by_spread = sorted(PRIORS, key=lambda k: variances[k])
    gains = [metrics["gain_pct"][k] for k in by_spread]
    checks["claim_less_spread_more_gain"] = Check(
        bool(np.all(np.diff(gains) < 0)),
        "App. K claim 'less spread out priors give a larger MSE gap': priors by increasing variance "
        + ", ".join(f"{k} (var {variances[k]:.4f}): {metrics['gain_pct'][k]:.2f}%" for k in by_spread),
    )
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)
