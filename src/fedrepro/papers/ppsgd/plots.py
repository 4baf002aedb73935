"""Plot styles for the PPSGD paper's figures (Bietti et al. 2022): axes, curve names and legends as printed."""

from __future__ import annotations

import math
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedrepro.plots import finish_axes, plot


def _alpha_name(a: float) -> str:
    return r"$\alpha Q = \infty$" if math.isinf(a) else rf"$\alpha Q = {a:g}$"


def _mean_curve(histories: list[pd.DataFrame], sigma: float, alpha: float, col: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [h[(h["sigma"] == sigma) & (h["alpha"] == alpha)].sort_values("iteration") for h in histories]
    parts = [q for q in parts if len(q)]
    if not parts:
        return np.array([]), np.array([])
    return parts[0]["iteration"].to_numpy(), np.mean([q[col].to_numpy() for q in parts], axis=0)


def _curve_panels(
    spec: Mapping, histories: list[pd.DataFrame], col: str, ylabel: str, eps_col: str, log: bool, legend_loc: str
) -> plt.Figure:
    """One panel per sigma (``options.sigmas``, those present), one curve per alpha Q (``options.alphas``), mean
    over seeds; epsilon of the first alpha > 0 on a right axis (green dashed), as in the paper's Fig. 1."""
    h0 = histories[0]
    have = sorted(h0["sigma"].unique())
    opts = spec.get("options") or {}
    sigmas = [s for s in (opts.get("sigmas") or have) if s in have] or have
    have_a = set(h0["alpha"].unique())
    alphas = [a for a in (float(a) for a in (opts.get("alphas") or sorted(have_a))) if a in have_a]
    fig, axes = plt.subplots(1, len(sigmas), figsize=(3.6 * len(sigmas), 3.0), squeeze=False)
    for ax, s in zip(axes[0], sigmas):
        for a in alphas:
            x, y = _mean_curve(histories, s, a, col)
            ax.plot(x, y, label=_alpha_name(a), lw=1.3)
        if log:
            ax.set_yscale("log")
        finish_axes(ax, "iterations", ylabel, f"privacy noise σ = {s:g}", legend_loc=legend_loc)
        pos = [a for a in alphas if a > 0]
        if s > 0 and pos and eps_col in h0:
            x, e = _mean_curve(histories, s, pos[0], eps_col)
            ax2 = ax.twinx()
            ax2.plot(x, e, "g--", lw=1)
            ax2.set_ylabel("ε", color="g")
            ax2.tick_params(axis="y", colors="g")
    fig.suptitle(spec["artifact"], fontsize=9)
    fig.tight_layout()
    return fig


@plot("ppsgd_excess_risk")
def ppsgd_excess_risk(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1a: excess risk (log) vs iterations, best step per iteration, epsilon (opacus RDP) on the right axis."""
    return _curve_panels(spec, histories, "excess_risk", "excess risk", "epsilon_opacus_rdp", True, "upper right")


def _best_over_steps(h: pd.DataFrame) -> pd.DataFrame:
    """Best test accuracy over steps at each (sigma, alpha, iteration): the official code's selection."""
    return h.groupby(["sigma", "alpha", "iteration"], as_index=False).agg(
        accuracy=("accuracy", "max"), epsilon=("epsilon", "max")
    )


@plot("ppsgd_accuracy")
def ppsgd_accuracy(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1b/1c: test accuracy vs iterations, best step per evaluation, epsilon on the right axis."""
    return _curve_panels(
        spec, [_best_over_steps(h) for h in histories], "accuracy", "test accuracy", "epsilon", False, "lower right"
    )


@plot("ppsgd_pareto")
def ppsgd_pareto(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 2: accuracy vs privacy epsilon (log, inverted) at the end of training, step chosen by final accuracy per
    (sigma, alpha): local only (red line), global only (blue), intermediate alpha (light green), best personalized
    (black: Pareto frontier of all alpha != 0 points, started at (epsmin, local accuracy)). First seed."""
    from fedrepro.papers.ppsgd.grid import pareto

    h = histories[0]
    last = h[h["iteration"] == h["iteration"].max()]
    pts = last.loc[last.groupby(["sigma", "alpha"])["accuracy"].idxmax()]
    pts = pts[(pts["sigma"] > 0) | (pts["alpha"] == 0)]
    epsmin = float((spec.get("options") or {}).get("epsmin", 0.1))
    fig, ax = plt.subplots(figsize=(4.4, 3.3))
    local = pts[pts["alpha"] == 0]["accuracy"].max()
    ax.axhline(local, color="r", label="local only")
    for a, g in pts[pts["alpha"] > 0].groupby("alpha"):
        g = g.sort_values("epsilon")
        if math.isinf(a):
            ax.plot(g["epsilon"], g["accuracy"], "b-o", ms=3, label="global only")
        else:
            ax.plot(g["epsilon"], g["accuracy"], color="lightgreen", lw=0.8, marker=".", ms=2)
    front = pareto([(e, acc) for e, acc in zip(pts[pts["alpha"] > 0]["epsilon"], pts[pts["alpha"] > 0]["accuracy"])])
    front = [(epsmin, local)] + [f for f in front if f[1] > local]
    ax.plot([f[0] for f in front], [f[1] for f in front], "k-", lw=2, drawstyle="steps-post", label="best personalized")
    ax.set_xscale("log")
    ax.set_xlim(1000, epsmin)
    return finish_axes(ax, "privacy ε", "accuracy", spec["artifact"])
