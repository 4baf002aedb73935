"""Compare each registered target with what the workflow rebuilt: reproduced / deviates / not run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from fedrepro import paths
from fedrepro.config import load_paper, resolve_path
from fedrepro.data.catalog import get_dataset
from fedrepro.data.sources import is_available
from fedrepro.report.registry import Target, effective_tolerance, load_registry
from fedrepro.runio import read_summary

REPRODUCED, DEVIATES, NOT_RUN = "reproduced", "deviates", "not run"
REFERENCE = "reference"  # rebuilt, but the paper prints no number for it (e.g. a figure's flat line)
STATUSES = (REPRODUCED, DEVIATES, NOT_RUN, REFERENCE)


@dataclass
class Result:
    target: Target
    status: str
    rebuilt: float | None = None
    rebuilt_std: float | None = None
    diff: float | None = None
    tol: float | None = None
    scale: str = ""
    reason: str = ""
    command: str = ""


def rebuild_command(cfg: Mapping, t: Target, scale: str) -> str:
    summary = paths.relative(cfg, "summary", paper=t.paper, exp=t.exp_name, scale=scale)
    return f"snakemake --cores 2 --config scale={scale} -- {summary}"


def unavailable_datasets(cfg: Mapping, exp_entry: Mapping) -> list[str]:
    from fedrepro.config import experiment_datasets

    return [d for d in experiment_datasets(cfg, exp_entry) if not is_available(cfg, d)]


def evaluate(cfg: Mapping, t: Target, scale: str, summary: dict | None, exp_entry: Mapping | None) -> Result:
    if exp_entry is None:
        return Result(t, NOT_RUN, reason=f"no rule yet; needs: {t.needs or 'an experiment'}",
                      command=f"(experiment {t.experiment} is not defined yet)")
    missing = unavailable_datasets(cfg, exp_entry)
    if missing:
        fetch = " && ".join(f"python -m fedrepro data fetch {d}" + ("" if all(f.sha256 for f in get_dataset(d).files)
                                                                     else " --allow-unpinned") for d in missing)
        files = "; ".join(f"{d}: {', '.join(f.name for f in get_dataset(d).files)}" for d in missing)
        return Result(t, NOT_RUN, reason=f"data unavailable offline ({files}); needs a networked machine or a mirror",
                      command=f"{fetch} && {rebuild_command(cfg, t, 'paper')}")
    if summary is None:
        return Result(t, NOT_RUN, reason="not built at this scale", command=rebuild_command(cfg, t, scale))
    eff_scale = summary["effective_scale"]
    if t.check_names is not None:
        checks = summary["checks"]
        absent = [c for c in t.check_names if c not in checks]
        if absent:
            return Result(t, NOT_RUN, scale=eff_scale, reason=f"check(s) not produced: {', '.join(absent)}")
        failed = [c for c in t.check_names if not checks[c]["passed"]]
        detail = "; ".join(f"{c}: {checks[c]['detail']}" for c in (failed or t.check_names))
        return Result(t, DEVIATES if failed else REPRODUCED, scale=eff_scale, reason=detail)
    m = summary["metrics"].get(t.key)
    if m is None or m["mean"] is None:
        return Result(t, NOT_RUN, scale=eff_scale, reason=f"metric {t.key!r} not produced by {t.experiment}")
    if t.value is None:  # a rebuilt number with nothing printed to compare to (e.g. a figure's flat line)
        return Result(t, REFERENCE, m["mean"], m["std"], scale=eff_scale, reason="no printed value; shown for reference")
    diff = m["mean"] - t.value
    tol = effective_tolerance(t, m["std"])
    status = REPRODUCED if abs(diff) <= tol else DEVIATES
    return Result(t, status, m["mean"], m["std"], diff, tol, eff_scale)


def load_summary(cfg: Mapping, paper: str, exp: str, scale: str) -> dict | None:
    """The experiment's summary.json, or None when it was not built; an unreadable one is a ResultError."""
    p = paths.summary_path(cfg, paper, exp, scale)
    return read_summary(p) if p.exists() else None


def evaluate_paper(cfg: Mapping, paper: str, scale: str) -> list[Result]:
    doc = load_paper(cfg, paper)
    targets = load_registry(resolve_path(cfg["targets"][paper]), paper)
    cache: dict[str, dict | None] = {}
    results = []
    for t in targets:
        entry = doc["experiments"].get(t.exp_name)
        if t.exp_name not in cache:
            cache[t.exp_name] = load_summary(cfg, paper, t.exp_name, scale) if entry else None
        results.append(evaluate(cfg, t, scale, cache[t.exp_name], entry))
    return results


def registry_path(cfg: Mapping, paper: str) -> Path:
    return resolve_path(cfg["targets"][paper])
