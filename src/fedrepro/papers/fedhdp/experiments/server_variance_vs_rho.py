"""Kind fedhdp_server_variance_vs_rho, Fig. 4 (App. B): the server variance sigma_s^2 vs rho_np, the FedAvg
aggregator (r = 1) against the optimal FedHDP aggregator (r = r*), simulated against the closed forms."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.montecarlo import matches_closed_form
from fedrepro.experiments.params import INT1, INT2, POSITIVE, UNIT
from fedrepro.papers.fedhdp import point_estimation as pe
from fedrepro.papers.fedhdp.experiments.grids import FWER, family_z

VS_RHO_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["N", "sigma_c2", "gamma2", "alpha_share", "n_s", "n_np_step", "trials", "fwer", "claim"],
    "properties": {
        "N": INT2,
        "sigma_c2": POSITIVE,
        "gamma2": POSITIVE,
        "alpha_share": UNIT,
        "n_s": INT1,
        "n_np_step": INT1,
        "trials": INT2,
        "fwer": FWER,
        "claim": {
            "type": "object",
            "additionalProperties": False,
            "required": ["rho", "min_ratio"],
            "properties": {"rho": UNIT, "min_ratio": POSITIVE},
        },
    },
}


@experiment_kind(
    "fedhdp_server_variance_vs_rho",
    VS_RHO_SCHEMA,
    metrics=("ratio_at_claim_rho", "ratio_at_smallest_rho", "smallest_rho"),
    checks=("closed_forms_agree", "fedhdp_below_fedavg", "large_gain_at_small_rho", "mc_matches_closed_form"),
    # phi_j, phi_hat_j, psi_j, the noise draws and two cumulative sums, each (trials, N)
    memory=MemoryNeed(("trials", "N"), lambda p: 6 * FLOAT64 * p["trials"] * p["N"]),
)
def fedhdp_server_variance_vs_rho(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    n, sc2, g2 = p["N"], p["sigma_c2"], p["gamma2"]
    alpha2, tau2 = p["alpha_share"] * sc2, (1 - p["alpha_share"]) * sc2
    ks = np.arange(p["n_np_step"], n, p["n_np_step"])  # number of non-private clients, 0 < k < N
    # One federation per trial; for k non-private clients the first k are non-private and each of the other
    # N - k adds noise of variance (N - k) gamma2 (the same standard normals, rescaled: common random numbers).
    sim = pe.simulate_clients(p["trials"], n, p["n_s"], alpha2, tau2, np.zeros(n), rng)
    e, xi = sim["phi_hat"], rng.standard_normal((p["trials"], n))
    ce, cx = np.cumsum(e, axis=1), np.cumsum(xi, axis=1)
    a = ce[:, ks - 1]
    b = (ce[:, -1:] - a) + np.sqrt((n - ks) * g2) * (cx[:, -1:] - cx[:, ks - 1])
    rows, mcs, ses, cfs = [], [], [], []
    for method in ("fedavg", "fedhdp"):
        rs = np.ones(ks.size) if method == "fedavg" else np.array([pe.r_star(n, k / n, sc2, g2) for k in ks])
        err = (a + rs * b) / (ks + rs * (n - ks))
        mc, se = pe.mc_mean_se(err**2)
        cf = np.array([float(pe.server_variance(r, n, k / n, sc2, g2)) for r, k in zip(rs, ks)])
        mcs.append(mc), ses.append(se), cfs.append(cf)
        for i, k in enumerate(ks):
            rows.append(
                {
                    "method": method,
                    "rho": k / n,
                    "n_np": int(k),
                    "r": rs[i],
                    "var_mc": mc[i],
                    "se": se[i],
                    "var_closed_form": cf[i],
                }
            )
    fedavg_cf, opt_cf = cfs
    lemma = np.array([pe.server_variance_opt(n, k / n, sc2, g2) for k in ks])
    hdp = np.array([pe.server_variance_hdp(n, k / n, sc2, g2) for k in ks])
    rc = p["claim"]["rho"]
    ratio = pe.server_variance_hdp(n, rc, sc2, g2) / pe.server_variance_opt(n, rc, sc2, g2)
    checks = {
        "mc_matches_closed_form": matches_closed_form(
            "sigma_s^2 vs rho, FedAvg and FedHDP",
            np.concatenate(mcs),
            np.concatenate(cfs),
            family_z(p["fwer"], 2 * ks.size),
            se=np.concatenate(ses),
        ),
        "closed_forms_agree": Check(
            bool(np.allclose(opt_cf, lemma, rtol=1e-12) and np.allclose(fedavg_cf, hdp, rtol=1e-12)),
            "C1 at r* equals eq. (13) and C1 at r = 1 equals sigma_c2/N + (1-rho)^2 gamma2 at every rho",
        ),
        "fedhdp_below_fedavg": Check(
            bool(np.all(opt_cf < fedavg_cf)),
            f"FedHDP (r*) strictly below the FedAvg aggregator at all {ks.size} values of rho in (0, 1)",
        ),
        "large_gain_at_small_rho": Check(
            bool(ratio >= p["claim"]["min_ratio"]),
            f"App. B: 'a large gain even if a small percentage of clients opt out': "
            f"FedAvg / FedHDP variance ratio at rho = {rc:g}: {ratio:.3g} (claim read as "
            f">= {p['claim']['min_ratio']:g}); at the smallest rho of the grid "
            f"({ks[0] / n:g}): {fedavg_cf[0] / opt_cf[0]:.3g}",
        ),
    }
    metrics = {
        "ratio_at_claim_rho": float(ratio),
        "ratio_at_smallest_rho": float(fedavg_cf[0] / opt_cf[0]),
        "smallest_rho": float(ks[0] / n),
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)
