"""Combine the per-seed runs of one experiment into ``summary.json`` (mean ± std over seeds).

Metric keys are flattened to dotted paths (``gain_pct.normal``); targets in the registry refer to these keys.
The std is the sample standard deviation over seeds (ddof=1; 0 for a single seed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from fedrepro.runio import read_metrics, write_json


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _stats(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return {"mean": None, "std": None, "n": 0, "values": values}
    std = float(np.std(finite, ddof=1)) if finite.size > 1 else 0.0
    return {"mean": float(np.mean(finite)), "std": std, "n": int(finite.size), "values": values}


def summarize(run_docs: list[dict]) -> dict:
    if not run_docs:
        raise ValueError("no runs to summarize")
    run_docs = sorted(run_docs, key=lambda d: d["seed"])
    first = run_docs[0]
    flat = [flatten(d["metrics"]) for d in run_docs]
    keys = sorted(set().union(*flat))
    metrics = {}
    for key in keys:
        vals = [f.get(key) for f in flat]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) or v is None for v in vals):
            metrics[key] = _stats([math.nan if v is None else float(v) for v in vals])
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
        "seeds": [d["seed"] for d in run_docs],
        "metrics": metrics,
        "checks": checks,
        "accountant": first.get("accountant"),
        "wall_time_s": float(sum(d["wall_time_s"] for d in run_docs)),
        "versions": first["versions"],
    }


def aggregate_runs(run_dirs: Iterable[Path], out: Path) -> dict:
    summary = summarize([read_metrics(Path(d)) for d in run_dirs])
    write_json(Path(out), summary)
    return summary
