"""Deviation forensics: one mechanism for every paper (issue #15).

A forensic experiment (kind ``forensic_sweep``, in config/<paper>.yaml) names an experiment of the same paper, the
registry rows it must explain, and a grid of *readings*: values of parameters the paper leaves open, each range
justified in a comment where it is written and fixed before the outcome was seen. It runs the experiment's own kind
at paper scale under every reading (the config's own reading first) for the given seeds, judges every row under
every reading by the report's rule (fedrepro.report.verdict), and concludes per row:

    reproduced under reading R      which readings, how close (the closest first)
    inconclusive under R            no reading reproduces it and the reading nearest the printed value is too noisy
    (n seeds; run k more)           to judge: k = the seeds the rule needs at its spread (verdict.seeds_to_resolve)
    no reading in the ranges        only when the reading nearest the printed value deviates under the rule: the
    reproduces it (closest R at     closest reading and its distance (|rebuilt - printed| / tolerance)
    distance D, resolved)

plus, over all rows, the readings that reproduce every row at once (``joint``). A grid is a mapping axis -> values
(every combination is one reading) or a list of such mappings (the union of their readings: sub-grids where an axis
matters only under some value of another). An axis may set several parameters together: its key joins their
dotted keys with commas and each value lists theirs (``"r,mu": [[0, 0], [1, 1]]`` reads mu = r). A reading that
resolves to the parameters of an earlier one (the config's values, typically) is that reading and is counted once. A row
whose cause was this project's own implementation says so with ``implementation_fix`` (the fix and the test that pins
it), and a deviation the paper causes itself with ``paper_issue`` (listed under "Paper issues found").

``config_reading_from_runs: true`` reads the config's reading from the swept experiment's own runs of the seeds (same
parameters but ``only_methods``; found by their recorded parameters, the workflow makes them first) instead of
training it again: an hour-long reading is not paid twice, and the rows are judged against the very runs the report
shows.

Resumable: each (resolved parameters, seed) result is kept in the run's checkpoint directory until the run
completes, so a killed sweep continues where it stopped. The report links each row to its forensic conclusion (check
``conclusion.<row id>``) and figure; the history holds one line per (reading, row).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind, get_kind
from fedrepro.experiments.params import INT0
from fedrepro.provenance import params_digest

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "rows", "grid"],
    "properties": {
        "experiment": {"type": "string", "minLength": 1},  # the swept experiment, of the same paper
        "rows": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}},
        # param key (dotted, as for --set; several joined by commas) -> the values read; every combination is one
        # reading. A list of such grids: the union of their readings.
        "grid": {
            "oneOf": [{"$ref": "#/$defs/grid"}, {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/grid"}}]
        },
        "fixed": {"type": "object", "default": {}},  # overrides applied under every reading
        # a short name for each reading of the grid, in the order of :func:`readings` (the conclusions and the figure
        # say it in place of the parameters it sets, e.g. six methods' flags set together); no default: absent, the
        # readings are named by their parameters (and sweeps made before keep their parameter digest)
        "reading_names": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "seeds": {"type": "array", "minItems": 1, "items": INT0, "default": [0]},
        # true: the config's reading is not trained again but read from the swept experiment's own runs of these
        # seeds (same parameters but ``only_methods``; the workflow makes them first)
        "config_reading_from_runs": {"type": "boolean", "default": False},
        # row -> fix + test
        "implementation_fix": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
        "paper_issue": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},  # row -> what
        # a stopping time the paper leaves open, read from each run's history instead of rerunning per value: each
        # reading runs to its configured `param` (e.g. rounds) and every row in `rows` is judged at every `step` of
        # its history, the cell of the row picked by `select` (history column) == rows[row]; null: none
        "stopping_time": {
            "type": ["object", "null"],
            "default": None,
            "additionalProperties": False,
            "required": ["param", "step", "value", "select", "rows"],
            "properties": {
                "param": {"type": "string", "minLength": 1},
                "step": {"type": "string", "minLength": 1},
                "value": {"type": "string", "minLength": 1},
                "select": {"type": "string", "minLength": 1},
                "rows": {"type": "object", "minProperties": 1},
            },
        },
    },
    "$defs": {"grid": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "array", "minItems": 1}}},
}


def readings(grid: Mapping[str, list] | list[Mapping[str, list]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in order (the last key varies fastest); a list of grids: the
    readings of each in turn."""
    if isinstance(grid, list):
        return [r for g in grid for r in readings(g)]
    keys = list(grid)
    for k in keys:
        n = len(k.split(","))
        bad = [v for v in grid[k] if n > 1 and not (isinstance(v, list) and len(v) == n)]
        if bad:
            raise ConfigError(
                f"forensics: grid axis {k!r} sets {n} parameters together: each value must list {n} "
                f"values, got {bad[0]!r}"
            )
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def _flat(reading: Mapping[str, Any]) -> dict[str, Any]:
    """A reading's parameters by dotted key (a joined axis "a,b" with value [x, y] sets a = x and b = y)."""
    out: dict[str, Any] = {}
    for key, value in reading.items():
        keys = key.split(",")
        out.update(zip(keys, value) if len(keys) > 1 else [(key, value)])
    return out


def _nest(flat: Mapping[str, Any]) -> dict:
    out: dict = {}
    for key, value in _flat(flat).items():
        node = out
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


class Named(dict):
    """A reading (parameter -> value) with the short name ``params.reading_names`` gives it."""

    def __init__(self, reading: Mapping[str, Any], name: str):
        super().__init__(reading)
        self.name = name


def named(grid_readings: list[dict[str, Any]], names: list[str] | None, exp_id: str) -> list[dict[str, Any]]:
    """The grid's readings with their names (``params.reading_names``, one per reading in order), if given."""
    if names is None:
        return grid_readings
    if len(names) != len(grid_readings):
        raise ConfigError(
            f"{exp_id}: params.reading_names: {len(names)} names for the grid's {len(grid_readings)} readings; give "
            "one per reading, in the grid's order (the last axis varies fastest)"
        )
    return [Named(r, n) for r, n in zip(grid_readings, names)]


def reading_text(reading: Mapping[str, Any]) -> str:
    if isinstance(reading, Named):
        return reading.name
    return ", ".join(f"{k}={v}" for k, v in reading.items()) or "the config's reading"


def _point(ctx: RunContext, kind, exp, seed: int, memo: dict, stop: Mapping | None = None) -> dict:
    """Metrics and checks of the swept experiment under one reading and seed (cached in the checkpoint dir, keyed by
    the resolved parameters), and with a ``stop`` (params.stopping_time) its trajectory: select value -> [[step,
    value], ...] read from the run's history."""
    from fedrepro.aggregate import flatten
    from fedrepro.files import atomic_write, to_jsonable
    from fedrepro.provenance import loaded_code
    from fedrepro.seeding import rng_for

    key = _point_key(exp, seed, stop)
    if key in memo:
        return memo[key]
    cache = _point_cache(ctx, key)
    cached = _cached_point(cache)
    if cached is not None:
        memo[key] = cached
        _resume_clock(ctx.clock, cached.get("made"))
        return cached
    # the point's own round checkpoints, in a folder of the job's: a point killed halfway continues from them
    rounds = ctx.checkpoint_dir / key if ctx.checkpoint_dir else None
    point_ctx = RunContext(
        exp_id=exp.id,
        seed=seed,
        data=ctx.data,
        partitions=ctx.partitions,
        checkpoint_dir=rounds,
        clock=ctx.clock,
        config=ctx.config,
        inputs=ctx.inputs,
    )
    out = kind.fn(exp.params, rng_for(exp.id, seed), point_ctx)
    doc = to_jsonable(
        {
            "metrics": flatten(out.metrics),
            "checks": {
                k: {
                    "passed": bool(c.passed),
                    "detail": c.detail,
                    "value": c.value,
                    "expected": c.expected,
                    "tolerance": c.tolerance,
                }
                for k, c in out.checks.items()
            },
        }
    )
    if stop:
        doc["trajectory"] = _trajectory(out.history, stop, exp.id)
    doc["code"] = loaded_code()  # a later attempt reads it only while these files are unchanged
    if ctx.clock is not None:  # which attempt made it, and the job's compute then (a later attempt resumes from it)
        doc["made"] = {"attempt": ctx.clock.attempt, "before_s": ctx.clock.before_s, "elapsed_s": ctx.clock.total_s()}
    memo[key] = doc
    if cache is not None:
        text = json.dumps(doc)
        atomic_write(cache, lambda p: p.write_text(text))
        shutil.rmtree(rounds, ignore_errors=True)  # the cache holds what the point's checkpoints were kept for
    return doc


def _resume_clock(clock, made: Mapping | None) -> None:
    """A cached point read into the job's clock, as a round checkpoint is (fedrepro.runio.RunClock): one an earlier
    attempt made brings that attempt's compute up to then; one this attempt made in a worker, the earlier compute its
    own round checkpoints carried."""
    if clock is None or not made:
        return
    clock.resumed_from(made["before_s"] if made["attempt"] == clock.attempt else made["elapsed_s"])


def _point_key(exp, seed: int, stop: Mapping | None) -> str:
    return f"point_{params_digest(exp.params)}_{seed}" + ("_trajectory" if stop else "")


def _point_cache(ctx: RunContext, key: str) -> Path | None:
    """The job's own checkpoint dir holds one file per (resolved parameters, seed): a cache, not part of the results
    layout."""
    return ctx.checkpoint_dir / f"{key}.json" if ctx.checkpoint_dir else None


def _cached_point(cache: Path | None) -> dict | None:
    """A point's cached result, when there is one made by the present code (fedrepro.provenance.made_by_this_code:
    the files its process had imported unchanged); None: train it (a cache of other code is removed)."""
    from fedrepro.provenance import made_by_this_code

    if cache is None or not cache.is_file():
        return None
    doc = json.loads(cache.read_text())
    if made_by_this_code(doc.get("code"), cache):
        return doc
    cache.unlink(missing_ok=True)
    return None


def _train_in_parallel(ctx: RunContext, jobs: list[tuple[Any, int]], stop: Mapping | None) -> None:
    """Train the points (resolved experiment, seed) that no cache holds yet in parallel processes, one per point up to
    the job's threads (fedrepro.processes); the sweep then reads them from the cache. One thread, one pending point,
    or no checkpoint dir (no cache to hand the results back through): nothing here, the sweep trains them in turn."""
    from fedrepro.learning.engine import replaying
    from fedrepro.processes import map_in_processes, workers_for

    if ctx.checkpoint_dir is None or replaying():  # a replay's round limit is this process's
        return
    pending = [
        (exp, seed) for exp, seed in jobs if _cached_point(_point_cache(ctx, _point_key(exp, seed, stop))) is None
    ]
    workers = workers_for(len(pending))
    if workers < 2:
        return
    print(f"[fedrepro] {ctx.exp_id}: {len(pending)} points in {workers} processes", flush=True)
    labels = [f"point {i + 1}/{len(pending)} (seed {seed})" for i, (_, seed) in enumerate(pending)]
    # each worker's copy of the job's clock stamps its point's cache, which the job then reads (_resume_clock)
    map_in_processes(_point_in_worker, [(ctx, exp, seed, stop) for exp, seed in pending], workers, labels)


def _point_in_worker(ctx: RunContext, exp, seed: int, stop: Mapping | None) -> None:
    _point(ctx, get_kind(exp.kind), exp, seed, {}, stop)


def _run_point(ctx: RunContext, exp, seed: int, stop: Mapping | None) -> dict:
    """The config's reading of one seed read from the swept experiment's own run with these parameters (``only_methods``
    aside: a method trains alike alone or beside the others), in the form of :func:`_point`; a ConfigError naming what
    to build when there is none."""
    from fedrepro.aggregate import flatten
    from fedrepro.config import resolve_experiment
    from fedrepro.runio import read_history, read_metrics
    from fedrepro.staleness import find_run

    params = run_params(exp.params, resolve_experiment(ctx.config, exp.id, "paper").params)
    run = find_run(ctx.config, exp.id, seed, params, f"{ctx.exp_id}: config_reading_from_runs")
    doc = read_metrics(run)
    point = {"metrics": flatten(doc["metrics"]), "checks": doc.get("checks", {}), "run": str(run)}
    if stop:
        point["trajectory"] = _trajectory(read_history(run), stop, exp.id)
    return point


def run_params(reading: Mapping, own: Mapping) -> dict:
    """The parameters of the swept experiment's run that holds the config's reading: the reading's (the config's plus
    ``fixed``) with ``only_methods`` as the experiment's own (``own``, its resolved parameters): null where its kind
    defaults it, absent where the kind states no default."""
    params = {k: v for k, v in reading.items() if k != "only_methods"}
    if "only_methods" in own:
        params["only_methods"] = own["only_methods"]
    return params


def _trajectory(h: pd.DataFrame, stop: Mapping, exp_id: str) -> dict:
    """params.stopping_time's view of a run's history: select value -> [[step, value], ...]."""
    missing = [c for c in (stop["step"], stop["value"], stop["select"]) if c not in h.columns]
    if missing:
        raise ConfigError(f"forensics: stopping_time: {exp_id}'s history has no column {', '.join(missing)}")
    return {
        str(sel): [[float(a), float(b)] for a, b in zip(g[stop["step"]], g[stop["value"]])]
        for sel, g in h.groupby(stop["select"])
    }


def check_distance(c: Mapping) -> float | None:
    """|value - expected| / tolerance of a check that states them (1 is the check's own boundary), else None."""
    value, expected, tol = c.get("value"), c.get("expected"), c.get("tolerance")
    if value is None or expected is None or not tol or tol <= 0:
        return None
    return abs(float(value) - float(expected)) / float(tol)


def judge_row(t, points: list[dict], deterministic: bool) -> dict:
    """One row under one reading, over its seeds: outcome, rebuilt mean/se, diff, tol, distance, detail. For a row
    judged by checks the distance is the largest over its checks and seeds of |value - expected| / tolerance where
    the checks state them (``numeric``), else 0 (holds) / 1 (fails)."""
    from fedrepro.report import verdict as v

    if t.check_names is not None:
        missing = [c for c in t.check_names if any(c not in p["checks"] for p in points)]
        if missing:
            raise ConfigError(f"forensics: row {t.id}: the swept experiment produces no check {', '.join(missing)}")
        failed = [(c, p["checks"][c]["detail"]) for p in points for c in t.check_names if not p["checks"][c]["passed"]]
        dists = [check_distance(p["checks"][c]) for p in points for c in t.check_names]
        numeric = all(d is not None for d in dists)
        distance = max(dists) if numeric else float(bool(failed))
        if numeric and failed:
            distance = max(distance, 1.0)  # a failed check is at or beyond its boundary
        return {
            "outcome": v.DEVIATES if failed else v.REPRODUCED,
            "distance": distance,
            "numeric": numeric,
            "detail": failed[0][1] if failed else "; ".join(points[0]["checks"][c]["detail"] for c in t.check_names),
        }
    if any(t.key not in p["metrics"] for p in points):
        raise ConfigError(f"forensics: row {t.id}: the swept experiment produces no metric {t.key!r}")
    # a metric the run left undefined (None: non-finite, or not to be had from what it read) is judged invalid
    arr = np.asarray([math.nan if p["metrics"][t.key] is None else p["metrics"][t.key] for p in points], dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return judge_metric(t, float(arr.mean()), std, int(arr.size), deterministic)


def judge_metric(t, mean: float, std: float, n: int, deterministic: bool) -> dict:
    """A metric row under one reading from its n seeds' mean and sample std, by the report's rule: the judgement
    :func:`judge_row` records (and :func:`rejudge` rebuilds from the record)."""
    from fedrepro.report import verdict as v

    j = v.judge(t.value, t.pm, t.pm_reading, t.runs, t.tolerance, mean, std, n, deterministic)
    more = (
        v.seeds_to_resolve(t.value, t.pm, t.pm_reading, t.runs, t.tolerance, std, n)
        if j.outcome == v.INCONCLUSIVE
        else 0
    )
    return {
        "more_seeds": more,
        "outcome": j.outcome,
        "rebuilt": mean,
        "se": j.se_rebuilt,
        "n": n,
        "diff": j.diff,
        "tol": j.tol,
        "distance": abs(j.diff) / j.tol if j.tol > 0 else math.inf,  # inf for a non-finite (invalid) rebuild
        "numeric": True,
        "detail": j.why,
    }


def rejudge(
    history: pd.DataFrame,
    targets: Mapping[str, Any],
    deterministic: bool,
    fixes: Mapping[str, str] | None = None,
    issues: Mapping[str, str] | None = None,
) -> dict[str, tuple[Check, list[str]]]:
    """A sweep's conclusions judged again by the report's current rule from its history alone, without training:
    per (reading, row) the history records the rebuilt mean, its standard error and the seeds n, which give the
    seeds' sample std (se * sqrt(n)) that :func:`judge_metric` needs. A row judged by checks involves no tolerance
    rule and keeps its recorded outcome and distance. Returns row id -> (conclusion, the readings whose verdict
    differs from the recorded one, as "reading: old -> new"); rows no longer in ``targets`` (registry id -> row) are
    left out. A stopping-time finding (params.stopping_time) is not in the history: its rows' conclusions here are
    the configured stopping time's only."""
    axes = [c for c in history.columns if c.startswith("axis.")]
    grid: dict[int, dict] = {}
    judged: dict[str, list[tuple[dict, dict]]] = {}
    changed: dict[str, list[str]] = {}
    for rec in history.sort_values("reading", kind="stable").to_dict("records"):
        t = targets.get(rec["row"])
        if t is None:
            continue
        i = int(rec["reading"])
        if i not in grid:
            axis_values = {c[len("axis.") :]: rec[c] for c in axes if pd.notna(rec[c])}
            grid[i] = Named(axis_values, rec["reading_text"]) if i else {}
        if pd.notna(rec["n"]):  # a metric row: judged again from its record
            n = int(rec["n"])
            se = float(rec["se"])
            j = judge_metric(t, float(rec["rebuilt"]), se * math.sqrt(n) if n > 1 else 0.0, n, deterministic)
        else:  # a row judged by checks: as recorded
            j = {k: rec[k] for k in ("outcome", "distance", "detail")} | {"numeric": bool(rec["numeric"])}
        judged.setdefault(t.id, []).append((grid[i], j))
        if j["outcome"] != rec["outcome"]:
            changed.setdefault(t.id, []).append(f"{rec['reading_text']}: {rec['outcome']} -> {j['outcome']}")
    fixes, issues = fixes or {}, issues or {}
    return {
        rid: (conclusion(targets[rid], js, fixes.get(rid), issues.get(rid)), changed.get(rid, []))
        for rid, js in judged.items()
    }


def _rejudge_run(p: dict, history: pd.DataFrame, targets: Mapping[str, Any], doc: Mapping) -> dict:
    """The kind's ``rejudge``: :func:`rejudge` of one sweep run's history with the swept experiment's determinism
    (from the paper's config ``doc``), its rows with a stopping-time finding (not in the history) left out."""
    swept = doc["experiments"].get(p["experiment"])
    if swept is None:
        return {}
    stop = set((p.get("stopping_time") or {}).get("rows") or ())
    found = rejudge(
        history, targets, get_kind(swept["kind"]).deterministic, p.get("implementation_fix"), p.get("paper_issue")
    )
    return {row: found[row] for row in found if row not in stop}


def conclusion(t, judged: list[tuple[dict, dict]], fix: str | None, issue: str | None) -> Check:
    """The row's conclusion over the readings (judged: (reading, judgement) pairs, the config's reading first)."""
    from fedrepro.report import verdict as v

    n = len(judged)
    good = [(r, j) for r, j in judged if j["outcome"] == v.REPRODUCED]
    config_j = judged[0][1]
    at_config = (
        "at the config's reading" if not judged[0][0] else f"at the config's reading ({reading_text(judged[0][0])})"
    )

    def value(j):
        if "rebuilt" not in j:
            return j["detail"] + (
                f" (distance {j['distance']:.3g}, 1 = the check's boundary)"
                if j["numeric"] and j["outcome"] != v.REPRODUCED
                else ""
            )
        undecided = f" ({j['outcome']}: {j['detail']})" if j["outcome"] not in (v.REPRODUCED, v.DEVIATES) else ""
        return (
            f"{j['rebuilt']:.4g} ± {j['se']:.2g} (n={j['n']}) vs printed {t.value_text}: |diff| {abs(j['diff']):.3g}"
            f" vs tol {j['tol']:.3g}{undecided}"
        )

    if good and all(j["numeric"] for _, j in good):
        best_r, best_j = min(good, key=lambda rj: rj[1]["distance"])
        text = (
            f"reproduced under {len(good)} of {n} readings; closest: {reading_text(best_r)}: {value(best_j)}; "
            f"{at_config}: {config_j['outcome']}"
        )
    elif good:  # pass/fail checks: the readings under which it holds (the first few), none 'closest'
        names = "; ".join(reading_text(r) if r else "the config's" for r, _ in good[:6])
        more = f"; and {len(good) - 6} more" if len(good) > 6 else ""
        text = (
            f"reproduced under {len(good)} of {n} readings: {names}{more} (first: {value(good[0][1])}); "
            f"{at_config}: {config_j['outcome']}"
        )
    elif all(j["numeric"] for _, j in judged):
        # the wording rule (fedrepro.report.verdict.CONCLUSION_RULE_TEXT): "no reading reproduces it" only when the
        # reading nearest the printed value is resolved; else the conclusion is inconclusive under that reading
        decided = [(r, j) for r, j in judged if j["outcome"] == v.DEVIATES]
        valued = [(r, j) for r, j in judged if "diff" in j and math.isfinite(j["diff"])]
        near_r, near_j = min(valued or judged, key=lambda rj: abs(rj[1].get("diff", math.inf)))
        if near_j["outcome"] == v.DEVIATES or not valued:
            best_r, best_j = min(decided or judged, key=lambda rj: rj[1]["distance"])
            text = (
                f"no reading of the {n} in the ranges reproduces it (closest: {reading_text(best_r)} at distance "
                f"{best_j['distance']:.3g}, resolved): {value(best_j)}"
            )
        else:
            more = near_j.get("more_seeds")
            todo = "more seeds cannot resolve it" if more is None else f"run {more} more"
            text = (
                f"inconclusive under {reading_text(near_r)} ({near_j.get('n', 1)} seeds; {todo}): {value(near_j)}; "
                f"no reading of the {n} is resolved as reproducing it"
            )
            if decided:
                best_r, best_j = min(decided, key=lambda rj: rj[1]["distance"])
                text += f"; closest resolved: {reading_text(best_r)} at distance {best_j['distance']:.3g}"
    else:  # pass/fail checks without a distance: no reading is 'closest'
        text = f"no reading of the {n} in the ranges reproduces it; {at_config}: {value(config_j)}"
    if fix:
        text = f"implementation fixed: {fix}; {text}"
    if issue:
        text = f"{text}; paper issue: {issue}"
    return Check(bool(good), text)


def _spans(steps: list[float]) -> str:
    """Sorted steps as runs of consecutive integers: [27, 28, 29, 35] -> "27-29, 35"."""
    out: list[list[float]] = []
    for x in steps:
        if out and x == out[-1][1] + 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return ", ".join(f"{a:g}" if a == b else f"{a:g}-{b:g}" for a, b in out)


def stopping_steps(t, points: list[dict], stop: Mapping, deterministic: bool) -> dict:
    """Row ``t`` along the history's steps, over the points' seeds: ``good``, the steps at which the report's rule
    reproduces it; ``crossings``, (step a, step b, mean at a, mean at b) where the seeds' mean passes the printed
    value between two consecutive steps."""
    from fedrepro.report import verdict as v

    cell = str(stop["rows"][t.id])
    series = [dict((a, b) for a, b in p["trajectory"].get(cell, [])) for p in points]
    if not all(series):
        raise ConfigError(f"forensics: stopping_time: row {t.id}: no history rows with {stop['select']} = {cell}")
    good, means = [], []
    for step in sorted(set.intersection(*(set(x) for x in series))):
        arr = np.asarray([x[step] for x in series], dtype=float)
        std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
        j = v.judge(t.value, t.pm, t.pm_reading, t.runs, t.tolerance, float(arr.mean()), std, arr.size, deterministic)
        if j.outcome == v.REPRODUCED:
            good.append(step)
        means.append((step, float(arr.mean())))
    crossings = [(a, b, ma, mb) for (a, ma), (b, mb) in zip(means, means[1:]) if (ma - t.value) * (mb - t.value) < 0]
    return {"good": good, "crossings": crossings}


def stopping_text(stop: Mapping, grid: list[dict], found: list[dict]) -> str:
    """One row's stopping-time finding over the readings (found[i]: stopping_steps under reading i): where it is
    reproduced, and under a reading where it is not, where the mean passes the printed value between two steps."""
    parts = []
    for i, f in enumerate(found):
        where = f"under {reading_text(grid[i]) if i else 'the config'}"
        if f["good"]:
            parts.append(f"reproduced at {stop['param']} {_spans(f['good'])} {where}")
        elif f["crossings"]:
            cross = ", ".join(f"{a:g}-{b:g} ({ma:.4g} -> {mb:.4g})" for a, b, ma, mb in f["crossings"][:3])
            parts.append(f"never within tolerance {where}: passes the printed value between {stop['param']} {cross}")
        else:
            parts.append(f"never reaches the printed value {where}")
    return f"stopping time {stop['param']} (unstated; every {stop['step']} of each reading's run): " + "; ".join(parts)


def quick_settings(cfg: Mapping, swept_id: str, resolved: list) -> list[str]:
    """The parameters at which some reading ran the swept experiment at its quick value rather than its paper value
    (its ``quick:`` overrides, top-level keys): a sweep whose quick grid sets them (e.g. 5 rounds of 1 local epoch) is
    a wiring check; one that only thins its readings, seeds or panels still runs each reading at paper settings."""
    from fedrepro.config import load_paper, resolve_experiment

    paper, name = swept_id.split(".", 1)
    quick = load_paper(cfg, paper)["experiments"][name].get("quick") or {}
    at_paper = resolve_experiment(cfg, swept_id, "paper").params
    return sorted(
        {
            k
            for exp in resolved
            for k, value in quick.items()
            if k in exp.params and exp.params[k] == value and at_paper.get(k) != value
        }
    )


# the registry fields a sweep's conclusions depend on (a note or a caption edited changes none of them)
JUDGED_FIELDS = ("value", "pm", "pm_reading", "runs", "tolerance", "key", "row", "experiment")


def swept_inputs(p: dict, cfg: Mapping, exp_id: str) -> dict:
    """What a sweep reads besides its parameters: the swept experiment's resolved parameters at both scales (the
    readings train from its paper ones; a sweep that reads its runs reads them at the scale they ran at) and the
    registry rows it explains, as far as they are judged. The workflow reruns the sweep when this changes, and a
    run of it made before is stale (fedrepro.staleness: ``reads_digest``)."""
    from fedrepro.config import resolve_experiment, resolve_path
    from fedrepro.files import to_jsonable
    from fedrepro.report.registry import load_registry

    paper = exp_id.split(".", 1)[0]
    swept = f"{paper}.{p['experiment']}"
    params = {scale: to_jsonable(resolve_experiment(cfg, swept, scale).params) for scale in ("paper", "quick")}
    targets = {
        t.id: {k: getattr(t, k) for k in JUDGED_FIELDS}
        for t in load_registry(resolve_path(cfg["targets"][paper]), paper)
        if t.id in set(p["rows"])
    }
    return {"experiment": params, "rows": targets}


@experiment_kind(
    "forensic_sweep",
    SCHEMA,
    deterministic=True,  # its seeds are params, not the rng
    metrics=(
        "n_readings",
        "reproducing_readings.*",
        "closest_distance.*",
        "joint_readings",
        "stopping_steps.*",
        "swept_at_quick_settings",
        "verdict_rule",
    ),
    checks=("conclusion.*", "joint", "stopping_time.joint"),
    reads=swept_inputs,
    forensic=True,
    # a sweep that re-evaluates the swept experiment's kept final models reads its runs (no training), and so does
    # one whose config reading is those runs
    reads_runs=lambda p: (
        p["experiment"] if "reevaluate" in (p.get("fixed") or {}) or p.get("config_reading_from_runs") else None
    ),
    # only a re-evaluation trains nothing: a sweep that trains its other readings keeps its own default scale
    reads_only=lambda p: "reevaluate" in (p.get("fixed") or {}),
    rejudge=_rejudge_run,
    annotations=("paper_issue", "implementation_fix"),
)
def forensic_sweep(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    from fedrepro.config import deep_merge, resolve_experiment, resolve_path
    from fedrepro.report.registry import load_registry

    if ctx.config is None:
        raise ConfigError(
            f"{ctx.exp_id}: a forensic sweep needs the global configuration (run it with `python -m fedrepro run`)"
        )
    cfg = ctx.config
    paper = ctx.exp_id.split(".", 1)[0]
    swept_id = f"{paper}.{p['experiment']}"
    targets = {t.id: t for t in load_registry(resolve_path(cfg["targets"][paper]), paper)}
    unknown = [r for r in p["rows"] if r not in targets]
    if unknown:
        raise ConfigError(f"{ctx.exp_id}: params.rows: no registry row {', '.join(unknown)}")
    rows = [targets[r] for r in p["rows"]]
    wrong = [t.id for t in rows if t.experiment != swept_id]
    if wrong:
        raise ConfigError(
            f"{ctx.exp_id}: params.rows: {', '.join(wrong)} are rows of another experiment than {swept_id}"
        )
    # the config's own reading first; a grid reading that resolves to the parameters of an earlier one (e.g. the
    # config's values) is that reading, counted once
    grid, resolved, seen = [], [], set()
    for reading in [{}] + named(readings(p["grid"]), p.get("reading_names"), ctx.exp_id):
        exp = resolve_experiment(cfg, swept_id, "paper", deep_merge(p["fixed"], _nest(reading)))
        if params_digest(exp.params) not in seen:
            seen.add(params_digest(exp.params))
            grid.append(reading)
            resolved.append(exp)
    at_quick = quick_settings(cfg, swept_id, resolved)
    seeds = p["seeds"]
    stop = p["stopping_time"]
    stop_rows = [t for t in rows if stop and t.id in stop["rows"]]
    if stop and len(stop_rows) != len(stop["rows"]):
        raise ConfigError(f"{ctx.exp_id}: params.stopping_time.rows: {', '.join(sorted(stop['rows']))} must be in rows")
    table, per_row, memo = [], {t.id: [] for t in rows}, {}
    stop_steps: dict[str, list[dict]] = {t.id: [] for t in stop_rows}

    def point_seeds(exp) -> list[int]:
        return seeds[:1] if get_kind(exp.kind).deterministic else seeds

    trains = resolved[1:] if p["config_reading_from_runs"] else resolved
    _train_in_parallel(ctx, [(exp, s) for exp in trains for s in point_seeds(exp)], stop)
    for i, (reading, exp) in enumerate(zip(grid, resolved)):
        kind = get_kind(exp.kind)
        if i == 0 and p["config_reading_from_runs"]:
            points = [_run_point(ctx, exp, s, stop) for s in point_seeds(exp)]
        else:
            points = [_point(ctx, kind, exp, s, memo, stop) for s in point_seeds(exp)]
        for t in stop_rows:
            stop_steps[t.id].append(stopping_steps(t, points, stop, kind.deterministic))
        for t in rows:
            j = judge_row(t, points, kind.deterministic)
            per_row[t.id].append((reading, j))
            table.append(
                {
                    "reading": i,
                    "reading_text": reading_text(reading) if i else "config",
                    **{f"axis.{k}": str(v) for k, v in reading.items()},
                    "row": t.id,
                    "printed": t.value if t.value is not None else np.nan,
                    **{k: j.get(k, np.nan) for k in ("rebuilt", "se", "n", "diff", "tol", "distance")},
                    "numeric": j["numeric"],
                    "outcome": j["outcome"],
                    "detail": j["detail"],
                }
            )
    checks = {
        f"conclusion.{t.id}": conclusion(
            t, per_row[t.id], p["implementation_fix"].get(t.id), p["paper_issue"].get(t.id)
        )
        for t in rows
    }
    for t in stop_rows:  # the stopping time is a reading too: reproduced at some step under some reading is said first
        c, found = checks[f"conclusion.{t.id}"], any(f["good"] for f in stop_steps[t.id])
        at_param = f"at {stop['param']} as configured: "
        checks[f"conclusion.{t.id}"] = Check(
            c.passed or found, f"{stopping_text(stop, grid, stop_steps[t.id])}; {at_param}{c.detail}"
        )
    if stop_rows:
        common = [
            sorted(set.intersection(*(set(stop_steps[t.id][i]["good"]) for t in stop_rows))) for i in range(len(grid))
        ]
        fits = [
            f"{stop['param']} {_spans(c)} under {reading_text(grid[i]) if i else 'the config'}"
            for i, c in enumerate(common)
            if c
        ]
        names = ", ".join(t.id for t in stop_rows)
        checks["stopping_time.joint"] = Check(
            bool(fits),
            f"one {stop['param']} reproduces all of {names} at once: {'; '.join(fits)}"
            if fits
            else f"no single {stop['param']} reproduces all of {names} under any of the {len(grid)} readings",
        )
    from fedrepro.report.verdict import REPRODUCED, RULE_VERSION

    joint = [i for i in range(len(grid)) if all(per_row[t.id][i][1]["outcome"] == REPRODUCED for t in rows)]
    checks["joint"] = Check(
        bool(joint),
        (
            f"{len(joint)} of {len(grid)} readings reproduce every row at once: "
            + "; ".join(reading_text(grid[i]) if i else "config" for i in joint[:5])
        )
        if joint
        else f"no reading of the {len(grid)} reproduces every row at once",
    )
    metrics = {
        "n_readings": len(grid),
        "reproducing_readings": {t.id: sum(j["outcome"] == REPRODUCED for _, j in per_row[t.id]) for t in rows},
        "closest_distance": {t.id: min(j["distance"] for _, j in per_row[t.id]) for t in rows},
        "joint_readings": len(joint),
        # 1: the readings ran the swept experiment at (some of) its quick settings: a wiring check, no evidence on
        # the paper's numbers (the report and ci-check say so); 0: at its paper settings (on a grid perhaps reduced)
        "swept_at_quick_settings": float(bool(at_quick)),
        # the tolerance rule its conclusions were judged under (the report flags an older one)
        "verdict_rule": RULE_VERSION,
    }
    if stop_rows:
        metrics["stopping_steps"] = {t.id: sum(len(f["good"]) for f in stop_steps[t.id]) for t in stop_rows}
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(table),
        checks=checks,
        accountant={"name": f"forensic sweep of {swept_id}", "version": "see the swept experiment"},
    )


__all__ = [
    "check_distance",
    "conclusion",
    "forensic_sweep",
    "judge_metric",
    "judge_row",
    "readings",
    "rejudge",
    "swept_inputs",
]
