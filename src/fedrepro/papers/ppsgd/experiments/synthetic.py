"""PPSGD Fig. 1a: synthetic personalized linear regression (Bietti et al. 2022 Sec. 6; docs/notes/ppsgd.md E1).

N users, d coordinates; theta_0 ~ N(0, theta0_std^2 I); user i's optimum theta_i* equals theta_0 except on the last
``n_personal`` coordinates, which get + N(0, personal_std^2); x ~ N(0, diag(1/k)); y = theta_i*^T x + N(0, tau^2).
Every round all N users (q = 1) draw m fresh samples and take one PPSGD-exp step
(:mod:`fedrepro.papers.ppsgd.ppsgd_exp`). The metric is the closed-form excess risk R = (1/N) sum_i ||w + theta_i -
theta_i*||^2_Sigma (the paper's formula; the official code plots R / d, recorded beside it), at the last iterate, at
every iteration.

One run trains the whole (step x alpha_c) grid at once (vectorized over the grid and the users, sharing one data
stream: common random numbers, each configuration with its own DP noise), once per sigma, and selects over the
step grid per ``select`` (the code's rule: min over steps at each iteration). Epsilon per iteration comes from
:func:`fedrepro.privacy.epsilon_curve` (``opacus_rdp``, as the official code, and any other accountants at every
``eps_every``-th iteration).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.memory import FLOAT64, MemoryNeed
from fedrepro.experiments.params import INT0, INT1, INT2, NONNEG, POSITIVE
from fedrepro.papers.ppsgd import ppsgd_exp
from fedrepro.papers.ppsgd.grid import ALPHA, GRID_PROPERTIES, alpha_label, sigma_label
from fedrepro.papers.ppsgd.stepsizes import parse_alpha, step_size_arrays
from fedrepro.privacy import ACCOUNTANTS, epsilon_curve

SELECT = ("min_over_steps_per_iteration", "min_over_steps_final")
CROSSING_RULES = ("first", "dominates_from")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "n_users",
        "d",
        "n_personal",
        "theta0_std",
        "personal_std",
        "noise_std",
        "m",
        "niter",
        "steps",
        "alphas",
        "sigmas",
        "clip",
        "delta",
        "accountants",
        "eps_every",
        "select",
        "crossing",
        "z",
        "dtype",
    ],
    "properties": {
        "n_users": INT2,
        "d": INT1,
        "n_personal": INT0,
        "theta0_std": POSITIVE,
        "personal_std": NONNEG,
        "noise_std": NONNEG,
        "m": INT1,
        "niter": INT1,
        **GRID_PROPERTIES,
        "accountants": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": list(ACCOUNTANTS)}},
        "eps_every": INT1,
        "select": {"enum": list(SELECT)},
        "crossing": {
            "type": "object",
            "additionalProperties": False,
            "required": ["sigmas", "window"],
            "properties": {
                "sigmas": {"type": "array", "items": NONNEG},
                # every judged sigma, or at least one, inside window
                "mode": {"enum": ["all", "any"], "default": "all"},
                # first: first iteration alpha = 0 is below every compared curve; dominates_from: the iteration
                # from which it stays below them through niter
                "rule": {"enum": list(CROSSING_RULES), "default": "first"},
                "window": {"type": "array", "minItems": 2, "maxItems": 2, "items": INT1},
            },
        },
        "z": POSITIVE,
        # the "initial iterations" at which global learning should be fastest (null: no such check)
        "early_iteration": {"anyOf": [INT1, {"type": "null"}], "default": None},
        # the curves the claims compare (null: every alpha of the run); Fig. 1a plots only some of them
        "compare_alphas": {"type": ["array", "null"], "minItems": 2, "items": ALPHA, "default": None},
        # "stops improving": alpha = inf's risk falls by less than max_drop over its last `window` iterations (null:
        # only its end compared)
        "stall": {
            "default": None,
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["window", "max_drop"],
            "properties": {
                "window": INT1,
                "max_drop": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            },
        },
    },
}


def draw_problem(p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(theta_0 (d,), theta* (N, d), lambda (d,)): the paper's data-generating parameters."""
    d, N = p["d"], p["n_users"]
    theta0 = p["theta0_std"] * rng.standard_normal(d)
    mask = np.zeros(d)
    mask[d - p["n_personal"] :] = 1.0
    theta_star = theta0[None, :] + p["personal_std"] * rng.standard_normal((N, d)) * mask
    lam = 1.0 / np.arange(1, d + 1)
    return theta0, theta_star, lam


def excess_risk(w: np.ndarray, theta: np.ndarray, theta_star: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """(G,) R = (1/N) sum_i ||w + theta_i - theta_i*||^2_Sigma for w (d, 1, G), theta (N, d, 1, G)."""
    u = theta[:, :, 0, :] + w[None, :, 0, :]
    u -= theta_star.astype(u.dtype, copy=False)[:, :, None]
    u *= u
    return lam @ u.sum(axis=0, dtype=np.float64) / theta_star.shape[0]


def init_risk_closed_form(theta_star: np.ndarray, lam: np.ndarray) -> float:
    """R(0, 0) = (1/N) sum_i sum_k theta*_ik^2 lambda_k."""
    return float((theta_star**2 @ lam).mean())


def expected_init_risk(theta0: np.ndarray, lam: np.ndarray, n_personal: int, personal_std: float) -> float:
    """E[R(0,0) | theta_0] = sum_k theta0_k^2 lambda_k + personal_std^2 sum_{last n_personal k} lambda_k."""
    return float(theta0**2 @ lam + personal_std**2 * lam[len(lam) - n_personal :].sum())


def global_floor(theta_star: np.ndarray, lam: np.ndarray) -> float:
    """min_w R(w, 0) = (1/N) sum_i ||theta_i* - mean theta*||^2_Sigma (the alpha = inf plateau, docs/notes/ppsgd.md
    §8.5)."""
    c = theta_star - theta_star.mean(axis=0)
    return float((c**2 @ lam).mean())


def train_grid(
    p: dict,
    sigma: float,
    theta_star: np.ndarray,
    lam: np.ndarray,
    eta_w: np.ndarray,
    eta_theta: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """(niter + 1, G) excess risk of every configuration at iterations 0..niter for one sigma."""
    N, d, m = theta_star.shape[0], p["d"], p["m"]
    dtype = np.dtype(p["dtype"])
    state = ppsgd_exp.State.zeros(N, d, 1, len(eta_w), dtype=dtype)
    users = np.arange(N)
    sd = np.sqrt(lam).astype(dtype)
    ts = theta_star.astype(dtype)
    out = np.empty((p["niter"] + 1, len(eta_w)))
    out[0] = excess_risk(state.w, state.theta, ts, lam)
    for t in range(1, p["niter"] + 1):
        X = rng.standard_normal((N, m, d), dtype=dtype) * sd
        Y = ((X @ ts[:, :, None])[..., 0] + p["noise_std"] * rng.standard_normal((N, m), dtype=dtype))[..., None]
        ppsgd_exp.round_step(state, users, X, Y, eta_w, eta_theta, sigma, p["clip"], rng)
        out[t] = excess_risk(state.w, state.theta, ts, lam)
    return out


def select_over_steps(risk: np.ndarray, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """risk (T+1, S) over S steps -> (best curve (T+1,), index of the chosen step per iteration (T+1,))."""
    finite = np.where(np.isfinite(risk), risk, np.inf)
    if rule == "min_over_steps_per_iteration":
        idx = finite.argmin(axis=1)
    else:
        idx = np.full(risk.shape[0], int(finite[-1].argmin()))
    return finite[np.arange(risk.shape[0]), idx], idx


def first_crossing(local: np.ndarray, others: np.ndarray) -> int | None:
    """First iteration t >= 1 where local[t] < every curve of others (A, T+1); None if never."""
    below = local[None, :] < others
    hit = np.flatnonzero(below.all(axis=0)[1:])
    return int(hit[0]) + 1 if hit.size else None


def dominates_from(local: np.ndarray, others: np.ndarray) -> int | None:
    """First iteration t >= 1 from which local is below every curve of others (A, T+1) at every later iteration
    ("dominates ... after t"); None if it is not below them at the last iteration."""
    below = (local[None, :] < others).all(axis=0)[1:]
    if not below[-1]:
        return None
    miss = np.flatnonzero(~below)
    return int(miss[-1]) + 2 if miss.size else 1


def _epsilons(p: dict, sigma: float) -> dict[str, np.ndarray]:
    """accountant -> epsilon (niter + 1,) at delta (0 at iteration 0; NaN where not computed; inf for sigma = 0)."""
    T = p["niter"]
    out = {}
    for acc in p["accountants"]:
        e = np.full(T + 1, np.nan)
        e[0] = 0.0
        counts = (
            list(range(1, T + 1))
            if acc == "opacus_rdp"
            else sorted(set(range(p["eps_every"], T + 1, p["eps_every"])) | {T})
        )
        if sigma == 0:
            e[counts] = np.inf
        else:
            for t, r in zip(counts, epsilon_curve(sigma, 1.0, counts, p["delta"], acc)):
                e[t] = r.epsilon
        out[acc] = e
    return out


def _grid_bytes(p: dict) -> float:
    """The grid's state: every user's local model and its gradient (N, d, G), a round's data X (N, m, d) and
    residuals (N, m, G) in ``dtype``, and the excess risk of every configuration at every iteration per sigma."""
    n, d, m, g = p["n_users"], p["d"], p["m"], len(p["steps"]) * len(p["alphas"])
    item = np.dtype(p["dtype"]).itemsize
    return item * n * (2 * d * g + m * d + m * g) + FLOAT64 * (p["niter"] + 1) * g * len(p["sigmas"])


@experiment_kind(
    "ppsgd_synthetic",
    SCHEMA,
    metrics=(
        "crossing_iteration.*",
        "final_epsilon.*",
        "final_excess_risk.*",
        "final_excess_risk_per_coord.*",
        "global_floor.*",
        "init_risk.*",
        "train_seconds.*",
    ),
    checks=(
        "global_fastest_early",
        "global_stops_improving_without_noise",
        "init_risk_matches_closed_form",
        "init_risk_matches_expectation",
        "local_overtakes_joint_at_large_noise",
    ),
    memory=MemoryNeed(("n_users", "d", "m", "steps", "alphas", "niter", "sigmas"), _grid_bytes),
    no_method_slot=(
        "Fig. 1a measures the excess risk of each user's linear regression parameters w + theta_i against the true "
        "theta_i* (every user every round, m fresh samples), which a classifier's deployed models have no counterpart "
        "for; its real-data protocols (ppsgd.fig1b_stackoverflow, fig1c_emnist, fig1d_emnist_cnn) take a method"
    ),
)
def ppsgd_synthetic(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    # single-threaded BLAS: the many small batched products gain nothing from threads, and 2 BLAS threads on 2
    # shared cores spin-wait (measured 15x slower under load)
    with threadpool_limits(limits=1, user_api="blas"):
        return _ppsgd_synthetic(p, rng, ctx)


def _ppsgd_synthetic(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    alphas = [parse_alpha(a) for a in p["alphas"]]
    compared = compared_alphas(p, alphas, ctx.exp_id)
    steps = [float(s) for s in p["steps"]]
    grid_s = [s for a in alphas for s in steps]
    grid_a = [a for a in alphas for s in steps]
    eta_w, eta_theta = step_size_arrays(grid_s, grid_a)
    theta0, theta_star, lam = draw_problem(p, rng)
    d, T = p["d"], p["niter"]
    rows, best, eps_at, timing = [], {}, {}, {}
    accountant = None
    for sigma in p["sigmas"]:
        t0 = time.perf_counter()
        risk = train_grid(p, sigma, theta_star, lam, eta_w, eta_theta, rng)
        timing[sigma_label(sigma)] = time.perf_counter() - t0
        eps = _epsilons(p, sigma)
        eps_at[sigma] = eps
        for j, a in enumerate(alphas):
            block = risk[:, j * len(steps) : (j + 1) * len(steps)]
            curve, idx = select_over_steps(block, p["select"])
            best[(sigma, a)] = curve
            local = a == 0
            frame = {
                "sigma": sigma,
                "alpha": a,
                "alpha_label": alpha_label(a),
                "iteration": np.arange(T + 1),
                "excess_risk": curve,
                "excess_risk_per_coord": curve / d,
                "step": np.asarray(steps)[idx],
            }
            for acc, e in eps.items():
                frame[f"epsilon_{acc}"] = np.zeros(T + 1) if local else e
            rows.append(pd.DataFrame(frame))
    if p["sigmas"] and any(s > 0 for s in p["sigmas"]):
        s_pos = next(s for s in p["sigmas"] if s > 0)
        accountant = epsilon_curve(s_pos, 1.0, [1], p["delta"], "opacus_rdp")[0].to_dict()

    # ---- checks
    r0 = init_risk_closed_form(theta_star, lam)
    floor = global_floor(theta_star, lam)
    per_user0 = theta_star**2 @ lam
    measured0 = {k: float(v[0]) for k, v in best.items()}
    worst0 = max(abs(v - r0) for v in measured0.values())
    tol0 = 100 * float(np.finfo(np.dtype(p["dtype"])).eps) * r0  # rounding of the training dtype
    cond = expected_init_risk(theta0, lam, p["n_personal"], p["personal_std"])
    se = float(per_user0.std(ddof=1) / math.sqrt(len(per_user0)))
    tol_cond = p["z"] * se + 1e-9 * cond
    checks = {
        "init_risk_matches_closed_form": Check(
            worst0 <= tol0,
            f"excess risk at w = theta = 0, every (sigma, alpha) curve, vs (1/N) sum_i "
            f"||theta_i*||^2_Sigma = {r0:.6g}: max abs diff {worst0:.3g} ({p['dtype']})",
            max(measured0.values()),
            r0,
            tol0,
        ),
        "init_risk_matches_expectation": Check(
            abs(r0 - cond) <= tol_cond,
            f"R(0,0) = {r0:.6g} vs E[R(0,0) | theta_0] = sum_k theta0_k^2/k + "
            f"s^2 sum_(personal k) 1/k = {cond:.6g} within {p['z']} SE ({tol_cond:.3g}) of the personal draws",
            r0,
            cond,
            tol_cond,
        ),
    }
    window = p["crossing"]["window"]
    rule = p["crossing"]["rule"]
    crossings = {}
    if 0.0 in compared and any(a > 0 for a in compared):
        for s in p["sigmas"]:
            others = np.stack([best[(s, a)] for a in compared if a > 0])
            crossings[s] = (first_crossing if rule == "first" else dominates_from)(best[(s, 0.0)], others)
    judged = {s: crossings[s] for s in p["crossing"]["sigmas"] if s in crossings}
    if judged:
        inside = [c is not None and window[0] <= c <= window[1] for c in judged.values()]
        mode_any = p["crossing"]["mode"] == "any"
        ok = any(inside) if mode_any else all(inside)
        # distance to the window in half-widths (<= 1 inside), a crossing never reached read as T + 1: the judged
        # sigma nearest the window (mode any) or farthest from it (all)
        centre, half = (window[0] + window[1]) / 2, max((window[1] - window[0]) / 2, 0.5)
        at = [float(c) if c is not None else float(T + 1) for c in judged.values()]
        nearest = (min if mode_any else max)(at, key=lambda c: abs(c - centre))
        checks["local_overtakes_joint_at_large_noise"] = Check(
            ok,
            ("first iteration where" if rule == "first" else "iteration from which (through the end)")
            + f" alpha_c = 0 has lower excess risk than every compared alpha_c > 0 curve "
            f"({', '.join(alpha_label(a) for a in compared if a > 0)}; best over steps), need within "
            f"[{window[0]}, {window[1]}] (paper: 'after about 200 iterations'): "
            + "; ".join(f"sigma={s:g}: {c if c is not None else 'never'}" for s, c in judged.items()),
            nearest,
            centre,
            half,
        )
    else:
        checks["local_overtakes_joint_at_large_noise"] = Check(
            False, "no crossing computed: needs alpha_c = 0 and some alpha_c > 0 and crossing.sigmas within sigmas"
        )

    if p["early_iteration"] is not None and math.inf in compared and len(compared) > 1:
        checks["global_fastest_early"] = global_fastest_early(best, compared, p["sigmas"], min(p["early_iteration"], T))
    if 0.0 in p["sigmas"] and math.inf in compared and any(0 < a < math.inf for a in compared):
        checks["global_stops_improving_without_noise"] = global_stops_improving(best, compared, floor, p["stall"])

    # ---- metrics
    metrics: dict = {
        "init_risk": {
            "measured": measured0[next(iter(measured0))],
            "closed_form": r0,
            "expected_given_theta0": cond,
            "per_coord": r0 / d,
        },
        "global_floor": {"closed_form": floor, "per_coord": floor / d},
        "crossing_iteration": {
            f"s{sigma_label(s)}": (float(c) if c is not None else None) for s, c in crossings.items()
        },
        "final_excess_risk": {
            f"s{sigma_label(s)}": {alpha_label(a): float(best[(s, a)][-1]) for a in alphas} for s in p["sigmas"]
        },
        "final_excess_risk_per_coord": {
            f"s{sigma_label(s)}": {alpha_label(a): float(best[(s, a)][-1] / d) for a in alphas} for s in p["sigmas"]
        },
        "final_epsilon": {
            f"s{sigma_label(s)}": {acc: float(e[-1]) for acc, e in eps_at[s].items()} for s in p["sigmas"]
        },
        "train_seconds": timing,
    }
    # a crossing that happens in some seeds only is a result (None: alpha = 0 never crosses within niter)
    return RunOutput(
        metrics=metrics,
        history=pd.concat(rows, ignore_index=True),
        checks=checks,
        accountant=accountant,
        undefined_ok=("crossing_iteration.*",),
    )


def compared_alphas(p: dict, alphas: list[float], exp_id: str = "ppsgd_synthetic") -> list[float]:
    """The alphas the claim checks compare: ``compare_alphas`` (each must be in ``alphas``) or every alpha of the
    run."""
    if p["compare_alphas"] is None:
        return alphas
    chosen = [parse_alpha(a) for a in p["compare_alphas"]]
    missing = [alpha_label(a) for a in chosen if a not in alphas]
    if missing:
        raise ConfigError(
            f"{exp_id}: params.compare_alphas {missing} are not in params.alphas "
            f"{[alpha_label(a) for a in alphas]}: add them to alphas or drop them from compare_alphas"
        )
    return chosen


def global_fastest_early(best: dict, alphas: list[float], sigmas: list[float], t: int) -> Check:
    """Sec. 6 on Fig. 1a: "global learning (alpha = inf) enjoys faster convergence at initial iterations in all
    cases": at iteration t, in every sigma panel, the alpha = inf curve (best step) is at or below every other."""
    parts, ok = [], True
    for s in sigmas:
        g = best[(s, math.inf)][t]
        rival = min((a for a in alphas if a != math.inf), key=lambda a: best[(s, a)][t])
        ok &= bool(g <= best[(s, rival)][t])
        parts.append(f"sigma={s:g}: inf {g:.4g} vs best other (alpha Q {alpha_label(rival)}) {best[(s, rival)][t]:.4g}")
    return Check(ok, f"iteration {t}: alpha = inf lowest excess risk in every panel: " + "; ".join(parts))


def global_stops_improving(best: dict, alphas: list[float], floor: float, stall: dict | None = None) -> Check:
    """Sec. 6 on Fig. 1a: global learning "eventually stops improving, even without privacy noise, since minimizing
    risk requires personalization" and "small choices of alpha lead to better performance in later iterations": at
    sigma = 0 some 0 < alpha < inf ends below alpha = inf, and, with ``stall`` = {window, max_drop}, alpha = inf's
    risk fell by less than max_drop over its last ``window`` iterations (without ``stall`` only the first part is
    judged). The detail gives alpha = inf's distance to its plateau, the closed-form global floor min_w R(w, 0)."""
    g = best[(0.0, math.inf)]
    finite = {a: best[(0.0, a)][-1] for a in alphas if 0 < a < math.inf}
    a_best = min(finite, key=finite.get)
    last = min(stall["window"], len(g) - 1) if stall else max(1, len(g) // 10)
    drop = 1.0 - g[-1] / g[-1 - last] if g[-1 - last] > 0 else 0.0
    ok = bool(finite[a_best] < g[-1]) and (stall is None or drop < stall["max_drop"])
    need = f" (need < {100 * stall['max_drop']:.0f}%)" if stall else ""
    detail = (
        f"sigma = 0, final excess risk: alpha = inf {g[-1]:.4g} (global floor {floor:.3g}, {100 * drop:.1f}% "
        f"lower than {last} iterations before{need}) vs best finite alpha Q {alpha_label(a_best)} "
        f"{finite[a_best]:.4g}"
    )
    if stall:  # distance: alpha = inf's last drop over the allowed one (a failed comparison of the ends adds >= 1)
        return Check(ok, detail, float(max(drop, 0.0)), 0.0, float(stall["max_drop"]))
    return Check(ok, detail, float(finite[a_best]), float(g[-1]))
