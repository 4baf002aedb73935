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

Provenance (fedrepro.provenance) is checked before anything is averaged, and each refusal is one ResultError naming
the run's metrics file and what to do: a run directory given twice, a seed twice (a run copied over another), runs
of different experiments, kinds or scales, runs whose resolved parameters differ (``params_digest``: a ``--set`` run
beside the config's), and a run whose experiment, scale or seed is not the one of the place it sits in
(``<paper>/<exp>/<scale>/seed<N>``), or not the one of the summary being written (``<paper>/<exp>/<scale>/
summary.json``). Runs written before the digest was recorded lack it and are compared on what they hold.
``summary.json`` records the experiment, scale, seeds, the runs' ``params_digest`` (absent when none recorded one)
and the distinct code versions and input-data records of its runs.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedrepro import paths
from fedrepro.errors import ResultError
from fedrepro.provenance import changed_inputs, misplaced
from fedrepro.runio import METRICS, read_metrics, write_json

REDO = "delete that run directory and run the workflow again (`snakemake --cores 2`)"


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
    _check_siblings(run_docs, names)
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
    digests = [d["params_digest"] for d in run_docs if "params_digest" in d]
    provenance = {"params_digest": digests[0]} if digests else {}
    reads = [d["reads_digest"] for d in run_docs if "reads_digest" in d]
    if reads:  # what a sweep read besides its parameters (fedrepro.staleness); the seeds' differing is stale too
        provenance["reads_digest"] = reads[0] if len(set(reads)) == 1 and len(reads) == len(run_docs) else "mixed"
    if any("kind_revision" in d for d in run_docs):  # the oldest run's (one that predates the record: revision 1)
        provenance["kind_revision"] = min(int(d.get("kind_revision", 1)) for d in run_docs)
    return {
        "experiment": first["experiment"],
        "kind": first["kind"],
        "scale": first["scale"],
        "effective_scale": first["effective_scale"],
        **provenance,
        "code_versions": sorted({d["code_version"] for d in run_docs if "code_version" in d}),
        "inputs": _distinct(d["inputs"] for d in run_docs if "inputs" in d),
        "deterministic": bool(first.get("deterministic", False)),
        "seeds": [d["seed"] for d in run_docs],
        "metrics": metrics,
        "checks": checks,
        "accountant": first.get("accountant"),
        "wall_time_s": float(sum(d["wall_time_s"] for d in run_docs)),
        "versions": first["versions"],
    }


def _distinct(records: Iterable[Any]) -> list:
    out: list = []
    for r in records:
        if r not in out:
            out.append(r)
    return out


def _check_siblings(run_docs: list[dict], names: list[str]) -> None:
    """The runs (sorted by seed) are of one experiment, kind and scale, each seed once, with one params_digest and
    one input-data record among those that record them; else a ResultError naming the odd run."""
    first = run_docs[0]
    for name, d in zip(names, run_docs):
        for field in ("experiment", "kind", "scale"):
            if d[field] != first[field]:
                raise ResultError(
                    f"{name}: {field} is {d[field]!r} but {names[0]} has {first[field]!r}: the runs of one summary "
                    f"must be of one experiment at one scale; {REDO}"
                )
    for (name_a, a), (name_b, b) in zip(zip(names, run_docs), zip(names[1:], run_docs[1:])):
        if a["seed"] == b["seed"]:
            raise ResultError(
                f"{name_b}: seed {b['seed']} again ({name_a} is seed {b['seed']} too): a run copied over another "
                f"seed's, or given twice; {REDO}"
            )
    recorded = [(name, d["params_digest"]) for name, d in zip(names, run_docs) if "params_digest" in d]
    for name, digest in recorded[1:]:
        if digest != recorded[0][1]:
            raise ResultError(
                f"{name}: params_digest {digest} but {recorded[0][0]} has {recorded[0][1]}: runs made with different "
                "parameters (a --set run, or the config changed between seeds) are not averaged; delete the runs "
                "made with the parameters the config no longer gives and run the workflow again "
                "(`snakemake --cores 2`)"
            )
    read = [(name, d["inputs"]) for name, d in zip(names, run_docs) if "inputs" in d]
    for name, inputs in read[1:]:
        if inputs != read[0][1]:
            changed = ", ".join(changed_inputs(read[0][1], inputs)) or "the records differ"
            raise ResultError(
                f"{name}: made from other input data than {read[0][0]} ({changed}): runs on a rebuilt partition or "
                "refetched dataset are not averaged with runs on the old one; delete the runs made before the data "
                "changed and run the workflow again (`snakemake --cores 2`)"
            )


def _check_places(run_dirs: list[Path], docs: list[dict], out: Path) -> None:
    """Each run directory given once, and a summary written to ``<paper>/<exp>/<scale>/summary.json`` made of that
    experiment's runs at that scale (read_metrics checks that each run is the one of its own place)."""
    seen: dict[Path, Path] = {}
    for d in run_dirs:
        key = d.resolve()
        if key in seen:
            raise ResultError(
                f"{d / METRICS}: given twice in --runs ({seen[key]} and {d}): each seed's run is aggregated once; "
                "list each run directory once"
            )
        seen[key] = d
    place = paths.place(out, "summary")
    for d, doc in zip(run_dirs, docs):
        if place and misplaced({k: doc[k] for k in ("experiment", "scale")}, place):
            raise ResultError(
                f"{d / METRICS}: a run of {doc['experiment']} at {doc['scale']} scale, aggregated into {out}, the "
                f"summary of {place['paper']}.{place['exp']} at {place['scale']} scale: aggregate into it only "
                "that experiment's runs at that scale"
            )


def unsupported(summary: Mapping, run_dirs: Iterable[Path], source: str) -> str | None:
    """Why the summary read from ``source`` is not what its seed runs ``run_dirs`` (one per seed it lists) give, or
    None when it is: every run present and readable, and the summary recomputed from them equal to it (each metric's
    mean, std and n; each check's flag and counts), its own checks consistent with their counts. A report judges
    only a summary its runs bear out."""
    run_dirs = [Path(d) for d in run_dirs]
    for name, c in (summary.get("checks") or {}).items():
        if "n_passed" in c and "n" in c and bool(c["passed"]) != (c["n_passed"] == c["n"]):
            return f"{source}: check {name} says passed={c['passed']} but {c['n_passed']} of {c['n']} seeds passed"
    docs = []
    for d in run_dirs:
        if not (d / METRICS).is_file():
            return f"{source}: its seed run {d / METRICS} is missing"
        try:
            docs.append(read_metrics(d))
        except ResultError as exc:
            return f"{source}: its seed run is damaged: {exc}"
    try:
        again = summarize(docs, [str(d / METRICS) for d in run_dirs])
    except ResultError as exc:
        return f"{source}: its seed runs do not make one summary: {exc}"
    if again["seeds"] != list(summary.get("seeds") or []):
        return f"{source}: lists seeds {summary.get('seeds')} but its runs are seeds {again['seeds']}"
    mine = summary.get("metrics") or {}
    for key in sorted(set(mine) | set(again["metrics"])):
        a, b = mine.get(key), again["metrics"].get(key)
        if a is None or b is None:
            return f"{source}: metric {key!r} is {'not in the summary' if a is None else 'in no seed run'}"
        for stat in ("mean", "std", "n"):
            if stat in a and not _same(a[stat], b[stat]):
                return (
                    f"{source}: metric {key!r} has {stat} {a[stat]!r}, its seed runs give {b[stat]!r} (the summary "
                    "was edited, or its runs changed after it was written)"
                )
    for name in sorted(set(summary.get("checks") or {}) | set(again["checks"])):
        a, b = (summary.get("checks") or {}).get(name), again["checks"].get(name)
        if a is None or b is None or any(a.get(k, b[k]) != b[k] for k in ("passed", "n_passed", "n")):
            return f"{source}: check {name!r} is {a!r} in the summary, its seed runs give {b!r}"
    return None


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def aggregate_runs(run_dirs: Iterable[Path], out: Path) -> dict:
    run_dirs = [Path(d) for d in run_dirs]
    docs = [read_metrics(d) for d in run_dirs]
    _check_places(run_dirs, docs, Path(out))
    summary = summarize(docs, [str(d / METRICS) for d in run_dirs])
    described = sorted(set().union(*(flatten(d["metrics"]) for d in docs)) - set(summary["metrics"]))
    if described:
        print(f"[fedrepro] not averaged (not a number in any seed): {', '.join(described)}", flush=True)
    write_json(Path(out), summary)
    return summary
