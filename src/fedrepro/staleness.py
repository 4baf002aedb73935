"""Whether a run (or a summary of runs) is still what the configuration and the data here ask for.

A run records the digest of its resolved parameters (``params_digest``) and the digests of the input data it read
(``inputs``: per dataset file its verified sha256, per partition the sha256 of its manifest; fedrepro.provenance). It
is *stale* when either no longer matches: the experiment's parameters, resolved now at the run's scale, digest to
something else (a value changed in ``config/<paper>.yaml``, or a schema default), or a dataset file is pinned or was
verified here with another sha256, or a partition built here has another manifest, or its kind's code changed what
it computes since (``kind_revision`` below the kind's ``revision``: fedrepro.experiments.experiment_kind). What
cannot be known here is not held against a run: a dataset never fetched here has no recorded digest to compare with
(a pinned file always has one), and a partition not built here has no manifest. Runs written before these fields
were recorded are compared on what they hold (one without ``kind_revision``: its kind's first revision).

The report never judges a stale run (fedrepro.report.status) and the results archive never restores one
(fedrepro.archive); both name what changed. A kind that reads another experiment's runs (a forensic sweep, a
re-evaluation of kept models) takes only one whose inputs are the data here (:func:`find_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from fedrepro import paths
from fedrepro.config import Experiment, resolve_experiment
from fedrepro.data import fedformat
from fedrepro.data.sources import expected_digests
from fedrepro.errors import ConfigError
from fedrepro.experiments import get_kind
from fedrepro.provenance import params_digest
from fedrepro.runio import CONFIG, METRICS, read_metrics


def current_inputs(cfg: Mapping, exp: Experiment) -> dict[str, dict[str, Any]]:
    """The inputs record (fedrepro.provenance.input_digests' shape) a run of ``exp`` made here now would write, as far
    as it can be known without reading the data: the datasets' pinned or recorded digests, the manifests of the
    partitions built here."""
    partitions = {}
    for name in exp.partitions:
        d = paths.partition_dir(cfg, name)
        if (d / fedformat.MANIFEST).is_file():
            partitions[name] = fedformat.manifest_digest(d)
    return {"datasets": {d: expected_digests(cfg, d) for d in exp.datasets}, "partitions": partitions}


def changed_inputs(recorded: Mapping, current: Mapping) -> list[str]:
    """The inputs a run read that differ from what is here now, in words; an input not knowable here (a dataset
    never fetched here, a partition not built) is not compared."""
    out = []
    for dataset, files in sorted((recorded.get("datasets") or {}).items()):
        now = current.get("datasets", {}).get(dataset, {})
        for name, digest in sorted(files.items()):
            if name in now and now[name] != digest:
                out.append(
                    f"dataset {dataset} file {name} (the run read sha256 {digest[:12]}…, here {now[name][:12]}…)"
                )
    for name, digest in sorted((recorded.get("partitions") or {}).items()):
        now = current.get("partitions", {}).get(name)
        if now is not None and now != digest:
            out.append(f"partition {name} (the run read manifest {digest[:12]}…, built here {now[:12]}…)")
    return out


def changed_params(recorded: Any, current: Any, prefix: str = "") -> list[str]:
    """The parameters (dotted keys) whose values differ between two resolved parameter trees, e.g.
    ``["n: 14 -> 40"]``."""
    if isinstance(recorded, Mapping) and isinstance(current, Mapping):
        return [
            change
            for key in sorted(set(recorded) | set(current), key=str)
            for change in changed_params(recorded.get(key, "(absent)"), current.get(key, "(absent)"), f"{prefix}{key}.")
        ]
    if params_digest({"v": recorded}) == params_digest({"v": current}):  # numbers by value, as the digest reads them
        return []
    return [f"{prefix.rstrip('.')}: {recorded!r} -> {current!r}"]


def _recorded(run_dir: Path | None, key: str) -> Mapping | None:
    """The run's config.yaml entry ``key`` (``params``, or ``reads``: what its kind read besides them)."""
    if run_dir is None or not (run_dir / CONFIG).is_file():
        return None
    try:
        doc = yaml.safe_load((run_dir / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return doc.get(key) if isinstance(doc, dict) else None


def recorded_params(run_dir: Path | None) -> Mapping | None:
    """The resolved parameters the run in ``run_dir`` recorded (its config.yaml), None where it has none."""
    return _recorded(run_dir, "params")


def reworded(kind, recorded: Mapping | None, current: Mapping) -> list[str]:
    """The kind's annotations (parameters that only word its conclusions) that read otherwise in ``current`` than in
    the ``recorded`` parameters, when nothing else differs; [] when something else does, or nothing, or the record is
    missing (then the parameters' digests decide)."""
    if recorded is None or not kind.annotations:
        return []

    def rest(p: Mapping) -> str:
        return params_digest({k: v for k, v in p.items() if k not in kind.annotations})

    if rest(recorded) != rest(current):
        return []
    return [k for k in kind.annotations if changed_params(recorded.get(k), current.get(k))]


def _changes(recorded: Mapping | None, current: Mapping) -> str:
    what = changed_params(recorded, current) if recorded is not None else []
    return "; ".join(what[:4]) + (f"; {len(what) - 4} more" if len(what) > 4 else "")


def stale_reasons(cfg: Mapping, doc: Mapping, run_dir: Path | None = None) -> list[str]:
    """Why the run or summary ``doc`` (a metrics.json or summary.json) is no longer what the configuration and the
    data here ask for; [] when it still is. ``run_dir``: a run directory of it, whose config.yaml names the
    parameters that changed."""
    try:
        exp = resolve_experiment(cfg, doc["experiment"], doc["scale"])
    except ConfigError as exc:  # the experiment is gone or its config no longer resolves
        return [f"{doc['experiment']} no longer resolves in the configuration ({exc})"]
    reasons = []
    kind = get_kind(exp.kind)
    if "params_digest" in doc and doc["params_digest"] != params_digest(exp.params):
        recorded = recorded_params(run_dir)
        # only the run's own record (its digest the doc's) can show that just the wording changed
        own = recorded if recorded is not None and params_digest(recorded) == doc["params_digest"] else None
        if not reworded(kind, own, exp.params):
            detail = _changes(recorded, exp.params)
            reasons.append(
                f"made under other parameters (params_digest {doc['params_digest']}, the config now gives "
                f"{params_digest(exp.params)}{': ' + detail if detail else ''})"
            )
    reads = kind.read_inputs(exp.params, cfg, exp.id) if "reads_digest" in doc else None
    if reads is not None:  # e.g. a sweep whose swept experiment changed since
        if doc["reads_digest"] != params_digest(reads):
            detail = _changes(_recorded(run_dir, "reads"), reads)
            reasons.append(
                f"made from another version of what it reads besides its parameters (reads_digest "
                f"{doc['reads_digest']}, now {params_digest(reads)}{': ' + detail if detail else ''})"
            )
    made = int(doc.get("kind_revision") or 1)  # a run that predates the record: the kind's first revision
    if made < kind.revision:
        reasons.append(
            f"made by revision {made} of what kind {exp.kind} computes, which is at revision {kind.revision} now: "
            + "; ".join(kind.changes_since(made))
        )
    records = doc.get("inputs")
    records = records if isinstance(records, list) else [records] if isinstance(records, Mapping) else []
    current = current_inputs(cfg, exp) if records else {}
    changed = sorted({c for r in records if isinstance(r, Mapping) for c in changed_inputs(r, current)})
    if changed:
        reasons.append(f"made from other input data than is here now: {'; '.join(changed)}")
    return reasons


def find_run(cfg: Mapping, exp_id: str, seed: int, params: Mapping, needed_by: str) -> Path:
    """The complete run directory of ``exp_id`` ``seed`` (paper scale, then quick) whose recorded parameters digest
    as ``params`` do and whose input data is the data here (:func:`changed_inputs`): how a kind that reads another
    experiment's runs finds the one made with given parameters, whichever scale's those are. None such is a
    ConfigError in one line: ``needed_by`` (who reads it), what to build, and why a run found there does not serve."""
    paper, name = exp_id.split(".", 1)
    want = params_digest(params)
    refused = []
    for scale in ("paper", "quick"):
        run = paths.run_dir(cfg, paper, name, scale, seed)
        if not (run / CONFIG).is_file() or not (run / METRICS).is_file():
            continue
        recorded = recorded_params(run)
        if recorded is None or params_digest(recorded) != want:
            refused.append(f"{run}: {'other parameters' if recorded is not None else f'no readable {CONFIG}'}")
            continue
        now = current_inputs(cfg, _resolved(cfg, exp_id, scale))
        changed = changed_inputs(read_metrics(run).get("inputs") or {}, now)
        if changed:
            refused.append(f"{run}: made from other input data than is here now ({'; '.join(changed)})")
            continue
        return run
    raise ConfigError(
        f"{needed_by} needs a run of {exp_id} seed {seed} with these parameters, made from the data here, under "
        f"{paths.run_dir(cfg, paper, name, '<scale>', seed)}{' (' + '; '.join(refused) + ')' if refused else ''}: "
        f"build it first (`snakemake --cores 2 {paths.relative(cfg, 'summary', paper=paper, exp=name, scale='paper')}`"
        ", or restore it from the archive)"
    )


def _resolved(cfg: Mapping, exp_id: str, scale: str) -> Experiment:
    try:
        return resolve_experiment(cfg, exp_id, scale)
    except ConfigError as exc:
        raise ConfigError(f"{exp_id} no longer resolves in the configuration ({exc})") from None
