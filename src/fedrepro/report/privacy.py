"""The privacy stage's outputs: every epsilon of a paper in one CSV, per accountant, and a figure of epsilon vs rounds.

Reads the runs of the paper's privacy-stage experiments (kinds registered with ``stage="privacy"``); computes
nothing itself, and knows no kind: each kind declares the rows its run gives (``epsilon_rows``) and, for epsilon
curves, its panel of the figure (``epsilon_panel``; fedrepro.experiments.experiment_kind).
``results/privacy/<paper>/epsilon.csv`` has one row per (setting, accountant or closed form) with the library and
version that produced it; ``curves.csv`` holds every experiment's full history (every curve point) with the same
provenance columns. ``figures/<paper>/privacy_epsilon.{pdf,png}``: one panel per epsilon-curve experiment; the
registry's values for those curves are drawn as markers (printed numbers filled, extra references hollow).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from fedrepro import paths
from fedrepro.config import Experiment, load_paper, resolve_experiment, resolve_path
from fedrepro.errors import ConfigError
from fedrepro.experiments import get_kind
from fedrepro.files import atomic_write
from fedrepro.privacy.result import library_columns
from fedrepro.report.registry import load_registry
from fedrepro.runio import read_history, read_metrics, read_summary

COLUMNS = [
    "experiment",
    "setting",
    "accountant",
    "library",
    "library_version",
    "noise_multiplier",
    "sampling_rate",
    "rounds",
    "delta",
    "epsilon",
    "optimal_order",
    "note",
]


def privacy_experiments(cfg: Mapping, paper: str, scale: str) -> list[Experiment]:
    names = load_paper(cfg, paper)["experiments"]
    exps = [resolve_experiment(cfg, f"{paper}.{n}", scale) for n in names]
    return [e for e in exps if e.stage == "privacy"]


def has_epsilon_curve(exp: Experiment) -> bool:
    """Whether the experiment's kind draws a panel of the privacy figure (its history is an epsilon curve)."""
    return get_kind(exp.kind).epsilon_panel is not None


def curve_experiments(cfg: Mapping, paper: str, scale: str) -> list[Experiment]:
    return [e for e in privacy_experiments(cfg, paper, scale) if has_epsilon_curve(e)]


def _run(cfg: Mapping, exp: Experiment) -> tuple[dict, pd.DataFrame]:
    """The first seed's run of an accounting experiment, at the scale it ran at."""
    scale = exp.scale
    summary = read_summary(paths.summary_path(cfg, exp.paper, exp.name, scale))
    seed = summary["seeds"][0]  # privacy kinds are deterministic: one run
    run_dir = paths.run_dir(cfg, exp.paper, exp.name, scale, seed)
    return read_metrics(run_dir), read_history(run_dir)


def write_privacy_tables(cfg: Mapping, paper: str, out_dir: Path, scale: str | None = None) -> list[Path]:
    """epsilon.csv (every setting x accountant) and curves.csv (every history row of every privacy experiment,
    long format, with the library and version behind each row) for one paper."""
    scale = scale or cfg["scale"]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for exp in privacy_experiments(cfg, paper, scale):
        run, hist = _run(cfg, exp)
        kind = get_kind(exp.kind)
        if kind.epsilon_rows is None:
            raise ConfigError(f"{exp.id}: kind {exp.kind} is in the privacy stage but declares no epsilon_rows")
        rows += [dict(r, experiment=exp.name) for r in kind.epsilon_rows(exp, run, hist)]
        full = hist.assign(experiment=exp.name, **library_columns(run["accountant"]))
        allacc = (run["accountant"] or {}).get("all")
        if allacc and "accountant" in hist:
            full["library"] = hist["accountant"].map({a: v["library"] for a, v in allacc.items()})
            full["library_version"] = hist["accountant"].map({a: v["library_version"] for a, v in allacc.items()})
        curves.append(full)
    written = []
    for name, df in (
        ("epsilon.csv", pd.DataFrame(rows, columns=COLUMNS)),
        ("curves.csv", pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()),
    ):
        if name == "curves.csv" and not df.empty:
            df = df[["experiment"] + [c for c in df.columns if c != "experiment"]]
        path = out_dir / name
        atomic_write(path, lambda p, d=df: d.to_csv(p, index=False))
        written.append(path)
    return written


def _targets(cfg: Mapping, paper: str, exp: Experiment) -> list[tuple[str, float, bool]]:
    """(key, value, printed) of the registry's epsilon targets of this experiment (printed: not an extra
    reference)."""
    if paper not in cfg.get("targets", {}):
        return []
    return [
        (t.key, t.value, not t.artifact.startswith("Extra"))
        for t in load_registry(resolve_path(cfg["targets"][paper]), paper)
        if t.experiment == exp.id and t.value is not None and t.key.startswith("epsilon.")
    ]


def render_privacy_figure(
    cfg: Mapping, paper: str, out_pdf: Path, out_png: Path | None = None, scale: str | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = scale or cfg["scale"]
    exps = curve_experiments(cfg, paper, scale)
    ncols = min(3, len(exps))
    nrows = math.ceil(len(exps) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[len(exps) :]:
        ax.set_visible(False)
    for ax, exp in zip(axes.flat, exps):
        run, hist = _run(cfg, exp)
        p = exp.params
        get_kind(exp.kind).epsilon_panel(ax, exp, run, hist, _targets(cfg, paper, exp))
        ax.set_yscale("log")
        ax.set_xlabel("rounds")
        ax.set_ylabel(f"epsilon at delta={p['delta']:g}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    fig.suptitle(f"{paper}: privacy accounting (markers: registry targets; filled = printed in the paper)", fontsize=9)
    fig.tight_layout()
    atomic_write(out_pdf, lambda q: fig.savefig(q, format="pdf", metadata={"CreationDate": None}))
    if out_png:
        atomic_write(out_png, lambda q: fig.savefig(q, format="png", dpi=150, metadata={"Software": None}))
    plt.close(fig)
