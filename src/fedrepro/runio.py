"""Writing and reading the files of one run, atomically.

A run directory holds ``metrics.json`` (metrics, checks and run facts: seed, scale, wall time, accountant,
versions, and its provenance: parameter digest, code version, input data, see fedrepro.provenance),
``history.parquet`` (per-round / per-grid-point rows) and ``config.yaml`` (the resolved experiment).
Each file is written to a temporary name in the same directory and renamed into place, and ``metrics.json`` is
written last, so a killed run never leaves a file that looks complete.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import fedrepro
from fedrepro import paths
from fedrepro.config import Experiment, validate
from fedrepro.errors import ResultError
from fedrepro.experiments import RunOutput
from fedrepro.files import atomic_write, to_jsonable
from fedrepro.provenance import code_version, machine, misplaced, params_digest

METRICS = "metrics.json"
HISTORY = "history.parquet"
CONFIG = "config.yaml"
ARRAYS = "arrays.npz"  # a run's small arrays (RunOutput.arrays), when it has any
ARCHIVED = "archived.json"  # beside a run restored from the results archive (fedrepro.archive): where it came from


def write_json(path: Path, obj: Any) -> None:
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n"
    atomic_write(path, lambda p: p.write_text(text))


VERSIONED = ("numpy", "scipy", "pandas", "pyarrow", "scikit-learn", "torch", "dp-accounting", "opacus")


def versions() -> dict[str, str]:
    """Versions of the interpreter and of the installed numerical packages (read from metadata, not imported)."""
    out = {"fedrepro": fedrepro.__version__, "python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


class RunClock:
    """The compute time of one run across kills and resumes.

    Each round checkpoint carries the run's total at the moment it was saved (``elapsed_s``, see
    fedrepro.learning.checkpoint); a resumed attempt adds its own wall time to the largest total among the
    checkpoints it resumed from. Work a killed attempt did after its last checkpoint is lost, redone, and counted once.
    A run's worker processes get copies: perf_counter is the system's monotonic clock, so a copy measures from the
    attempt's start too; ``attempt`` tells what this attempt made from what an earlier one left (a forensic sweep's
    cached points).
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")  # this attempt's start (UTC)
        self.attempt = uuid.uuid4().hex
        self.load_avg_at_start = machine()["load_avg"]
        self.before_s = 0.0  # earlier attempts' compute, up to the newest checkpoint resumed from
        # the earlier attempts at this run (their code version and start), as its checkpoint record lists them
        self.earlier_attempts: list[dict] = []

    def this_attempt_s(self) -> float:
        return time.perf_counter() - self._start

    def total_s(self) -> float:
        return self.before_s + self.this_attempt_s()

    @property
    def resumed(self) -> bool:
        return self.before_s > 0

    def resumed_from(self, elapsed_s: float) -> None:
        self.before_s = max(self.before_s, float(elapsed_s))


def write_run(
    out_dir: Path,
    exp: Experiment,
    seed: int,
    output: RunOutput,
    wall_time_s: float,
    resumed_wall_time_s: float | None = None,
    inputs: dict | None = None,
    clock: RunClock | None = None,
    reads: dict | None = None,
    kind_revision: int | None = None,
) -> None:
    """``wall_time_s``: the run's compute across resumes; ``resumed_wall_time_s``: the part done by the attempt that
    resumed and finished it (None when it ran in one go); ``inputs``: the digests of the input data it read
    (fedrepro.provenance.input_digests; None: it read none); ``clock``: the run's, for when the attempt that
    finished it started (``started_at``) and the machine's load then (``machine``: fedrepro.provenance.machine at
    the end, the threads the run used included, with the load average at the start beside it); ``reads``: what its
    kind reads besides its parameters (Kind.read_inputs: a forensic sweep's swept experiment and registry rows), kept in
    config.yaml and as ``reads_digest`` so that the run goes stale when that changes (fedrepro.staleness);
    ``kind_revision``: the revision of what its kind computes (Kind.revision), stale when the kind changes. A run made
    here over one the workflow restored (its archived run gone stale) leaves none of that run's files behind: neither
    its ``archived.json``, which would call this run archived, nor arrays this run does not write."""
    out_dir = Path(out_dir)
    (out_dir / ARCHIVED).unlink(missing_ok=True)
    if not output.arrays:
        (out_dir / ARRAYS).unlink(missing_ok=True)
    resolved = {
        "experiment": exp.id,
        "kind": exp.kind,
        "description": exp.description,
        "scale": exp.scale,
        "effective_scale": exp.effective_scale,
        "seed": seed,
        "params": exp.params,
        "paper_params": exp.paper_params,
        "datasets": list(exp.datasets),
        **({} if reads is None else {"reads": reads}),
    }
    cfg_text = yaml.safe_dump(to_jsonable(resolved, keep_infinite=True), sort_keys=False)
    atomic_write(out_dir / CONFIG, lambda p: p.write_text(cfg_text))
    history = output.history if output.history is not None else pd.DataFrame()
    atomic_write(out_dir / HISTORY, lambda p: history.to_parquet(p, engine="pyarrow", index=False))
    if output.arrays:
        arrays = {k: np.ascontiguousarray(v) for k, v in output.arrays.items()}

        def save(path: Path) -> None:
            with open(path, "wb") as f:  # a file object: given a name np.savez adds ".npz" to it
                np.savez_compressed(f, **arrays)

        atomic_write(out_dir / ARRAYS, save)
    doc = {
        "experiment": exp.id,
        "kind": exp.kind,
        "seed": seed,
        "scale": exp.scale,
        "effective_scale": exp.effective_scale,
        "metrics": output.metrics,
        "checks": {k: asdict(v) for k, v in output.checks.items()},
        "accountant": output.accountant,
        "wall_time_s": wall_time_s,
        "wall_time_resumed_s": resumed_wall_time_s,
        **(
            {}
            if clock is None
            else {
                "started_at": clock.started_at,
                "machine": {**machine(), "load_avg_at_start": clock.load_avg_at_start},
                # a resumed run continued checkpoints that these attempts made, each with the code it then ran
                # (a checkpoint is resumed only while the files its process had imported are unchanged)
                **({"earlier_attempts": clock.earlier_attempts} if clock.resumed and clock.earlier_attempts else {}),
            }
        ),
        "versions": versions(),
        "params_digest": params_digest(exp.params),
        **({} if reads is None else {"reads_digest": params_digest(reads)}),
        **({} if kind_revision is None else {"kind_revision": kind_revision}),
        "code_version": code_version(),
        "inputs": inputs or {},
        "deterministic": exp.deterministic,
        "undefined_ok": list(output.undefined_ok),
    }
    write_json(out_dir / METRICS, doc)


# What readers of the result files rely on (other keys may be present): a file that lacks it stops with one
# ResultError naming the file and the key, instead of a KeyError deep in the report.
_CHECKS = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "required": ["passed", "detail"],
        "properties": {"passed": {"type": "boolean"}, "detail": {"type": "string"}},
    },
}
_RUN_FACTS = {
    "experiment": {"type": "string"},
    "kind": {"type": "string"},
    "scale": {"type": "string"},
    "effective_scale": {"type": "string"},
    "wall_time_s": {"type": "number"},
    "versions": {"type": "object"},
    "checks": _CHECKS,
    # provenance (fedrepro.provenance): absent from results written before it was recorded, which stay valid
    "params_digest": {"type": "string", "minLength": 1},
}
METRICS_SCHEMA = {
    "type": "object",
    "required": [
        "experiment",
        "kind",
        "seed",
        "scale",
        "effective_scale",
        "metrics",
        "checks",
        "wall_time_s",
        "versions",
    ],
    "properties": {
        **_RUN_FACTS,
        "seed": {"type": "integer", "minimum": 0},
        "metrics": {"type": "object"},
        "code_version": {"type": "string"},
        "inputs": {"type": "object"},
    },
}
SUMMARY_SCHEMA = {  # written by fedrepro.aggregate.summarize
    "type": "object",
    "required": [
        "experiment",
        "kind",
        "scale",
        "effective_scale",
        "seeds",
        "metrics",
        "checks",
        "wall_time_s",
        "versions",
    ],
    "properties": {
        **_RUN_FACTS,
        "seeds": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        "code_versions": {"type": "array", "items": {"type": "string"}},  # the distinct ones of its runs
        "inputs": {"type": "array", "items": {"type": "object"}},  # the distinct input records of its runs
        "metrics": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["mean", "std"],
                "properties": {"mean": {"type": ["number", "null"]}, "std": {"type": ["number", "null"]}},
            },
        },
    },
}
REBUILD = "delete it and run the workflow again (`snakemake --cores 2`) to rebuild it"


def read_result_json(path: Path, schema: dict, what: str, place: dict[str, str] | None = None) -> dict:
    """A JSON result file, checked against ``schema``; a missing, unreadable or incomplete file is a ResultError
    naming it (``what``: e.g. "run metrics file") and how to rebuild it, and so is one whose experiment, scale or
    seed is not the one of ``place`` (fedrepro.paths.place: where it sits; None: not checked)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultError(f"{path}: {what} not found; run the workflow (`snakemake --cores 2`) to build it") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultError(f"{path}: not a valid {what} ({exc}); {REBUILD}") from None
    validate(doc, schema, source=str(path), error=ResultError, fix=REBUILD, finite=False)
    wrong = misplaced(doc, place) if place else None
    if wrong:
        raise ResultError(f"{path}: {wrong}: a result written with another --out, or copied there; {REBUILD}")
    return doc


def read_metrics(run_dir: Path) -> dict:
    """A run's metrics.json; a run laid out as ``<paper>/<exp>/<scale>/seed<N>`` must record that experiment, scale
    and seed."""
    return read_result_json(
        Path(run_dir) / METRICS, METRICS_SCHEMA, "run metrics file", paths.place(run_dir, "run_dir")
    )


def read_summary(path: Path, check_place: bool = True) -> dict:
    """A summary.json; one laid out as ``<paper>/<exp>/<scale>/summary.json`` must record that experiment and scale
    (``check_place=False``: the caller checks, e.g. the report, which marks the rows it feeds invalid)."""
    place = paths.place(path, "summary") if check_place else None
    return read_result_json(Path(path), SUMMARY_SCHEMA, "summary over seeds", place)


def read_archived(run_dir: Path) -> dict | None:
    """The ``archived.json`` of a run directory (a run the workflow restored from the results archive: the archive
    directory, the machine and time it was made, its code version), or None (a run made here)."""
    path = Path(run_dir) / ARCHIVED
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        doc = None
    if not isinstance(doc, dict):
        raise ResultError(f"{path}: unreadable; {REBUILD}")
    return doc


def read_history(run_dir: Path) -> pd.DataFrame:
    path = Path(run_dir) / HISTORY
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise ResultError(
            f"{path}: run history not found; run the workflow again (`snakemake --cores 2`) to rebuild it"
        ) from None
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ResultError(f"{path}: not a valid parquet file ({exc}); {REBUILD}") from None
