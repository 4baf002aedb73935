"""Plot styles for the AdaPeD paper's figures (axes, curve names and legends as printed)."""

from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedrepro.plots import finish_axes, plot


def _band(ax, x, ys: np.ndarray, label: str, **kw) -> None:
    mean, std = ys.mean(axis=0), ys.std(axis=0, ddof=1) if ys.shape[0] > 1 else np.zeros(ys.shape[1])
    line, = ax.plot(x, mean, label=label, **kw)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)


@plot("dp_estimation_mse")
def dp_estimation_mse(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1a / 3a / 3b: MSE (in 1e-2) vs eps0 for Local, Personalized and DP Personalized estimators."""
    x = histories[0]["eps0"].to_numpy()
    stack = {c: np.stack([h[c].to_numpy() * 100 for h in histories]) for c in
             ("mse_local", "mse_personalized", "mse_dp", "mse_dp_closed_form")}
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    _band(ax, x, stack["mse_local"], "Local Estimator", marker="o", ms=3)
    _band(ax, x, stack["mse_personalized"], "Personalized Estimator", marker="s", ms=3)
    _band(ax, x, stack["mse_dp"], "DP Personalized Estimator", marker="^", ms=3)
    ax.plot(x, stack["mse_dp_closed_form"][0], "k:", lw=1, label="DP closed form (eq. 19)")
    return finish_axes(ax, r"$\epsilon_0$", "MSE (in 1e-2)", spec["artifact"], legend_size=7)
