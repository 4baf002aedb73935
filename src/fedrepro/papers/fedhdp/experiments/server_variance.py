"""Kind fedhdp_server_variance, Fig. 1: the server variance sigma_s^2 vs the ratio r (federated point estimation),
simulated against eq. (C1), with Lemma 1's optimum r* marked."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.montecarlo import matches_closed_form
from fedrepro.experiments.params import INT1, INT2, POSITIVE, UNIT
from fedrepro.papers.fedhdp import point_estimation as pe
from fedrepro.papers.fedhdp.experiments.grids import FWER, GRID, family_z, grid_points

SERVER_VARIANCE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["N", "rho", "n_s", "alpha_share", "panels", "r_grid", "trials", "fwer"],
    "properties": {
        "N": INT2,
        "rho": UNIT,
        "n_s": INT1,
        "alpha_share": UNIT,
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "curves"],
                "properties": {
                    "name": {"type": "string"},
                    "curves": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["sigma_c2", "gamma2"],
                            "properties": {"sigma_c2": POSITIVE, "gamma2": POSITIVE},
                        },
                    },
                },
            },
        },
        "r_grid": GRID,
        "trials": INT2,
        "fwer": FWER,
    },
}


@experiment_kind(
    "fedhdp_server_variance",
    SERVER_VARIANCE_SCHEMA,
    metrics=("left.*", "right.*"),
    checks=("lemma1_r_star_minimizes", "mc_matches_closed_form", "mc_r_star_beats_fedavg"),
    # phi_j, phi_hat_j and psi_j of every trial's N clients (trials, N)
    memory=MemoryNeed(("trials", "N"), lambda p: 3 * FLOAT64 * p["trials"] * p["N"]),
)
def fedhdp_server_variance(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    n, rho = p["N"], p["rho"]
    n_np, n_p = pe.split(n, rho)
    r = grid_points(p["r_grid"])
    curves = [(panel["name"], c) for panel in p["panels"] for c in panel["curves"]]
    z = family_z(p["fwer"], len(curves) * r.size)
    rows, mcs, ses, cfs, metrics = [], [], [], [], {}
    lemma1_ok, beats_ok, details = [], [], []
    fine = np.linspace(0, 1, 200001)
    for panel, c in curves:
        sc2, g2 = c["sigma_c2"], c["gamma2"]
        alpha2, tau2 = p["alpha_share"] * sc2, (1 - p["alpha_share"]) * sc2
        noise = np.r_[np.zeros(n_np), np.full(n_p, n_p * g2)]
        sim = pe.simulate_clients(p["trials"], n, p["n_s"], alpha2, tau2, noise, rng)
        err = pe.aggregate(sim["psi"], n_np, r)  # phi = 0
        mc, se = pe.mc_mean_se(err**2)
        cf = pe.server_variance(r, n, rho, sc2, g2)
        rs, vopt = pe.r_star(n, rho, sc2, g2), pe.server_variance_opt(n, rho, sc2, g2)
        # Lemma 1: r* minimizes sigma_s^2(r) over [0, 1] and sigma_s^2(r*) is eq. (13)
        vf = pe.server_variance(fine, n, rho, sc2, g2)
        lemma1_ok.append(
            abs(float(pe.server_variance(rs, n, rho, sc2, g2)) - vopt) <= 1e-12 * vopt
            and vf.min() >= vopt * (1 - 1e-12)
            and abs(fine[vf.argmin()] - rs) <= 1e-5
        )
        at_star = pe.aggregate(sim["psi"], n_np, [rs, 1.0])
        diff = at_star[:, 1] ** 2 - at_star[:, 0] ** 2  # paired: FedAvg weights minus r*
        beats_ok.append(diff.mean() > z * diff.std(ddof=1) / math.sqrt(diff.size))
        details.append(
            f"sigma_c2={sc2:g}, gamma2={g2:g}: r*={rs:.4g}, opt {vopt:.4g}, MC(r*) "
            f"{np.mean(at_star[:, 0] ** 2):.4g}, MC(r=1) {np.mean(at_star[:, 1] ** 2):.4g}"
        )
        label = f"{panel}.sc{sc2:g}_g{g2:g}"
        metrics[label] = {
            "r_star": rs,
            "var_opt": vopt,
            "var_opt_mc": float(np.mean(at_star[:, 0] ** 2)),
            "var_fedavg": float(pe.server_variance(1.0, n, rho, sc2, g2)),
        }
        for i in range(r.size):
            rows.append(
                {
                    "panel": panel,
                    "sigma_c2": sc2,
                    "gamma2": g2,
                    "r": r[i],
                    "var_mc": mc[i],
                    "se": se[i],
                    "var_closed_form": cf[i],
                    "r_star": rs,
                    "var_opt": vopt,
                }
            )
        mcs.append(mc), ses.append(se), cfs.append(cf)
    checks = {
        "mc_matches_closed_form": matches_closed_form(
            "sigma_s^2(r), all curves", np.concatenate(mcs), np.concatenate(cfs), z, se=np.concatenate(ses)
        ),
        "lemma1_r_star_minimizes": Check(
            all(lemma1_ok),
            f"r* of Lemma 1 is the minimizer of the closed form over "
            f"[0,1] and attains eq. (13) for {sum(lemma1_ok)}/{len(lemma1_ok)} curves",
        ),
        "mc_r_star_beats_fedavg": Check(
            all(beats_ok), "simulated sigma_s^2 at r* below r = 1 (paired, z SE): " + "; ".join(details)
        ),
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)
