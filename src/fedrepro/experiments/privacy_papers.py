"""The papers' own privacy statements as experiments: AdaPeD Thm 5 + Lemma 1 (Table 2's noise), the histograms
paper's Thm 3.1 composition (per-step budget for eps' = 15), PPSGD's Thms 4.1 / 5.1 noise scales.

All deterministic closed forms (plus library accounting for AdaPeD's mechanism); the rng is unused.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import DELTA, INT1, POSITIVE, POSITIVE_LIST
from fedrepro.privacy import ACCOUNTANTS
from fedrepro.privacy.papers import adaped, histograms, ppsgd

ROUND_TRIP_RTOL = 1e-9


def eps_key(eps: float) -> str:
    """Metric key of a target epsilon: 3.35 -> eps_3p35, 27.3 -> eps_27p30."""
    return "eps_" + f"{eps:.2f}".replace(".", "p")


ADAPED_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["K", "m", "T_over_tau", "delta", "targets"],
    "properties": {"K": INT1, "m": INT1, "T_over_tau": INT1, "delta": DELTA, "targets": POSITIVE_LIST,
                   "tau": INT1, "accountant": {"enum": list(ACCOUNTANTS)}},
}


@experiment_kind("adaped_thm5", ADAPED_SCHEMA, deterministic=True, stage="privacy")
def adaped_thm5(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Noise ratio z for each printed epsilon by Thm 5 + Lemma 1 (equal z for mu and psi), and the library epsilon
    of the same mechanism at that z (paper's sensitivity; triangle-inequality sensitivity when tau is given)."""
    K, m, rounds, delta = p["K"], p["m"], p["T_over_tau"], p["delta"]
    acc = p.get("accountant", "rdp")
    metrics = {k: {} for k in ("z", "slope", "order", "epsilon_library", "ratio", "z_library")}
    if "tau" in p:
        metrics.update(epsilon_library_triangle={}, ratio_triangle={})
    rows, round_trip, conservative, first = [], [], [], None
    for target in p["targets"]:
        key = eps_key(target)
        z = adaped.thm5_noise_ratio(target, K, m, rounds, delta)
        eps_back, lam = adaped.thm5_epsilon(z, K, m, rounds, delta)
        lib = adaped.library_epsilon(z, K, m, rounds, delta, accountant=acc)
        first = first or lib
        row = {"target_epsilon": target, "z": z, "slope": adaped.thm5_slope(K, m, rounds, z), "lambda": lam,
               "epsilon_thm5": eps_back, "epsilon_library": lib.epsilon, "library_order": lib.optimal_order}
        metrics["z"][key], metrics["slope"][key], metrics["order"][key] = z, row["slope"], lam
        metrics["epsilon_library"][key], metrics["ratio"][key] = lib.epsilon, target / lib.epsilon
        # the noise the library would need for the same epsilon (configured by epsilon; the solved sigma recorded)
        z_lib, _ = adaped.library_noise_ratio(target, K, m, rounds, delta, accountant=acc)
        metrics["z_library"][key] = row["z_library"] = z_lib
        round_trip.append(abs(eps_back - target) / target)
        conservative.append(target >= lib.epsilon)
        if "tau" in p:
            tri = adaped.library_epsilon(z, K, m, rounds, delta, tau=p["tau"], sensitivity="triangle", accountant=acc)
            row["epsilon_library_triangle"] = tri.epsilon
            metrics["epsilon_library_triangle"][key] = tri.epsilon
            metrics["ratio_triangle"][key] = target / tri.epsilon
            conservative.append(target >= tri.epsilon)
        rows.append(row)
    checks = {
        "thm5_lemma1_round_trip": Check(max(round_trip) <= ROUND_TRIP_RTOL,
                                        f"Thm 5 + Lemma 1 at the solved z gives back each target (max rel. error "
                                        f"{max(round_trip):.2g})", max(round_trip), 0.0, ROUND_TRIP_RTOL),
        "thm5_not_below_library": Check(all(conservative),
                                        f"printed epsilon >= {acc} epsilon of the same mechanism for every target "
                                        f"and sensitivity reading ({sum(conservative)}/{len(conservative)})"),
    }
    accountant = {"name": "closed form: Ozkara et al. Thm 5 + Lemma 1 (real lambda > 1), beside "
                          f"{first.accountant} ({first.library})",
                  "version": f"paper; {first.library} {first.library_version}", "library": first.to_dict()}
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks, accountant=accountant)


LDP_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["eps0", "delta"],
    "properties": {"eps0": POSITIVE_LIST, "delta": DELTA,
                   "accountants": {"type": "array", "minItems": 1, "uniqueItems": True,
                                   "items": {"enum": list(ACCOUNTANTS)}}},
}


@experiment_kind("adaped_ldp", LDP_SCHEMA, deterministic=True, stage="privacy")
def adaped_ldp(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Sec. 2.1's Gaussian LDP mechanism (Thm 2.2's sigma_q for each eps0) beside the epsilon the library accountants
    certify for the same noise at the same delta."""
    accs = p.get("accountants", ["pld", "rdp"])
    metrics = {f"epsilon_{a}": {} for a in accs} | {f"ratio_{a}": {} for a in accs}
    rows, valid, first = [], [], None
    for e0 in p["eps0"]:
        key = eps_key(e0)
        tightest = math.inf
        for a in accs:
            lib = adaped.ldp_library_epsilon(e0, p["delta"], accountant=a)
            first = first or lib
            tightest = min(tightest, lib.epsilon)
            metrics[f"epsilon_{a}"][key], metrics[f"ratio_{a}"][key] = lib.epsilon, e0 / lib.epsilon
            rows.append({"eps0": e0, "accountant": a, "noise_multiplier": lib.noise_multiplier,
                         "epsilon_library": lib.epsilon})
        valid.append(tightest <= e0)
    # Every accountant is an upper bound; the mechanism is (eps, delta)-DP for the smallest of them. (RDP over the
    # default orders has a floor, ~0.11 at delta = 1e-5, above the smallest eps0.)
    checks = {"thm22_is_valid": Check(all(valid), f"smallest library epsilon <= eps0 for every eps0 "
                                                  f"({sum(valid)}/{len(valid)}): Thm 2.2's sigma_q is sufficient")}
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks,
                     accountant={"name": "closed form: Ozkara et al. Thm 2.2 (sigma_q), beside "
                                         f"{', '.join(accs)}", "version": f"paper; {first.library} "
                                                                           f"{first.library_version}",
                                 "library": first.to_dict()})


HIST_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["total_epsilon", "delta", "T"],
    "properties": {"total_epsilon": POSITIVE, "delta": DELTA, "T": INT1,
                   "readings": {"type": "array", "minItems": 1, "uniqueItems": True,
                                "items": {"enum": list(histograms.READINGS)}}},
}


@experiment_kind("histograms_thm31", HIST_SCHEMA, deterministic=True, stage="privacy")
def histograms_thm31(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Alg. 3's per-step epsilon and sigma for a total (eps', delta') over T iterations, under each delta reading."""
    budgets = [histograms.per_step_budget(p["total_epsilon"], p["delta"], p["T"], r)
               for r in p.get("readings", histograms.READINGS)]
    fields = ("per_step_epsilon", "per_iteration_epsilon", "per_step_delta", "sigma", "total_epsilon", "total_delta")
    metrics = {f: {b.reading: getattr(b, f) for b in budgets} for f in fields}
    err = max(abs(b.total_epsilon - p["total_epsilon"]) / p["total_epsilon"] for b in budgets)
    checks = {
        "composition_round_trip": Check(err <= ROUND_TRIP_RTOL,
                                        f"composing the solved per-step epsilon over T={p['T']} gives back "
                                        f"{p['total_epsilon']} (max rel. error {err:.2g})", err, 0.0, ROUND_TRIP_RTOL),
        "per_step_epsilon_below_one": Check(all(b.per_step_epsilon < 1 for b in budgets),
                                            "Theorem 3.1 and the classical Gaussian mechanism need eps < 1"),
    }
    return RunOutput(metrics=metrics, history=pd.DataFrame([b.to_dict() for b in budgets]), checks=checks,
                     accountant={"name": "closed form: Setlur et al. Thm 3.1 + advanced composition (eq. 4), "
                                         "classical Gaussian mechanism sigma = sqrt(2 ln(1.25/delta))/eps",
                                 "version": "paper"})


PPSGD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["epsilons", "delta", "n", "N", "T", "M", "q", "clip"],
    "properties": {"epsilons": POSITIVE_LIST, "delta": DELTA, "n": INT1, "N": INT1, "T": INT1, "M": POSITIVE,
                   "q": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "clip": POSITIVE,
                   "c": POSITIVE, "c1": POSITIVE, "c2": POSITIVE},
}


@experiment_kind("ppsgd_theorems", PPSGD_SCHEMA, deterministic=True, stage="privacy")
def ppsgd_theorems(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Thm 4.1 / 5.1 sufficient noise std sigma_zeta per epsilon, with the unspecified constants c, c1, c2 (default
    1): orders of magnitude only, not comparable with any printed number."""
    c, c1, c2 = p.get("c", 1.0), p.get("c1", 1.0), p.get("c2", 1.0)
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
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows),
                     accountant={"name": f"closed form: Bietti et al. Thms 4.1/5.1 with c={c:g}, c1={c1:g}, "
                                         f"c2={c2:g} (unspecified in the paper)", "version": "paper"})
