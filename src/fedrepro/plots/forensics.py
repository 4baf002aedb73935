"""The figure of a forensic sweep (fedrepro.experiments.forensics): per row, the rebuilt value under every reading
beside the printed value and its tolerance band (a row judged by checks: its distance to the check's boundary where
the checks state one, else passes / fails per reading)."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import pandas as pd

from fedrepro.plots import finish_axes, plot

COLORS = {"reproduced": "tab:green", "deviates": "tab:red", "inconclusive": "tab:orange"}


@plot("forensic_sweep")
def forensic_sweep(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    h = histories[0]
    rows = list(dict.fromkeys(h["row"]))
    fig, axes = plt.subplots(len(rows), 1, figsize=(6.0, 2.4 * len(rows)), squeeze=False)
    for ax, row in zip(axes[:, 0], rows):
        g = h[h["row"] == row].sort_values("reading")
        x = g["reading"].to_numpy()
        colors = [COLORS.get(o, "0.5") for o in g["outcome"]]
        if g["rebuilt"].notna().any():
            printed, tol = float(g["printed"].iloc[0]), float(g["tol"].max())
            ax.axhline(printed, color="k", lw=1, label="printed")
            ax.axhspan(printed - tol, printed + tol, color="0.85", label="printed ± tol (largest)")
            ax.errorbar(x, g["rebuilt"], yerr=1.96 * g["se"].fillna(0), fmt="none", ecolor="0.4", lw=0.8)
            ax.scatter(x, g["rebuilt"], c=colors, s=18, zorder=3, label="rebuilt (colour: verdict)")
            ylabel = "rebuilt value"
        elif "numeric" in g and g["numeric"].all():  # checks that state value, expected and tolerance
            ax.axhline(1.0, color="k", lw=1, label="the check's boundary")
            ax.scatter(x, g["distance"].clip(lower=1e-3), c=colors, s=18, zorder=3, label="distance (colour: verdict)")
            ax.set_yscale("log")
            ylabel = "|value - expected| / tolerance"
        else:
            ax.scatter(x, (g["outcome"] == "reproduced").astype(float), c=colors, s=18)
            ax.set_yticks([0, 1], ["fails", "holds"])
            ylabel = "claim"
        ax.set_xticks(
            x,
            [t if len(x) <= 12 else str(i) for i, t in zip(x, g["reading_text"])],
            rotation=60 if len(x) <= 12 else 0,
            ha="right" if len(x) <= 12 else "center",
            fontsize=6,
        )
        finish_axes(ax, "reading (0 = the config's)", ylabel, f"{spec['artifact']}: {row}", legend_size=6)
    fig.tight_layout()
    return fig
