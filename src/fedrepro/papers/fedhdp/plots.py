"""Plot styles for the FedHDP paper's theory figures (Figs. 1-4): closed-form curves (lines) and Monte Carlo
simulations (markers with +-2 SE bars, mean over seeds), axes and legends as printed."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedrepro.plots import finish_axes, plot


def _pooled(histories: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    """Mean over seeds of the numeric columns (the MC estimates among them) and the pooled SE (each seed is an
    independent set of trials)."""
    cat = pd.concat(histories, ignore_index=True)
    g = cat.groupby(keys, sort=False)
    out = g.mean(numeric_only=True)
    out["se"] = np.sqrt(g["se"].apply(lambda s: float((s**2).sum()))) / g.size()
    return out.reset_index()


def _mc_markers(ax, x, y, se, color, label=None, every: int = 1):
    sl = slice(None, None, every)
    ax.errorbar(x[sl], y[sl], yerr=2 * se[sl], fmt="o", ms=3, color=color, mfc="none", lw=0.8, label=label)


@plot("fedhdp_server_variance_vs_r")
def server_variance_vs_r(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1: sigma_s^2 vs r, one panel per `panel`, one curve per (sigma_c2, gamma2); 'analytical opt.' stars."""
    h = _pooled(histories, ["panel", "sigma_c2", "gamma2", "r"])
    panels = list(dict.fromkeys(h["panel"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.2), squeeze=False)
    every = max(1, int(np.ceil(h.groupby(["panel", "sigma_c2", "gamma2"]).size().max() / 25)))
    for ax, panel in zip(axes[0], panels):
        hp = h[h["panel"] == panel]
        curves = hp[["sigma_c2", "gamma2"]].drop_duplicates().to_numpy()
        vary_gamma = len(set(curves[:, 1])) > 1
        for i, (sc2, g2) in enumerate(curves):
            c = hp[(hp["sigma_c2"] == sc2) & (hp["gamma2"] == g2)].sort_values("r")
            color = f"C{i}"
            name = rf"$\gamma^2 = {g2:.3g}$" if vary_gamma else rf"$\sigma_c^2 = {sc2:g}$"
            ax.plot(c["r"], c["var_closed_form"], "-", color=color, lw=1.2, label=name)
            _mc_markers(ax, c["r"].to_numpy(), c["var_mc"].to_numpy(), c["se"].to_numpy(), color, every=every)
            ax.plot(c["r_star"].iloc[0], c["var_opt"].iloc[0], "k*", ms=9, label="analytical opt." if i == 0 else None)
        fixed = rf"$\sigma_c^2 = {curves[0][0]:g}$" if vary_gamma else rf"$\gamma^2 = {curves[0][1]:g}$"
        opts = spec.get("options") or {}
        ax.set_title(f"N = {opts.get('N', '')}, " + r"$\rho_{np}$" + f" = {opts.get('rho', '')}, {fixed}", fontsize=9)
        ax.set_yscale("log")
        finish_axes(ax, "ratio r", r"$\sigma_s^2$", legend_size=7)
    fig.suptitle(f"{spec['artifact']}: lines closed form, circles simulation (±2 SE)", fontsize=8)
    fig.tight_layout()
    return fig


@plot("fedhdp_opt_out")
def opt_out(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Figs. 2/3: c_k's error vs lambda, left HDP-FedAvg+Ditto, right FedHDP (r*); c_k private vs opted out."""
    h = _pooled(histories, ["panel", "scenario", "lam"])
    titles = {"hdp": "HDP-FedAvg+Ditto (r = 1)", "fedhdp": r"FedHDP ($r^*$)"}
    names = {"private": r"$c_k$ private", "opted_out": r"$c_k$ opts out"}
    opts = spec.get("options") or {}
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2), sharey=True)
    for ax, panel in zip(axes, ("hdp", "fedhdp")):
        for i, sc in enumerate(("private", "opted_out")):
            c = h[(h["panel"] == panel) & (h["scenario"] == sc)].sort_values("lam")
            color = f"C{i}"
            ax.plot(c["lam"], c["loss_closed_form"], "-", color=color, lw=1.2, label=names[sc])
            _mc_markers(
                ax, c["lam"].to_numpy(), c["loss_mc"].to_numpy(), c["se"].to_numpy(), color, every=max(1, len(c) // 25)
            )
            lam_m = c["lam_marker"].iloc[0]
            if np.isfinite(lam_m):
                y = np.interp(np.log(lam_m), np.log(c["lam"]), c["loss_closed_form"])
                ax.plot(
                    lam_m,
                    y,
                    "*",
                    color=color,
                    ms=10,
                    mec="k",
                    label=(r"$\lambda^*$ (eq. 17/18/50)" if panel == "fedhdp" else r"argmin $\lambda$")
                    if i == 0
                    else None,
                )
        ax.set_xscale("log")
        if opts.get("logy"):
            ax.set_yscale("log")
        ax.set_xlabel(r"$\lambda$")
        ax.set_title(titles[panel], fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(opts.get("ylabel", r"MSE of $c_k$'s personalized estimate"))
    fig.suptitle(f"{spec['artifact']}: lines closed form, circles simulation (±2 SE)", fontsize=8)
    fig.tight_layout()
    return fig


@plot("fedhdp_server_variance_vs_rho")
def server_variance_vs_rho(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 4: sigma_s^2 vs rho_np for the FedAvg aggregator (r = 1) and the optimal FedHDP aggregator (r*)."""
    h = _pooled(histories, ["method", "rho"])
    names = {"fedavg": "FedAvg aggregator (r = 1)", "fedhdp": r"FedHDP aggregator ($r^*$)"}
    fig, ax = plt.subplots(figsize=(4.4, 3.2))
    for i, m in enumerate(("fedavg", "fedhdp")):
        c = h[h["method"] == m].sort_values("rho")
        ax.plot(c["rho"], c["var_closed_form"], "-", color=f"C{i}", lw=1.2, label=names[m])
        _mc_markers(
            ax, c["rho"].to_numpy(), c["var_mc"].to_numpy(), c["se"].to_numpy(), f"C{i}", every=max(1, len(c) // 25)
        )
    ax.set_yscale("log")
    finish_axes(ax, r"$\rho_{np}$", r"$\sigma_s^2$", legend_size=7)
    ax.set_title(f"{spec['artifact']}: lines closed form, circles simulation", fontsize=8)
    fig.tight_layout()
    return fig
