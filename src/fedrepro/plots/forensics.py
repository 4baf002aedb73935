"""The figure of a forensic sweep (fedrepro.audit.forensics): per row, the rebuilt value under every reading
beside the printed value and its tolerance band (a row judged by checks: its distance to the check's boundary where
the checks state one, else passes / fails per reading). A sweep over more than MAX_PANELS rows is drawn as one
panel, a row per line: each reading's (rebuilt - printed) / tolerance, so that a 77-row sweep stays a picture of a
few hundred kB, not a 28,000-pixel-tall strip."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import pandas as pd

from fedrepro.plots import finish_axes, plot

COLORS = {"reproduced": "tab:green", "deviates": "tab:red", "inconclusive": "tab:orange"}
MAX_PANELS = 8
MARKERS = "os^Dv<>pPX*h"


def _rows_in_one_panel(spec: Mapping, h: pd.DataFrame, rows: list[str]) -> plt.Figure:
    """Every row on one axis: x = (rebuilt - printed) / tol per reading (marker: reading; colour: verdict); rows
    judged by checks show their distance to the check's boundary, claims their outcome at 0."""
    readings = list(dict.fromkeys(h.sort_values("reading")["reading"]))
    fig, ax = plt.subplots(figsize=(10.0, 1.2 + 0.16 * len(rows)))
    for y, row in enumerate(rows):
        g = h[h["row"] == row]
        if g["rebuilt"].notna().any():
            x = (g["rebuilt"] - g["printed"].astype(float)) / g["tol"].astype(float)
        elif "numeric" in g and g["numeric"].all():
            x = g["distance"]
        else:
            x = pd.Series(0.0, index=g.index)
        for (_, r), xv in zip(g.iterrows(), x):
            i = readings.index(r["reading"])
            ax.scatter(xv, y, marker=MARKERS[i % len(MARKERS)], color=COLORS.get(r["outcome"], "0.5"), s=16, zorder=3)
    ax.axvspan(-1, 1, color="0.88", zorder=0)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_yticks(range(len(rows)), rows, fontsize=5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    texts = dict(zip(h["reading"], h["reading_text"]))
    for i, reading in enumerate(readings):
        ax.scatter([], [], marker=MARKERS[i % len(MARKERS)], color="0.3", label=f"{reading}: {texts[reading]}"[:90])
    for outcome, color in COLORS.items():
        ax.scatter([], [], marker="s", color=color, label=outcome)
    finish_axes(
        ax,
        "(rebuilt - printed) / tolerance (grey: within; checks: distance to their boundary)",
        "",
        f"{spec['artifact']}: {len(rows)} rows, reading 0 = the config's",
        legend_size=6,
    )
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the rows, never over them
    fig.tight_layout()
    return fig


@plot("forensic_sweep")
def forensic_sweep(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    h = histories[0]
    rows = list(dict.fromkeys(h["row"]))
    if len(rows) > MAX_PANELS:
        return _rows_in_one_panel(spec, h, rows)
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
