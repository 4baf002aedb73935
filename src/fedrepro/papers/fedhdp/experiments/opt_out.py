"""Kind fedhdp_opt_out, Fig. 2 (model: point) / Fig. 3 (model: linreg): client c_k's personalized error vs lam,
c_k private vs opted out, under HDP-FedAvg+Ditto (r = 1) and FedHDP (r = r*), simulated against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.montecarlo import matches_closed_form
from fedrepro.experiments.params import INT1, INT2, POSITIVE
from fedrepro.papers.fedhdp import linear_regression as lr
from fedrepro.papers.fedhdp import point_estimation as pe
from fedrepro.papers.fedhdp.experiments.grids import FWER, GRID, family_z, grid_points

OPT_OUT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["model", "N", "n_np", "alpha2", "tau2", "gamma2", "n_s", "lam_grid", "trials", "fwer"],
    "properties": {
        "model": {"enum": ["point", "linreg"]},
        "N": INT2,
        "n_np": INT1,
        "alpha2": POSITIVE,
        "tau2": POSITIVE,
        "gamma2": POSITIVE,
        "n_s": INT1,
        "d": {"anyOf": [INT1, {"type": "null"}], "default": None},  # linreg's dimension (null: point estimation)
        "lam_grid": GRID,
        "trials": INT2,
        "fwer": FWER,
    },
}


def _opt_out_case(
    p: dict, n_np: int, private: bool, ratio_mode: str, lam: np.ndarray, rng: np.random.Generator
) -> dict:
    """One curve: c_k's error vs lam in a federation with n_np non-private clients (c_k private or not)."""
    n, a2, t2, g2 = p["N"], p["alpha2"], p["tau2"], p["gamma2"]
    counts, gam = [n_np, n - n_np], [0.0, g2]
    level = 1 if private else 0
    if p["model"] == "point":
        rho = n_np / n
        r = 1.0 if ratio_mode == "hdp" else pe.r_star(n, rho, a2 + t2, g2)
        mc = pe.opt_out_curves(n, rho, a2, t2, g2, r, lam, p["trials"], p["n_s"], rng, private)
        scale, loss = 1, mc["mse"]
        setup = pe.client_setup(n, rho, r, a2, t2, g2, private)
        setup_49 = pe.client_setup(n, rho, r, a2, t2, g2, private, own_noise="excluded")
        lam_star = pe.lambda_p_star(n, rho, a2, t2, g2) if private else pe.lambda_np_star(a2, t2)
    else:
        d, beta2 = p["d"], a2 * p["n_s"]  # alpha2 = beta2 / n_s (eq. 19)
        ratios = np.array([1.0, 1.0]) if ratio_mode == "hdp" else lr.r_star_levels(counts, gam, a2, t2)
        r = float(ratios[1])
        mc = lr.opt_out_curves(counts, gam, ratios, lam, p["trials"], d, p["n_s"], beta2, t2, rng, level)
        scale, loss = d, mc["loss"]
        setup = lr.level_setup(counts, gam, ratios, a2, t2, level)
        setup_49 = lr.level_setup(counts, gam, ratios, a2, t2, level, own_noise="excluded")
        lam_star = lr.lambda_star_two_level(n_np, n - n_np, 0.0, g2, a2, t2)[level]
    cf = scale * pe.local_mse(lam, *setup, a2, t2)
    return {
        "mc": loss,
        "se": mc["se"],
        "cf": cf,
        "r": r,
        "lam_argmin": pe.local_mse_argmin(*setup, a2, t2),
        "lam_argmin_eq49": pe.local_mse_argmin(*setup_49, a2, t2),
        "lam_star": lam_star,
        "min_cf": scale * float(pe.local_mse(pe.local_mse_argmin(*setup, a2, t2), *setup, a2, t2)),
        "cf_at_star": scale * float(pe.local_mse(lam_star, *setup, a2, t2)),
    }


@experiment_kind(
    "fedhdp_opt_out",
    OPT_OUT_SCHEMA,
    metrics=("fedhdp.*", "hdp.*"),
    checks=(
        "fedhdp_beats_hdp",
        "lam_np_at_least_lam_p",
        "lam_star_is_bayes_optimal_eq49",
        "mc_matches_closed_form",
        "opting_out_helps",
    ),
    # one chunk of trials' samples (chunk, N, n_s) and every trial's error at every lambda (trials, lam_grid.num)
    memory=MemoryNeed(
        ("trials", "N", "n_s", "lam_grid"),
        lambda p: FLOAT64 * (min(p["trials"], 2000) * p["N"] * p["n_s"] + p["trials"] * p["lam_grid"]["num"]),
    ),
)
def fedhdp_opt_out(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    if p["model"] == "linreg" and p["d"] is None:
        raise ValueError("fedhdp_opt_out: model linreg needs d")
    if not 1 <= p["n_np"] <= p["N"] - 2:
        raise ValueError("fedhdp_opt_out: need 1 <= n_np <= N - 2 (c_k private, then opted out)")
    lam = grid_points(p["lam_grid"])
    scenarios = {"private": (p["n_np"], True), "opted_out": (p["n_np"] + 1, False)}
    z = family_z(p["fwer"], 4 * lam.size)
    rows, res, metrics = [], {}, {}
    for panel in ("hdp", "fedhdp"):
        for sc, (n_np, private) in scenarios.items():
            out = _opt_out_case(p, n_np, private, panel, lam, rng)
            res[panel, sc] = out
            metrics[f"{panel}.{sc}"] = {
                k: out[k] for k in ("r", "lam_argmin", "lam_argmin_eq49", "min_cf", "cf_at_star")
            }
            metrics[f"{panel}.{sc}"]["lam_star"] = out["lam_star"]
            for i in range(lam.size):
                rows.append(
                    {
                        "panel": panel,
                        "scenario": sc,
                        "lam": lam[i],
                        "loss_mc": out["mc"][i],
                        "se": out["se"][i],
                        "loss_closed_form": out["cf"][i],
                        "r": out["r"],
                        "lam_marker": out["lam_star"] if panel == "fedhdp" else out["lam_argmin"],
                    }
                )
    allv = lambda k: np.concatenate([v[k] for v in res.values()])  # noqa: E731
    fp, fo = res["fedhdp", "private"], res["fedhdp", "opted_out"]
    eq = "(50)" if p["model"] == "linreg" else "(17)/(18)"
    eq_ok = all(math.isclose(v["lam_star"], v["lam_argmin_eq49"], rel_tol=1e-9) for v in (fp, fo))
    checks = {
        "mc_matches_closed_form": matches_closed_form(
            "c_k loss vs lam, 2 panels x 2 scenarios", allv("mc"), allv("cf"), z, se=allv("se")
        ),
        "lam_star_is_bayes_optimal_eq49": Check(
            eq_ok,
            f"FedHDP panel: eq. {eq} lam* = {fp['lam_star']:.6g} (private), {fo['lam_star']:.6g} (opted "
            f"out) vs argmin of the closed form with c_k's own contribution noise-free (eq. 49): "
            f"{fp['lam_argmin_eq49']:.6g}, {fo['lam_argmin_eq49']:.6g}; Algorithm 1 read literally (own "
            f"noisy psi_k in the global model) gives {fp['lam_argmin']:.6g} for the private client",
        ),
        "opting_out_helps": Check(
            all(res[pn, "opted_out"]["min_cf"] < res[pn, "private"]["min_cf"] for pn in ("hdp", "fedhdp")),
            "min over lam of c_k's loss, private -> opted out: "
            + "; ".join(
                f"{pn}: {res[pn, 'private']['min_cf']:.4g} -> {res[pn, 'opted_out']['min_cf']:.4g}"
                for pn in ("hdp", "fedhdp")
            ),
        ),
        "fedhdp_beats_hdp": Check(
            all(res["fedhdp", s]["min_cf"] < res["hdp", s]["min_cf"] for s in scenarios),
            "min over lam, HDP-FedAvg+Ditto vs FedHDP: "
            + "; ".join(f"{s}: {res['hdp', s]['min_cf']:.4g} vs {res['fedhdp', s]['min_cf']:.4g}" for s in scenarios),
        ),
        "lam_np_at_least_lam_p": Check(
            fo["lam_star"] >= fp["lam_star"], f"lam*_np = {fo['lam_star']:.6g} >= lam*_p = {fp['lam_star']:.6g}"
        ),
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)
