"""Plot styles for the AdaPeD paper's figures (axes, curve names and legends as printed): the DP estimation figures
(Figs. 1a, 3a, 3b) and the federated learning figures (Fig. 1b, Figs. 2a/2b, and the psi trajectories behind the
Sec. 4 statements Q1/Q2), drawn from adaped_fl_training runs: the history rows of each method's selected learning rate
(column ``selected``), mean over seeds with a +-1 std band."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedrepro.plots import finish_axes, plot


def _band(ax, x, ys: np.ndarray, label: str, **kw) -> None:
    mean, std = ys.mean(axis=0), ys.std(axis=0, ddof=1) if ys.shape[0] > 1 else np.zeros(ys.shape[1])
    (line,) = ax.plot(x, mean, label=label, **kw)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)


@plot("dp_estimation_mse")
def dp_estimation_mse(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1a / 3a / 3b: MSE (in 1e-2) vs eps0 for Local, Personalized and DP Personalized estimators."""
    x = histories[0]["eps0"].to_numpy()
    stack = {
        c: np.stack([h[c].to_numpy() * 100 for h in histories])
        for c in ("mse_local", "mse_personalized", "mse_dp", "mse_dp_closed_form")
    }
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    _band(ax, x, stack["mse_local"], "Local Estimator", marker="o", ms=3)
    _band(ax, x, stack["mse_personalized"], "Personalized Estimator", marker="s", ms=3)
    _band(ax, x, stack["mse_dp"], "DP Personalized Estimator", marker="^", ms=3)
    ax.plot(x, stack["mse_dp_closed_form"][0], "k:", lw=1, label="DP exact (eq. 19 with the projection)")
    return finish_axes(ax, r"$\epsilon_0$", "MSE (in 1e-2)", spec["artifact"], legend_size=7)


LABELS = {
    "fedavg": "FedAvg",
    "fedavg_ft": "FedAvg+FT",
    "adaped": "AdaPeD",
    "pfedme": "pFedMe",
    "perfedavg": "Per-FedAvg",
    "quped": "QuPeD (FP)",
    "fml": "Federated ML",
    "local": "Local training",
    "dp_adaped": "DP-AdaPeD",
    "dp_fedavg": "DP-FedAvg",
    "dp_adaped_unsampled": "DP-AdaPeD",
}


def _curves(histories: list[pd.DataFrame], column: str) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """(method, epsilon or None) -> (epochs, values (n_seeds, n_evals)) of the selected lr's rows."""
    out: dict[tuple, list] = {}
    for h in histories:
        h = h[h["selected"]] if "selected" in h else h
        if column not in h:
            continue
        eps = h["epsilon"] if "epsilon" in h else pd.Series(np.nan, index=h.index)
        for (method, e), g in h.assign(_eps=eps.fillna(-1.0)).groupby(["method", "_eps"], sort=False):
            g = g.sort_values("epoch")
            out.setdefault((method, None if e < 0 else float(e)), []).append(g)
    curves = {}
    for key, gs in out.items():
        n = min(len(g) for g in gs)
        curves[key] = (gs[0]["epoch"].to_numpy()[:n], np.stack([g[column].to_numpy()[:n] for g in gs]))
    return curves


def _label(method: str, eps: float | None) -> str:
    name = LABELS.get(method, method)
    return name if eps is None else f"{name}, ε = {eps:g}"


def _finish(ax, spec: Mapping, xlabel: str, ylabel: str) -> plt.Figure:
    return finish_axes(ax, xlabel, ylabel, spec["artifact"])


@plot("accuracy_vs_epoch")
def accuracy_vs_epoch(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 2a/2b: test accuracy (%) vs epoch ("iteration" on the paper's axis) of each method."""
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    for (method, eps), (x, ys) in _curves(histories, "test_acc").items():
        _band(ax, x, 100 * ys, _label(method, eps))
    return _finish(ax, spec, "iteration (epochs)", "Test Accuracy (in %)")


@plot("psi_trajectory")
def psi_trajectory(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """psi (the paper's "sigma_theta^2") of AdaPeD / DP-AdaPeD's global model vs epoch, per epsilon."""
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    for (method, eps), (x, ys) in _curves(histories, "psi").items():
        if np.isfinite(ys).any():
            _band(ax, x, ys, _label(method, eps))
    return _finish(ax, spec, "epoch", r"$\psi$ (global)")


@plot("accuracy_vs_epsilon")
def accuracy_vs_epsilon(spec: Mapping, summary: dict, histories: list[pd.DataFrame]) -> plt.Figure:
    """Fig. 1b: final test accuracy (%) vs epsilon of the private method(s); non-private methods as flat lines."""
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    final: dict[str, dict[float | None, list[float]]] = {}
    for (method, eps), (_, ys) in _curves(histories, "test_acc").items():
        final.setdefault(method, {})[eps] = list(100 * ys[:, -1])
    eps_all = sorted({e for per in final.values() for e in per if e is not None})
    for method, per in final.items():
        if None in per:  # not private: flat in epsilon
            v = np.array(per[None])
            ax.axhline(v.mean(), ls="--", color="0.3", label=_label(method, None))
            continue
        xs = [e for e in eps_all if e in per]
        ys = np.array([per[e] for e in xs]).T
        _band(ax, np.array(xs), ys, LABELS.get(method, method), marker="o", ms=3)
    return _finish(ax, spec, r"$\epsilon$", "Test Accuracy (in %)")
