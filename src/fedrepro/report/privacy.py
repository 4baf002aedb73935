"""The privacy stage's outputs: every epsilon of a paper in one CSV, per accountant, and a figure of epsilon vs rounds.

Reads the runs of the paper's privacy-stage experiments (kinds registered with ``stage="privacy"``); computes
nothing itself. ``results/privacy/<paper>/epsilon.csv`` has one row per (setting, accountant or closed form) with the
library and version that produced it; ``curves.csv`` holds every experiment's full history (every curve point) with
the same provenance columns. ``figures/<paper>/privacy_epsilon.{pdf,png}``: one panel per epsilon-curve experiment;
the registry's values for those curves are drawn as markers (printed numbers filled, extra references hollow).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from fedrepro import paths
from fedrepro.config import Experiment, load_paper, resolve_experiment, resolve_path
from fedrepro.report.registry import load_registry
from fedrepro.runio import atomic_write, read_history, read_metrics, read_summary

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
CURVE_KINDS = ("privacy_curve", "privacy_grid")


def privacy_experiments(cfg: Mapping, paper: str, scale: str) -> list[Experiment]:
    names = load_paper(cfg, paper)["experiments"]
    exps = [resolve_experiment(cfg, f"{paper}.{n}", scale) for n in names]
    return [e for e in exps if e.stage == "privacy"]


def curve_experiments(cfg: Mapping, paper: str, scale: str) -> list[Experiment]:
    return [e for e in privacy_experiments(cfg, paper, scale) if e.kind in CURVE_KINDS]


def _run(cfg: Mapping, exp: Experiment) -> tuple[dict, pd.DataFrame]:
    """The first seed's run of an accounting experiment, at the scale it ran at."""
    scale = exp.scale
    summary = read_summary(paths.summary_path(cfg, exp.paper, exp.name, scale))
    seed = summary["seeds"][0]  # privacy kinds are deterministic: one run
    run_dir = paths.run_dir(cfg, exp.paper, exp.name, scale, seed)
    return read_metrics(run_dir), read_history(run_dir)


def _lib(acc: Mapping | None) -> dict:
    acc = acc or {}
    return {
        "library": acc.get("library", acc.get("name", "")),
        "library_version": acc.get("library_version", acc.get("version", "")),
    }


def _curve_rows(exp: Experiment, run: dict, hist: pd.DataFrame) -> list[dict]:
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
                **_lib(acc),
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


def _thm5_rows(exp: Experiment, run: dict, hist: pd.DataFrame) -> list[dict]:
    p, lib = exp.params, run["accountant"]["library"]
    common = dict(sampling_rate=p["K"] / p["m"], rounds=p["T_over_tau"], delta=p["delta"])
    rows = []
    for _, h in hist.iterrows():
        setting = f"target eps={h['target_epsilon']:g}, z={h['z']:.4g}"
        rows.append(
            dict(
                setting=setting,
                accountant="Thm 5 + Lemma 1 (paper)",
                library="closed form",
                library_version="paper",
                noise_multiplier=h["z"],
                epsilon=h["epsilon_thm5"],
                optimal_order=h["lambda"],
                note="noise ratio z = sigma_q/C solved from the target",
                **common,
            )
        )
        rows.append(
            dict(
                setting=setting,
                accountant=lib["accountant"],
                **_lib(lib),
                noise_multiplier=h["z"],
                epsilon=h["epsilon_library"],
                optimal_order=h["library_order"],
                note="same mechanism, paper's sensitivity (eq. 59)",
                **common,
            )
        )
        if "z_library" in h:
            rows.append(
                dict(
                    setting=f"target eps={h['target_epsilon']:g}, z={h['z_library']:.4g}",
                    accountant=lib["accountant"],
                    **_lib(lib),
                    noise_multiplier=h["z_library"],
                    epsilon=h["target_epsilon"],
                    optimal_order=math.nan,
                    note="noise ratio calibrated with the library for the target",
                    **common,
                )
            )
        if "epsilon_library_triangle" in h:
            rows.append(
                dict(
                    setting=setting,
                    accountant=lib["accountant"],
                    **_lib(lib),
                    noise_multiplier=h["z"],
                    epsilon=h["epsilon_library_triangle"],
                    optimal_order=math.nan,
                    note="same mechanism, triangle-inequality sensitivity",
                    **common,
                )
            )
    return rows


def _ldp_rows(exp: Experiment, run: dict, hist: pd.DataFrame) -> list[dict]:
    lib = _lib(run["accountant"]["library"])
    return [
        dict(
            setting=f"eps0={h['eps0']:g}",
            accountant=h["accountant"],
            **lib,
            noise_multiplier=h["noise_multiplier"],
            sampling_rate=1.0,
            rounds=1,
            delta=exp.params["delta"],
            epsilon=h["epsilon_library"],
            optimal_order=math.nan,
            note=f"Thm 2.2 claims eps0 = {h['eps0']:g} for this noise",
        )
        for _, h in hist.iterrows()
    ]


def _hist31_rows(exp: Experiment, run: dict, hist: pd.DataFrame) -> list[dict]:
    return [
        dict(
            setting=f"reading={h['reading']}",
            accountant="Thm 3.1 + eq. (4) (paper)",
            library="closed form",
            library_version="paper",
            noise_multiplier=h["sigma"],
            sampling_rate=1.0,
            rounds=exp.params["T"],
            delta=h["total_delta"],
            epsilon=h["total_epsilon"],
            optimal_order=math.nan,
            note=f"per-step eps={h['per_step_epsilon']:.6g}, per-step delta={h['per_step_delta']:.6g}; "
            "noise_multiplier column = Gaussian sigma of Alg. 3",
        )
        for _, h in hist.iterrows()
    ]


def _ppsgd_rows(exp: Experiment, run: dict, hist: pd.DataFrame) -> list[dict]:
    p, rows = exp.params, []
    for _, h in hist.iterrows():
        for thm, col in (("Thm 4.1", "thm41_sigma_zeta"), ("Thm 5.1", "thm51_sigma_zeta")):
            rows.append(
                dict(
                    setting=f"eps={h['epsilon']:g}",
                    accountant=f"{thm} (paper, constants = 1)",
                    library="closed form",
                    library_version="paper",
                    noise_multiplier=h[col],
                    sampling_rate=p["q"],
                    rounds=p["T"],
                    delta=p["delta"],
                    epsilon=h["epsilon"],
                    optimal_order=math.nan,
                    note="noise_multiplier column = sufficient noise std sigma_zeta",
                )
            )
    return rows


ROWS: dict[str, Callable[[Experiment, dict, pd.DataFrame], list[dict]]] = {
    "privacy_curve": _curve_rows,
    "privacy_grid": _curve_rows,
    "adaped_thm5": _thm5_rows,
    "adaped_ldp": _ldp_rows,
    "histograms_thm31": _hist31_rows,
    "ppsgd_theorems": _ppsgd_rows,
}


def write_privacy_tables(cfg: Mapping, paper: str, out_dir: Path, scale: str | None = None) -> list[Path]:
    """epsilon.csv (every setting x accountant) and curves.csv (every history row of every privacy experiment,
    long format, with the library and version behind each row) for one paper."""
    scale = scale or cfg["scale"]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for exp in privacy_experiments(cfg, paper, scale):
        run, hist = _run(cfg, exp)
        rows += [dict(r, experiment=exp.name) for r in ROWS[exp.kind](exp, run, hist)]
        full = hist.assign(experiment=exp.name, **_lib(run["accountant"]))
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


_GRID_KEY = re.compile(r"^epsilon\.(\w+)\.s([0-9p]+)_t(\d+)$")


def _markers(cfg: Mapping, paper: str, exp: Experiment) -> list[tuple[float, float, str, bool]]:
    """(round, value, label, printed) of the registry targets on this experiment's epsilon curves."""
    if paper not in cfg.get("targets", {}):
        return []
    out = []
    for t in load_registry(resolve_path(cfg["targets"][paper]), paper):
        if t.experiment != exp.id or t.value is None or not t.key.startswith("epsilon."):
            continue
        printed = not t.artifact.startswith("Extra")
        m = _GRID_KEY.match(t.key)
        if m:
            out.append((int(m.group(3)), t.value, f"sigma={m.group(2).replace('p', '.')}", printed))
        elif exp.kind == "privacy_curve":
            out.append((exp.params["rounds"], t.value, t.key.split(".", 1)[1], printed))
    return out


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
        primary = run["accountant"]["accountant"]
        if exp.kind == "privacy_grid":
            for sigma, h in hist[hist["accountant"] == primary].groupby("noise_multiplier"):
                ax.plot(h["round"], h["epsilon"], label=f"sigma={sigma:g}")
            ax.set_title(f"{exp.name}: q={p['sampling_rate']:g} ({primary})", fontsize=8)
        else:
            for acc, h in hist.groupby("accountant", sort=False):
                ax.plot(h["round"], h["epsilon"], label=acc, ls="--" if acc == "rdp_classic" else "-")
            ax.set_title(f"{exp.name}: q={p['sampling_rate']:g}, sigma={p['noise_multiplier']:g}", fontsize=8)
        for x, y, _, printed in _markers(cfg, paper, exp):
            ax.plot([x], [y], "o", ms=5, mfc="k" if printed else "none", mec="k")
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
