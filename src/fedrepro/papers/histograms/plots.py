"""Plot styles for the histograms paper (Setlur et al.). The paper has no figures; the one here is an extra."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedrepro.plots import plot

NAMES = {"alg2": "Algorithm 2", "alg2_dimred": "Algorithm 2 + DimRed", "ifca": "IFCA"}
REGIME_TITLES = {"nonprivate": "non-private", "private": "private (ε' = 15, δ' = 1e-10)"}


def _mean_curve(histories: list[pd.DataFrame], regime: str, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds of kl_cluster_model per iteration; a run that stopped early holds its last value."""
    curves = []
    for h in histories:
        q = h[(h["regime"] == regime) & (h["method"] == method)].sort_values("iteration")
        if len(q):
            curves.append(q["kl_cluster_model"].to_numpy())
    if not curves:
        return np.array([]), np.array([])
    n = max(len(c) for c in curves)
    padded = np.array([np.r_[c, np.full(n - len(c), c[-1])] for c in curves])
    return np.arange(n), padded.mean(axis=0)


@plot("histograms_kl_vs_iteration")
def kl_vs_iteration(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    regimes = [r for r in REGIME_TITLES if (histories[0]["regime"] == r).any()]
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.2), squeeze=False, sharey=True)
    ref = {k: (summary["metrics"].get(f"reference.{k}") or {}).get("mean") for k in ("oracle_cluster", "fedavg")}
    for ax, regime in zip(axes[0], regimes):
        for method, name in NAMES.items():
            x, y = _mean_curve(histories, regime, method)
            if len(x):
                ax.plot(x, y, label=name, lw=1.3)
        if ref["oracle_cluster"] is not None:
            ax.axhline(ref["oracle_cluster"], color="k", ls="--", lw=0.8, label="true centers (closed form)")
        if ref["fedavg"] is not None:
            ax.axhline(ref["fedavg"], color="0.5", ls=":", lw=0.8, label="FedAvg mixture mean (closed form)")
        ax.set_yscale("log")
        ax.set_xlabel("clustering iteration t")
        ax.set_title(REGIME_TITLES[regime], fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(r"avg KL$(Q_u \,\|\, \hat P_{\hat c_u})$")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(spec["artifact"], fontsize=9)
    fig.tight_layout()
    return fig
