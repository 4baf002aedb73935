"""Combine the per-seed runs of one experiment into ``summary.json``: per metric the mean over seeds, the sample std
(ddof = 1), the standard error of the mean std/sqrt(n) and n, the number of seeds behind them.

Metric keys are flattened to dotted paths (``gain_pct.normal``); targets in the registry refer to these keys.
Nothing is dropped silently: the runs must be of one experiment at one scale, and a metric that is undefined (None or
NaN in metrics.json) in some seeds but not in others stops the aggregate with the key and the seeds, unless the
kind declared it may be (``RunOutput.undefined_ok``, e.g. a crossing iteration when the curves never cross); a
metric undefined in every seed (epsilon without noise) has mean None and n 0 (a registry row reading it is invalid,
fedrepro.report.status). A value that is not a number (a string, a boolean, a list) where another seed has a number
stops the aggregate naming the file and the key; a key that is not a number in any seed is a description the kind
records beside its numbers (the noise's source, a model's layer sizes, convergence flags): it is not averaged, and
the aggregate lists such keys on its output.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedrepro.errors import ResultError
from fedrepro.runio import METRICS, read_metrics, write_json


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def stats(values: list[float]) -> dict:
    """mean, std (ddof = 1; 0 for one value), se = std / sqrt(n) and n of the finite values."""
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return {"mean": None, "std": None, "se": None, "n": 0, "values": values}
    std = float(np.std(finite, ddof=1)) if finite.size > 1 else 0.0
    return {
        "mean": float(np.mean(finite)),
        "std": std,
        "se": std / math.sqrt(finite.size),
        "n": int(finite.size),
        "values": values,
    }


def _number(v: Any) -> bool:
    """A number (bool is not one, though Python says it is an int)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def summarize(run_docs: list[dict], sources: list[str] | None = None) -> dict:
    """The summary of one experiment's runs; ``sources`` names each run (its metrics file) in error messages."""
    if not run_docs:
        raise ValueError("no runs to summarize")
    order = sorted(range(len(run_docs)), key=lambda i: run_docs[i]["seed"])
    run_docs = [run_docs[i] for i in order]
    names = [sources[i] for i in order] if sources else [f"seed {d['seed']}" for d in run_docs]
    first = run_docs[0]
    for name, d in zip(names, run_docs):
        for field in ("experiment", "kind", "scale"):
            if d[field] != first[field]:
                raise ResultError(
                    f"{name}: {field} is {d[field]!r} but {names[0]} has {first[field]!r}: the runs of "
                    "one summary must be of one experiment at one scale"
                )
    undefined_ok = tuple(first.get("undefined_ok") or ())
    flat = [flatten(d["metrics"]) for d in run_docs]
    metrics, broken = {}, []
    for key in sorted(set().union(*flat)):
        vals = [f.get(key) for f in flat]
        numbers = [name for name, v in zip(names, vals) if _number(v)]
        odd = [(name, v) for name, v in zip(names, vals) if v is not None and not _number(v)]
        if odd and not numbers:
            continue  # a description, not a metric (listed by aggregate_runs)
        if odd:
            raise ResultError(
                f"{odd[0][0]}: metrics.{key} is {odd[0][1]!r}, not a number, where {numbers[0]} has a number: a "
                "damaged or hand-edited run; delete that run directory and run the workflow again "
                "(`snakemake --cores 2`)"
            )
        floats = [math.nan if v is None else float(v) for v in vals]
        s = stats(floats)
        if 0 < s["n"] < len(floats) and not any(fnmatch.fnmatchcase(key, pat) for pat in undefined_ok):
            bad = [name for name, v in zip(names, floats) if not math.isfinite(v)]
            broken.append(f"{key} (undefined in {', '.join(bad)})")
        metrics[key] = s
    if broken:
        raise ResultError(
            f"{first['experiment']}: metrics undefined (None/NaN) in some seeds only: "
            f"{'; '.join(broken[:5])}{' ...' if len(broken) > 5 else ''}; a failed seed must not be "
            "averaged away: look at those runs' logs, fix the cause and rerun them"
        )
    checks = {}
    for name in sorted(set().union(*(d["checks"] for d in run_docs))):
        per_seed = [d["checks"].get(name) for d in run_docs]
        passed = [bool(c and c["passed"]) for c in per_seed]
        failing = next((c for c in per_seed if c and not c["passed"]), None)
        checks[name] = {
            "passed": all(passed),
            "n_passed": sum(passed),
            "n": len(passed),
            "detail": (failing or per_seed[0] or {}).get("detail", ""),
        }
    return {
        "experiment": first["experiment"],
        "kind": first["kind"],
        "scale": first["scale"],
        "effective_scale": first["effective_scale"],
        "deterministic": bool(first.get("deterministic", False)),
        "seeds": [d["seed"] for d in run_docs],
        "metrics": metrics,
        "checks": checks,
        "accountant": first.get("accountant"),
        "wall_time_s": float(sum(d["wall_time_s"] for d in run_docs)),
        "versions": first["versions"],
    }


def aggregate_runs(run_dirs: Iterable[Path], out: Path) -> dict:
    run_dirs = [Path(d) for d in run_dirs]
    docs = [read_metrics(d) for d in run_dirs]
    summary = summarize(docs, [str(d / METRICS) for d in run_dirs])
    described = sorted(set().union(*(flatten(d["metrics"]) for d in docs)) - set(summary["metrics"]))
    if described:
        print(f"[fedrepro] not averaged (not a number in any seed): {', '.join(described)}", flush=True)
    write_json(Path(out), summary)
    return summary
