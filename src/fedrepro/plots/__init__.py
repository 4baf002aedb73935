"""Figures: the house style of a panel, and one plot function per figure style, chosen by name in
config/<paper>.yaml.

A plot function gets the figure spec, the experiment summary and the per-seed histories, and returns a
matplotlib Figure. Each paper declares its styles in its ``PLOTS`` (fedrepro.papers); :func:`get_plot` imports
only the module of the style asked for. :func:`render_figure` saves it as PDF (+ PNG) with fixed metadata so
reruns are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fedrepro import paths  # noqa: E402
from fedrepro.config import experiment_scale, load_paper  # noqa: E402
from fedrepro.errors import ConfigError  # noqa: E402
from fedrepro.files import atomic_write  # noqa: E402
from fedrepro.registry import Registry  # noqa: E402
from fedrepro.runio import read_history, read_summary  # noqa: E402

PlotFn = Callable[[Mapping, dict, list[pd.DataFrame]], "plt.Figure"]
# paper-free styles; each paper declares its own
PLOTS: Registry[PlotFn] = Registry("plot", {"forensic_sweep": "fedrepro.plots.forensics"}, "PLOTS")


def plot(name: str):
    """Decorator registering a figure style as ``name``."""
    return PLOTS.register(name)


def finish_axes(
    ax, xlabel: str, ylabel: str, title: str | None = None, legend_size: float = 6, legend_loc: str | None = None
) -> plt.Figure:
    """The house style of one panel: labels, an optional title, legend, light grid; returns the tightened figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=legend_size, loc=legend_loc)
    ax.grid(alpha=0.3)
    ax.figure.tight_layout()
    return ax.figure


def get_plot(name: str) -> PlotFn:
    return PLOTS.get(name, "figures")


def render_figure(
    cfg: Mapping, fig_id: str, out_pdf: Path, out_png: Path | None = None, scale: str | None = None
) -> None:
    paper, fig = fig_id.split(".", 1)
    figs = load_paper(cfg, paper).get("figures") or {}
    if fig not in figs:
        raise ConfigError(f"{cfg['papers'][paper]}: figures.{fig}: no such figure (known: {', '.join(figs)})")
    spec = figs[fig]
    scale = experiment_scale(cfg, paper, spec["experiment"], scale)
    summary_file = paths.summary_path(cfg, paper, spec["experiment"], scale)
    summary = read_summary(summary_file)
    histories = [read_history(paths.run_dir(cfg, paper, spec["experiment"], scale, s)) for s in summary["seeds"]]
    figure = get_plot(spec["plot"])(spec, summary, histories)
    figure.text(
        0.99,
        0.01,
        f"fedrepro · {summary['effective_scale']} scale · {len(summary['seeds'])} seeds",
        ha="right",
        va="bottom",
        fontsize=6,
        color="0.5",
    )
    atomic_write(Path(out_pdf), lambda p: figure.savefig(p, format="pdf", metadata={"CreationDate": None}))
    if out_png:
        atomic_write(Path(out_png), lambda p: figure.savefig(p, format="png", dpi=150, metadata={"Software": None}))
    plt.close(figure)
