"""Kind fedhdp_table2: Table 2's four special cases of lambda*, Lemma 1/2, Theorem 3 and eqs. (17)/(18)/(79) checked
at several parameter points, with Monte Carlo for the inconsistent cell."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.params import INT1, INT2, NONNEG, POSITIVE, UNIT
from fedrepro.papers.fedhdp import point_estimation as pe
from fedrepro.papers.fedhdp.experiments.grids import FWER, family_z

TABLE2_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["points", "lemma2_limit_N", "lemma2_rel_tol", "mc_point", "trials", "n_s", "fwer", "examples"],
    "properties": {
        "points": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["N", "alpha2", "tau2", "gamma2", "rho"],
                "properties": {"N": INT2, "alpha2": POSITIVE, "tau2": POSITIVE, "gamma2": POSITIVE, "rho": UNIT},
            },
        },
        "lemma2_limit_N": INT2,
        "lemma2_rel_tol": POSITIVE,
        "mc_point": {
            "type": "object",
            "additionalProperties": False,
            "required": ["N", "alpha2", "gamma2"],
            "properties": {"N": INT2, "alpha2": POSITIVE, "gamma2": POSITIVE},
        },
        "trials": INT2,
        "n_s": INT1,
        "fwer": FWER,
        "examples": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["N", "rho", "alpha2", "tau2", "gamma2"],
                "properties": {"N": INT2, "rho": UNIT, "alpha2": POSITIVE, "tau2": NONNEG, "gamma2": POSITIVE},
            },
        },
    },
}


def _argmin(n, rho, a2, t2, g2, private, own="excluded"):
    r = pe.r_star(n, rho, a2 + t2, g2) if 0 < rho < 1 else 1.0
    return pe.local_mse_argmin(*pe.client_setup(n, rho, r, a2, t2, g2, private, own), a2, t2)


@experiment_kind(
    "fedhdp_table2",
    TABLE2_SCHEMA,
    metrics=("examples.*", "mc_hom_priv.*"),
    checks=(
        "eq18_equals_eq79",
        "lemma1_optimum",
        "lemma2_gaps_and_limits",
        "table2_het_data_hom_priv",
        "table2_het_data_no_priv",
        "table2_hom_data_hom_priv",
        "table2_hom_data_no_priv",
        "table2_hom_priv_eq18",
        "table2_hom_priv_mc_prefers_eq18",
        "theorem3_bayes_optimal",
    ),
    # at mc_point: phi_j, phi_hat_j, psi_j (trials, N) and the estimates at two lambdas (trials, N, 2)
    memory=MemoryNeed(("trials", "mc_point"), lambda p: 5 * FLOAT64 * p["trials"] * p["mc_point"]["N"]),
)
def fedhdp_table2(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Table 2 entries as checks of the printed formula against eq. (17)/(18) and against the independent argmin of
    the exact MSE (eq. 49 convention), at every parameter point; plus Lemma 1/2, Theorem 3 and eq. (79)."""
    pts = p["points"]
    rel = lambda x, y: math.isclose(x, y, rel_tol=1e-9)  # noqa: E731
    rows, det = (
        [],
        {
            k: []
            for k in ("hom_np", "hom_p_printed", "hom_p_eq18", "het_np", "het_p", "thm3", "eq79", "lemma1", "lemma2")
        },
    )
    for q in pts:
        n, a2, t2, g2, rho = q["N"], q["alpha2"], q["tau2"], q["gamma2"], q["rho"]
        # Homogeneous data, no privacy (tau2 = 0, rho = 1): FedAvg, lam*_np = inf
        det["hom_np"].append(math.isinf(pe.lambda_np_star(a2, 0.0)) and math.isinf(_argmin(n, 1.0, a2, 0.0, g2, False)))
        # Homogeneous data, homogeneous privacy (tau2 = 0, rho = 0): printed 1/gamma2
        eq18 = pe.lambda_p_star(n, 0.0, a2, 0.0, g2)
        am = _argmin(n, 0.0, a2, 0.0, g2, True)
        det["hom_p_printed"].append(rel(1 / g2, am))
        det["hom_p_eq18"].append(rel(eq18, am) and rel(eq18, a2 / g2))
        # Heterogeneous data, no privacy (rho = 1): lam*_np = alpha2/tau2
        det["het_np"].append(
            rel(a2 / t2, _argmin(n, 1.0, a2, t2, g2, False)) and rel(a2 / t2, pe.lambda_np_star(a2, t2))
        )
        # Heterogeneous data, homogeneous privacy (rho = 0): printed N a2 / (N t2 + (1 - rho) N g2)
        printed = n * a2 / (n * t2 + (1 - 0.0) * n * g2)
        det["het_p"].append(
            rel(printed, _argmin(n, 0.0, a2, t2, g2, True)) and rel(printed, pe.lambda_p_star(n, 0.0, a2, t2, g2))
        )
        # Theorem 3 at the point's own rho (0 < rho < 1): (17)/(18) are the argmin and reach the Bayes variance
        if 0 < rho < 1:
            lp, lnp = pe.lambda_p_star(n, rho, a2, t2, g2), pe.lambda_np_star(a2, t2)
            r = pe.r_star(n, rho, a2 + t2, g2)
            ok = rel(lp, _argmin(n, rho, a2, t2, g2, True)) and rel(lnp, _argmin(n, rho, a2, t2, g2, False))
            for priv, lam in ((True, lp), (False, lnp)):
                s = pe.client_setup(n, rho, r, a2, t2, g2, priv, "excluded")
                ok &= rel(float(pe.local_mse(lam, *s, a2, t2)), pe.bayes_local_variance(n, rho, a2, t2, g2, priv))
            det["thm3"].append(ok)
            det["eq79"].append(rel(lp, pe.lambda_p_star_eq79(n, rho, a2, t2, g2)))
            vopt = pe.server_variance_opt(n, rho, a2 + t2, g2)
            grid = np.linspace(0, 1, 100001)
            det["lemma1"].append(
                rel(float(pe.server_variance(r, n, rho, a2 + t2, g2)), vopt)
                and pe.server_variance(grid, n, rho, a2 + t2, g2).min() >= vopt * (1 - 1e-12)
            )
            gaps = pe.lemma2_gaps(n, rho, a2 + t2, g2)
            hdp, dp = pe.server_variance_hdp(n, rho, a2 + t2, g2), pe.server_variance_dp(n, rho, a2 + t2, g2)
            lim = pe.lemma2_gaps(p["lemma2_limit_N"], rho, a2 + t2, g2)
            tol = p["lemma2_rel_tol"]
            det["lemma2"].append(
                rel(gaps["hdp_minus_opt"], hdp - vopt)
                and rel(gaps["dp_minus_opt"], dp - vopt)
                and rel(gaps["dp_minus_hdp"], dp - hdp)
                and math.isclose(lim["hdp_minus_opt"], (1 - rho) ** 2 * g2, rel_tol=tol)
                and math.isclose(lim["dp_minus_opt"], (1 - rho) * g2, rel_tol=tol)
            )
        rows.append(
            {
                **q,
                "lam_p_eq18": pe.lambda_p_star(n, rho, a2, t2, g2),
                "lam_np_eq17": a2 / t2,
                "lam_hom_priv_eq18": eq18,
                "lam_hom_priv_printed": 1 / g2,
                "lam_hom_priv_argmin": am,
            }
        )

    def verdict(key, text):
        v = det[key]
        return Check(bool(v) and all(v), f"{text}: holds at {sum(v)}/{len(v)} parameter points")

    # Monte Carlo for the homogeneous-data / homogeneous-privacy cell: simulated MSE at the printed 1/gamma2 vs at
    # eq. (18)'s alpha2/gamma2 (paired, common random numbers), with c_k's own contribution noise-free (eq. 49).
    m = p["mc_point"]
    lam_pair = np.array([1 / m["gamma2"], m["alpha2"] / m["gamma2"]])
    mc = _mc_pair(m, lam_pair, p, rng)
    z = family_z(p["fwer"], 1)
    checks = {
        "table2_hom_data_no_priv": verdict(
            "hom_np",
            "tau2 = 0, rho = 1: eq. (17) and the exact argmin are infinite "
            "(FedAvg without personalization), as printed",
        ),
        "table2_hom_data_hom_priv": verdict(
            "hom_p_printed", "tau2 = 0, rho = 0: printed lam*_p = 1/gamma2 equals the exact argmin"
        ),
        "table2_hom_priv_eq18": verdict("hom_p_eq18", "tau2 = 0, rho = 0: eq. (18) = alpha2/gamma2 = the exact argmin"),
        "table2_het_data_no_priv": verdict(
            "het_np", "tau2 > 0, rho = 1: printed alpha2/tau2 equals eq. (17) and the exact argmin"
        ),
        "table2_het_data_hom_priv": verdict(
            "het_p",
            "tau2 > 0, rho = 0: printed N alpha2/(N tau2 + (1-rho) N gamma2) equals eq. (18) and the exact argmin",
        ),
        "theorem3_bayes_optimal": verdict(
            "thm3", "Theorem 3: eqs. (17)/(18) minimize the exact MSE and attain the Bayes error (46)"
        ),
        "eq18_equals_eq79": verdict("eq79", "eq. (18) equals eq. (79)"),
        "lemma1_optimum": verdict("lemma1", "Lemma 1: sigma_s^2(r*) equals eq. (13) and is the minimum over [0,1]"),
        "lemma2_gaps_and_limits": verdict(
            "lemma2",
            f"Lemma 2: gaps (14)-(16) equal the differences of the "
            f"variances, and at N = {p['lemma2_limit_N']:g} they are within "
            f"{p['lemma2_rel_tol']:g} (rel.) of (1-rho)^2 gamma2 and "
            f"(1-rho) gamma2",
        ),
        "table2_hom_priv_mc_prefers_eq18": Check(
            bool(mc["diff"] > z * mc["diff_se"]),
            f"Monte Carlo, N={m['N']}, alpha2={m['alpha2']:g}, gamma2={m['gamma2']:g}, tau2=0, rho=0: MSE at printed "
            f"1/gamma2 = {1 / m['gamma2']:.4g}: {mc['mse'][0]:.6g}; at eq. (18) alpha2/gamma2 = "
            f"{lam_pair[1]:.4g}: {mc['mse'][1]:.6g}; paired difference {mc['diff']:.4g} (z SE = "
            f"{z * mc['diff_se']:.3g})",
        ),
    }
    metrics = {
        "mc_hom_priv": {"mse_printed_lam": float(mc["mse"][0]), "mse_eq18_lam": float(mc["mse"][1])},
        "examples": {
            name: {
                "lam_p_star": pe.lambda_p_star(e["N"], e["rho"], e["alpha2"], e["tau2"], e["gamma2"]),
                "r_star": pe.r_star(e["N"], e["rho"], e["alpha2"] + e["tau2"], e["gamma2"]),
            }
            for name, e in p["examples"].items()
        },
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)


def _mc_pair(m: dict, lam: np.ndarray, p: dict, rng: np.random.Generator) -> dict:
    """Simulated MSE of theta_k(lam) at two lam with tau2 = 0, everyone private (DP-FedAvg), c_k's own contribution
    noise-free (eq. 49); paired difference MSE(lam[0]) - MSE(lam[1]) with its standard error."""
    n, a2, g2 = m["N"], m["alpha2"], m["gamma2"]
    noise = np.full(n, n * g2)
    sim = pe.simulate_clients(p["trials"], n, p["n_s"], a2, 0.0, noise, rng)
    theta = sim["psi"].mean(axis=1, keepdims=True)
    th = theta - (sim["psi"] - sim["phi_hat"]) / n  # each client's own noise removed (eq. 49)
    est = pe.personalize(sim["phi_hat"], th, lam)
    sq = ((est - sim["phi_j"][..., None]) ** 2).mean(axis=1)  # (trials, 2), averaged over the N clients
    d = sq[:, 0] - sq[:, 1]
    return {"mse": sq.mean(axis=0), "diff": float(d.mean()), "diff_se": float(d.std(ddof=1) / math.sqrt(d.size))}
