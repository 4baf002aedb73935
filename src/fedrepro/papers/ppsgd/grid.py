"""The (step, alpha) grid every PPSGD experiment sweeps, and what the real-data runs share (Figs. 1b-1d, 2).

``GRID_PROPERTIES`` is the grid's schema fragment; :func:`run_grid` trains every configuration once per sigma with
a model-specific training function (the linear model, :mod:`fedrepro.papers.ppsgd.experiments.linear`, or Fig. 1d's
CNN, :mod:`fedrepro.papers.ppsgd.experiments.cnn`), selects the best step as the official code does, attaches
epsilon per iteration and evaluates the configured checks.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedrepro.experiments import Check, RunOutput
from fedrepro.experiments.params import DELTA, INF, NONNEG, POSITIVE, POSITIVE_LIST
from fedrepro.papers.ppsgd.clients import Clients
from fedrepro.papers.ppsgd.stepsizes import parse_alpha, step_size_arrays
from fedrepro.privacy import epsilon_curve

ALPHA = {"anyOf": [NONNEG, INF, {"const": -1}, {"enum": ["inf", ".inf"]}]}
# the App. A grid and the DP parameters, shared by the synthetic and the real-data kinds
GRID_PROPERTIES = {
    "steps": POSITIVE_LIST,
    "alphas": {"type": "array", "minItems": 1, "items": ALPHA},
    "sigmas": {"type": "array", "minItems": 1, "uniqueItems": True, "items": NONNEG},
    "clip": POSITIVE,
    "delta": DELTA,
    "dtype": {"enum": ["float32", "float64"]},
}


def alpha_label(a: float | str) -> str:
    """An alpha_c's label (``inf`` for global learning); a method's name (``method`` mode) is its own label."""
    if isinstance(a, str):
        return a
    return "inf" if math.isinf(a) else f"{a:g}"


def sigma_label(s: float) -> str:
    return f"{s:g}".replace(".", "p")


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Upper-left frontier in (epsilon, accuracy): points not dominated (smaller-or-equal eps and higher acc)."""
    out, best = [], -math.inf
    for e, a in sorted(points, key=lambda z: (z[0], -z[1])):
        if a > best:
            out.append((e, a))
            best = a
    return out


def run_grid(cl: Clients, p: dict, rng: np.random.Generator, train_fn) -> RunOutput:
    """Train every (step, alpha) configuration once per sigma with ``train_fn(cl, p, sigma, eta_w, eta_theta, seed)
    -> (eval iterations, accuracy (E, G), rounds)``, select the best step per evaluation point / at the end (the
    code's rule), attach epsilon per iteration, and evaluate the configured checks. Shared by the linear model and
    the CNN of Fig. 1d. With ``p["method"]`` (a method from outside, :mod:`fedrepro.papers.ppsgd.method`) its one
    row replaces the alphas: configurations are the steps (its lr, global learning's eta_w), selected the same way."""
    N, K = cl.n_users, cl.y_train.shape[1]
    q = min(1.0, p["users_per_round"] / N)
    steps = [float(s) for s in p["steps"]]
    if p.get("method"):
        alphas: list = [p["method"]["name"]]
        eta_w, eta_theta = np.array(steps), np.zeros(len(steps))
    else:
        alphas = [parse_alpha(a) for a in p["alphas"]]
        eta_w, eta_theta = step_size_arrays([s for a in alphas for s in steps], [a for a in alphas for s in steps])
    seed = int(rng.integers(2**31))
    rows, final = [], {}
    for sigma in p["sigmas"]:
        its, acc, rounds = train_fn(cl, p, sigma, eta_w, eta_theta, seed)
        counts = [int(t) for t in its if t > 0]
        eps = np.zeros(len(its))
        if counts:
            if sigma == 0:
                eps[its > 0] = np.inf
            else:
                eps[its > 0] = [r.epsilon for r in epsilon_curve(sigma, q, counts, p["delta"], "opacus_rdp")]
        for j, a in enumerate(alphas):
            block = acc[:, j * len(steps) : (j + 1) * len(steps)]
            for k, s in enumerate(steps):
                rows.append(
                    pd.DataFrame(
                        {
                            "sigma": sigma,
                            "alpha": math.nan if isinstance(a, str) else a,
                            "alpha_label": alpha_label(a),
                            "step": s,
                            "iteration": its,
                            "accuracy": block[:, k],
                            "epsilon": np.zeros(len(its)) if a == 0 else eps,
                        }
                    )
                )
            k_best = int(np.nanargmax(block[-1])) if np.isfinite(block[-1]).any() else 0
            final[(sigma, a)] = (float(block[-1, k_best]), steps[k_best], 0.0 if a == 0 else float(eps[-1]))
    history = pd.concat(rows, ignore_index=True)

    metrics: dict = {
        "final_accuracy": {
            f"s{sigma_label(s)}": {alpha_label(a): final[(s, a)][0] for a in alphas} for s in p["sigmas"]
        },
        "final_step": {f"s{sigma_label(s)}": {alpha_label(a): final[(s, a)][1] for a in alphas} for s in p["sigmas"]},
        "final_epsilon": {f"s{sigma_label(s)}": float(max(final[(s, a)][2] for a in alphas)) for s in p["sigmas"]},
        # per row: what its last release spent (opacus RDP at q = Q/N over the rounds; alpha Q = 0 releases nothing,
        # sigma = 0 releases without noise: inf)
        "epsilon": {f"s{sigma_label(s)}": {alpha_label(a): final[(s, a)][2] for a in alphas} for s in p["sigmas"]},
        "n_users": N,
        "n_classes": K,
        "sampling_rate": q,
    }
    checks = {}
    want = {} if p.get("method") else p["checks"]  # the claims read PPSGD's alphas, not a method from outside
    if "best_alpha_without_privacy" in want and 0 in p["sigmas"]:
        target = parse_alpha(want["best_alpha_without_privacy"])
        accs0 = {a: final[(0, a)][0] for a in alphas}
        best = max(accs0, key=accs0.get)
        metrics["best_alpha_without_privacy"] = best
        checks["best_alpha_without_privacy"] = Check(
            best == target,
            f"sigma = 0: best final accuracy (best step) at alpha Q = {alpha_label(best)}, paper: "
            f"{alpha_label(target)}; " + ", ".join(f"{alpha_label(a)}: {v:.4f}" for a, v in accs0.items()),
        )
    if want.get("personalized_dominates"):
        mid = [a for a in alphas if 0 < a < math.inf]
        parts, ok, strict = [], bool(mid) and 0 in alphas and math.inf in alphas, False
        for s in (s for s in p["sigmas"] if s > 0):
            if not ok:
                break
            best_mid = max(final[(s, a)][0] for a in mid)
            local, glob = final[(s, 0.0)][0], final[(s, math.inf)][0]
            ok &= max(best_mid, local) >= glob  # the frontier includes the local point ([code] epsmin)
            strict |= best_mid > max(local, glob)
            parts.append(f"sigma={s:g}: best intermediate {best_mid:.4f}, local {local:.4f}, global {glob:.4f}")
        checks["personalized_dominates"] = Check(
            bool(ok and strict),
            "Fig. 2: best personalized (max of the best 0 < alpha Q < inf and local-only, best "
            "step) >= global-only at every sigma > 0, and an intermediate alpha Q beats both at some sigma: "
            + "; ".join(parts),
        )
    if want.get("beats_chance"):
        chance = 1.0 / K
        worst = min((v for (s, a), (v, _, _) in final.items() if s == 0), default=-1.0)  # -1: no sigma = 0 run
        checks["beats_chance"] = Check(
            worst > chance,
            f"every alpha at sigma = 0 beats chance {chance:.3f}: worst final accuracy {worst:.4f}",
            worst,
            chance,
        )
    for s in p["sigmas"]:
        pts = [(final[(s, a)][2], final[(s, a)][0]) for a in alphas if a != 0]
        metrics.setdefault("pareto_size", {})[f"s{sigma_label(s)}"] = len(pareto(pts))
    acc_info = epsilon_curve(next((s for s in p["sigmas"] if s > 0), 1.0), q, [1], p["delta"], "opacus_rdp")[0]
    return RunOutput(metrics=metrics, history=history, checks=checks, accountant=acc_info.to_dict())
