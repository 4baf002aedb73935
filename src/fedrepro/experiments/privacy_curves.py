"""Epsilon vs rounds of the (subsampled) Gaussian mechanism under several accountants (FedHDP Table 7's epsilons,
PPSGD's per-iteration epsilon curves, any DP-FedAvg setting).

Deterministic: the rng is unused. Checks:
- rdp_agrees_with_opacus: dp-accounting's and opacus' RDP accountants implement the same RDP of the sampled
  Gaussian and the same conversion; they agree to ~1e-12 at integer orders. At fractional orders dp-accounting
  0.6.0 drops the signs of binom(alpha, i) (i > alpha), overestimating RDP there, so the epsilons can differ when
  the optimum is a fractional order. Measured (q in [0.01, 0.1], sigma in [0.8, 4], T <= 1000): relative gap
  <= 1e-4 in the FedHDP settings, <= 8.6e-4 when the optimal order is >= 3, <= 8.3e-3 whenever epsilon <= 25,
  up to 8% near epsilon = 40. ``agreement_rtol`` (default 1e-2) bounds it; a larger gap flags a regime where the
  libraries disagree (dp-accounting's epsilon is then the larger, conservative one).
- pld_not_above_rdp: the PLD accountant is tighter than RDP; its pessimistic discretisation can raise epsilon by
  at most (rounds x pld_discretization) (each step's privacy loss rounded up by at most one grid step), which is
  the slack allowed.
- classic_not_below_rdp: the classic conversion is never tighter than the improved one (conversion.py).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.params import INT1, POSITIVE
from fedrepro.privacy import (
    ACCOUNTANTS,
    DEFAULT_ORDERS,
    DEFAULT_PLD_DISCRETIZATION,
    EXTENDED_ORDERS,
    INTEGER_ORDERS,
    epsilon_curve,
)
from fedrepro.privacy.result import library_columns

ORDER_GRIDS = {"default": DEFAULT_ORDERS, "extended": EXTENDED_ORDERS, "integer": INTEGER_ORDERS}
DEFAULT_AGREEMENT_RTOL = 1e-2

CURVE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["noise_multiplier", "sampling_rate", "rounds", "delta", "accountants", "curve_points"],
    "properties": {
        "noise_multiplier": POSITIVE,
        "sampling_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "rounds": INT1,
        "delta": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "accountants": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": list(ACCOUNTANTS)}},
        "curve_points": INT1,
        # the accountant of the headline epsilon; null: rdp when listed, else the first of accountants
        "primary": {"enum": [*ACCOUNTANTS, None], "default": None},
        "orders": {
            "oneOf": [
                {"enum": list(ORDER_GRIDS)},
                {"type": "array", "minItems": 1, "items": {"type": "number", "exclusiveMinimum": 1}},
            ],
            "default": "default",
        },
        "pld_discretization": {**POSITIVE, "default": DEFAULT_PLD_DISCRETIZATION},
        "agreement_rtol": {**POSITIVE, "default": DEFAULT_AGREEMENT_RTOL},
        "sampling": {"enum": ["poisson", "without_replacement"], "default": "poisson"},
        # clients to draw from without replacement (null: none, Poisson sampling)
        "population": {"anyOf": [INT1, {"type": "null"}], "default": None},
    },
}

_HAS_ORDER = ("rdp", "rdp_classic", "opacus_rdp")


def curve_rounds(rounds: int, points: int) -> list[int]:
    """`points` round counts spread evenly over 1..rounds, always ending at `rounds`."""
    return sorted({max(1, math.ceil(k * rounds / points)) for k in range(1, min(points, rounds) + 1)})


def _agreement(curves, rtol) -> Check:
    pairs = [(r.epsilon, o.epsilon) for r, o in zip(curves["rdp"], curves["opacus_rdp"])]
    gaps = [abs(a - b) / b if b > 0 else (0.0 if a == b else math.inf) for a, b in pairs]
    worst = max(gaps)
    return Check(
        worst <= rtol,
        f"max relative |rdp - opacus_rdp| / opacus_rdp over {len(gaps)} curve points = "
        f"{worst:.3g} (tolerance {rtol:g}; same RDP formulas, dp-accounting overestimates "
        f"fractional orders)",
        worst,
        0.0,
        rtol,
    )


def _pld_check(curves, disc) -> Check:
    excess = [(p.epsilon - r.epsilon, p.steps * disc) for p, r in zip(curves["pld"], curves["rdp"])]
    ok = all(e <= s for e, s in excess)
    worst = max(e - s for e, s in excess)
    return Check(
        ok,
        f"pld - rdp at every curve point <= rounds x pld_discretization (worst margin {worst:.3g})",
        max(e for e, _ in excess),
        0.0,
        excess[-1][1],
    )


def _classic_check(curves) -> Check:
    diffs = [c.epsilon - r.epsilon for c, r in zip(curves["rdp_classic"], curves["rdp"])]
    return Check(
        all(d >= 0 for d in diffs),
        f"rdp_classic - rdp >= 0 at every curve point (min {min(diffs):.3g})",
        min(diffs),
        0.0,
        0.0,
    )


def _accounting(p: dict, exp_id: str) -> tuple[list[str], str, dict]:
    """(accountants, primary accountant, keyword arguments of epsilon_curve) from a kind's params."""
    accs = list(p["accountants"])
    primary = p["primary"] or ("rdp" if "rdp" in accs else accs[0])
    if primary not in accs:
        raise ConfigError(f"{exp_id}: params.primary={primary!r} must be one of params.accountants {accs}")
    orders = p["orders"]
    orders = ORDER_GRIDS[orders] if isinstance(orders, str) else tuple(orders)
    kw = dict(
        orders=orders,
        sampling=p["sampling"],
        population=p["population"],
        pld_discretization=p["pld_discretization"],
    )
    return accs, primary, kw


def _provenance(last: dict) -> dict:
    """The primary accountant's provenance at the top level; every accountant's (library, version, conversion,
    orders or discretisation) under "all". ``last``: accountant -> its final EpsilonResult (primary first)."""
    first = next(iter(last.values()))
    return dict(first.to_dict(), all={a: r.to_dict() for a, r in last.items()})


# ------------------------------------------------------------------------------- what the privacy stage shows


def curve_rows(exp, run: dict, hist: pd.DataFrame) -> list[dict]:
    """epsilon.csv rows: the epsilon of every accountant (and noise multiplier) at the curve's last round."""
    p, allacc = exp.params, run["accountant"]["all"]
    last = hist[hist["round"] == hist["round"].max()]
    sigmas = p.get("noise_multipliers", [p.get("noise_multiplier")])
    rows = []
    for _, h in last.iterrows():
        sigma = h["noise_multiplier"] if "noise_multiplier" in h else sigmas[0]
        acc = allacc[h["accountant"]]
        rows.append(
            dict(
                setting=f"q={p['sampling_rate']:g}, sigma={sigma:g}",
                accountant=h["accountant"],
                **library_columns(acc),
                noise_multiplier=sigma,
                sampling_rate=p["sampling_rate"],
                rounds=int(h["round"]),
                delta=p["delta"],
                epsilon=h["epsilon"],
                optimal_order=h["optimal_order"],
                note=acc.get("conversion", ""),
            )
        )
    return rows


_GRID_KEY = re.compile(r"^epsilon\.(\w+)\.s([0-9p]+)_t(\d+)$")


def target_markers(targets: list[tuple[str, float, bool]], rounds: int | None) -> list[tuple[int, float, bool]]:
    """(round, value, printed) of the registry's (key, value, printed) epsilon targets on a curve: a grid key
    (epsilon.<acc>.s<sigma>_t<T>) at round T, any other epsilon key at ``rounds`` (None: not on the curve)."""
    out = []
    for key, value, printed in targets:
        m = _GRID_KEY.match(key)
        x = int(m.group(3)) if m else rounds
        if x is not None:
            out.append((x, value, printed))
    return out


def _draw_targets(ax, targets: list[tuple[str, float, bool]], rounds: int | None) -> None:
    """The targets as markers: printed numbers filled, extra references hollow."""
    for x, value, printed in target_markers(targets, rounds):
        ax.plot([x], [value], "o", ms=5, mfc="k" if printed else "none", mec="k")


def curve_panel(ax, exp, run: dict, hist: pd.DataFrame, targets: list[tuple[str, float, bool]]) -> None:
    """One panel of the privacy figure: epsilon vs rounds per accountant."""
    p = exp.params
    for acc, h in hist.groupby("accountant", sort=False):
        ax.plot(h["round"], h["epsilon"], label=acc, ls="--" if acc == "rdp_classic" else "-")
    ax.set_title(f"{exp.name}: q={p['sampling_rate']:g}, sigma={p['noise_multiplier']:g}", fontsize=8)
    _draw_targets(ax, targets, p["rounds"])


def grid_panel(ax, exp, run: dict, hist: pd.DataFrame, targets: list[tuple[str, float, bool]]) -> None:
    """One panel of the privacy figure: epsilon vs rounds per noise multiplier, under the primary accountant."""
    p, primary = exp.params, run["accountant"]["accountant"]
    for sigma, h in hist[hist["accountant"] == primary].groupby("noise_multiplier"):
        ax.plot(h["round"], h["epsilon"], label=f"sigma={sigma:g}")
    ax.set_title(f"{exp.name}: q={p['sampling_rate']:g} ({primary})", fontsize=8)
    _draw_targets(ax, targets, None)


@experiment_kind(
    "privacy_curve",
    CURVE_SCHEMA,
    deterministic=True,
    stage="privacy",
    metrics=("epsilon.*", "order.*", "rel_gap_rdp_opacus"),
    checks=("classic_not_below_rdp", "pld_not_above_rdp", "rdp_agrees_with_opacus"),
    epsilon_rows=curve_rows,
    epsilon_panel=curve_panel,
)
def privacy_curve(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    accs, primary, kw = _accounting(p, ctx.exp_id)
    disc = kw["pld_discretization"]
    steps = curve_rounds(p["rounds"], p["curve_points"])
    curves = {a: epsilon_curve(p["noise_multiplier"], p["sampling_rate"], steps, p["delta"], a, **kw) for a in accs}
    rows = [
        {
            "round": r.steps,
            "accountant": a,
            "epsilon": r.epsilon,
            "optimal_order": r.optimal_order if r.optimal_order is not None else math.nan,
        }
        for a in accs
        for r in curves[a]
    ]
    metrics = {"epsilon": {a: curves[a][-1].epsilon for a in accs}}
    order = {a: curves[a][-1].optimal_order for a in accs if a in _HAS_ORDER}
    if order:
        metrics["order"] = order
    checks = {}
    if "rdp" in curves and "opacus_rdp" in curves:
        checks["rdp_agrees_with_opacus"] = _agreement(curves, p["agreement_rtol"])
        metrics["rel_gap_rdp_opacus"] = checks["rdp_agrees_with_opacus"].value
    if "rdp" in curves and "pld" in curves:
        checks["pld_not_above_rdp"] = _pld_check(curves, disc)
    if "rdp" in curves and "rdp_classic" in curves:
        checks["classic_not_below_rdp"] = _classic_check(curves)
    last = {a: curves[a][-1] for a in [primary] + [a for a in accs if a != primary]}
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks, accountant=_provenance(last))


def sigma_key(sigma: float, steps: int) -> str:
    """Metric key of one grid cell: (sigma 0.5, T 2000) -> s0p5_t2000; (sigma 10, T 300) -> s10_t300."""
    return f"s{sigma:g}".replace(".", "p") + f"_t{steps}"


GRID_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["noise_multipliers", "sampling_rate", "rounds", "delta", "accountants", "curve_points"],
    "properties": dict(
        {k: v for k, v in CURVE_SCHEMA["properties"].items() if k not in ("noise_multiplier", "rounds")},
        noise_multipliers={"type": "array", "minItems": 1, "uniqueItems": True, "items": POSITIVE},
        rounds={"type": "array", "minItems": 1, "uniqueItems": True, "items": INT1},
    ),
}


@experiment_kind(
    "privacy_grid",
    GRID_SCHEMA,
    deterministic=True,
    stage="privacy",
    metrics=("epsilon.*", "order.*"),
    checks=(),
    epsilon_rows=curve_rows,
    epsilon_panel=grid_panel,
)
def privacy_grid(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    """Epsilon of each noise multiplier of a grid at one sampling rate, as a curve over rounds (PPSGD's right-axis
    epsilon of Fig. 1 for every sigma of the App. A grid). Metrics: epsilon.<accountant>.s<sigma>_t<T> at every
    requested round count T."""
    accs, primary, kw = _accounting(p, ctx.exp_id)
    last_round = max(p["rounds"])
    steps = sorted(set(curve_rounds(last_round, p["curve_points"])) | set(p["rounds"]))
    rows, metrics, last = [], {"epsilon": {a: {} for a in accs}}, {}
    for sigma in p["noise_multipliers"]:
        for a in accs:
            curve = epsilon_curve(sigma, p["sampling_rate"], steps, p["delta"], a, **kw)
            last[a] = curve[-1]
            for r in curve:
                rows.append(
                    {
                        "noise_multiplier": sigma,
                        "round": r.steps,
                        "accountant": a,
                        "epsilon": r.epsilon,
                        "optimal_order": r.optimal_order if r.optimal_order is not None else math.nan,
                    }
                )
                if r.steps in p["rounds"]:
                    metrics["epsilon"][a][sigma_key(sigma, r.steps)] = r.epsilon
    last = {a: last[a] for a in [primary] + [a for a in accs if a != primary]}
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), accountant=_provenance(last))
