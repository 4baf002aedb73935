"""Replaying the first rounds of an archived run: a forged or mis-attributed run is caught without the full run's
cost.

An archived learning run's history holds each round's training loss (``round_losses`` in the evaluation rows,
fedrepro.learning.engine.train). The replay resolves the experiment at the paper's settings, reads the same verified
inputs, and trains with every engine run stopped after round R (engine.replay_rounds): client sampling, minibatches,
noise and the lr schedule of the first R rounds are the full run's.

The run is judged as a whole, by two bounds (compare), measured with benchmarks/replay_drift.py on the five
Intel-made seeds of adaped.table4_femnist_sample replayed on an AMD EPYC, and on adaped.table2_mnist's seed 0 replayed
on its own CPU through other kernels (ATen's AVX2 path, MKL's compatible GEMM; benchmarks/RESULTS.md):
- every loss within REPLAY_RTOL of the replayed one, where the run is replayed on the CPU model that made it. float32
  sums reorder across CPUs and BLAS builds, and an unstable method amplifies that: pFedMe's round-2 loss (rising at
  lr 0.1) of seed 0 is 3.6e-4 off, its round 3 1.1e-3; DP-AdaPeD's round 2 at epsilon 27.3 is 1.1e-3 off through the
  other kernels, while most losses agree to 1e-7. A loss edited by more than ten times that drift fails here. On
  another CPU model the bound is not applied (the losses are still compared and the largest difference printed):
  adaped.table1_fmnist's five Intel-made seeds replayed on an AMD EPYC have pFedMe's losses up to 1.3e-1 off after
  2 rounds (2e-3 already in round 1, an inner solver per step), every other method's within 1e-6, and a median of
  at most 4.3e-8, where another seed's median is 1.3e-2 or more (benchmarks/replay_drift.py, benchmarks/RESULTS.md);
- the median relative difference over all of them within REPLAY_MEDIAN_RTOL: at most 1.0e-6 for those seeds' 16
  losses of 2 rounds, where another seed's run has a median of 7.5e-4 or more (single losses as close as 2.5e-5:
  the round-1 losses all start near ln 10). A run that is not this code's, seed's and parameters' fails here even
  where few of its losses stray past the first bound.

The CNN arithmetic is the run's: a run whose machine record does not name the compiled CNN kernel
(``machine.cnn_kernel``: made with the PyTorch formulation, or before the kernel existed) is replayed with the
PyTorch formulation (fedrepro.learning.native_cnn.disabled), one made with the kernel with the kernel. Where the
kernel the run used cannot be built here, the replay's arithmetic differs as another CPU's does, and the first bound
is not applied either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedrepro.archive.store import Entry
from fedrepro.config import resolve_experiment
from fedrepro.errors import FedreproError
from fedrepro.experiments import RunContext, RunOutput, get_kind
from fedrepro.learning.engine import replay_rounds
from fedrepro.run_inputs import prepare_inputs, run_inputs
from fedrepro.runio import read_history
from fedrepro.seeding import rng_for

REPLAY_RTOL = 1e-2
REPLAY_MEDIAN_RTOL = 1e-5
REPLAY_ATOL = 1e-6
TRACE = "round_losses"
# history columns that tell one engine run of an experiment from another (a method, a grid point, a privacy level)
RUN_KEYS = ("method", "lr_grid", "lr_candidate", "eps", "epsilon", "epsilon_key", "sigma", "alpha")


def traces(history: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """Each engine run's per-round losses in round order, keyed by the history's run columns."""
    if TRACE not in history.columns:
        return {}
    keys = [k for k in RUN_KEYS if k in history.columns]
    twice = history[history.duplicated([*keys, "round"])]
    if len(twice):  # two runs under one key: their losses would interleave into one trace
        row = twice.iloc[0]
        label = ", ".join(f"{k}={row[k]}" for k in keys) or "the history"
        raise FedreproError(
            f"{label}: round {row['round']} twice: the history holds several engine runs that none of the run "
            f"columns {', '.join(RUN_KEYS)} tells apart (add the column that does to RUN_KEYS)"
        )
    out: dict[tuple, list[float]] = {}
    for _, row in history.sort_values("round", kind="stable").iterrows():
        out.setdefault(tuple((k, row[k]) for k in keys), []).extend(float(x) for x in row[TRACE])
    return {k: np.asarray(v) for k, v in out.items()}


def replayable(entry: Entry) -> bool:
    """Whether the archived run's history holds the per-round trace a replay compares (engine-trained kinds)."""
    return bool(traces(read_history(entry.dir)))


@dataclass(frozen=True)
class Replayed:
    problems: list[str]  # one line each, naming the run and the file; [] when the run replays
    max_relative_difference: float  # over every loss compared (for the record)
    median_relative_difference: float
    compared: int  # traces compared
    other_cpu: str | None = None  # "made on X, replayed on Y" where the per-loss bound was not applied


def replay(cfg: Mapping, entry: Entry, rounds: int) -> Replayed:
    """Rerun the first ``rounds`` rounds of the archived run and compare each engine run's losses."""
    archived = traces(read_history(entry.dir))
    if not archived:
        source = entry.dir / "history.parquet"
        raise FedreproError(f"{source}: no per-round trace ({TRACE}): {entry.experiment} cannot be replayed")
    from fedrepro.learning import native_cnn
    from fedrepro.provenance import machine

    made = entry.manifest.get("made", {}).get("machine") or {}
    made_on, here = made.get("cpu"), machine()["cpu"]
    native = str(made.get("cnn_kernel") or "").startswith("native")
    with contextlib.nullcontext() if native else native_cnn.disabled():
        again = replayed_traces(cfg, entry, rounds)
    if native and not native_cnn.kernel().startswith("native"):
        here = f"{here} without the compiled CNN kernel ({native_cnn.kernel()})"
        made_on = f"{made_on} with it"
    return compare(archived, again, rounds, entry.dir / "history.parquet", made_on, here)


def replayed_traces(cfg: Mapping, entry: Entry, rounds: int) -> dict[tuple, np.ndarray]:
    """Each engine run's losses of the first ``rounds`` rounds, trained here from the archived run's experiment (at
    the paper's settings), inputs and seed."""
    return traces(first_rounds(cfg, entry.experiment, entry.seed, rounds).history)


def first_rounds(cfg: Mapping, experiment: str, seed: int, rounds: int, changes: Mapping | None = None) -> RunOutput:
    """The experiment's run at the paper's settings (with ``changes``: top-level parameters replaced, e.g. fewer
    methods or more evaluations) with every engine run stopped after round ``rounds``, trained here from its inputs
    and seed: the first rounds exactly as the whole run makes them (engine.replay_rounds)."""
    exp = resolve_experiment(cfg, experiment, "paper")
    prepare_inputs(cfg, exp)
    data, partitions, inputs = run_inputs(cfg, exp)
    ctx = RunContext(exp_id=exp.id, seed=seed, data=data, partitions=partitions, config=cfg, inputs=inputs)
    with replay_rounds(rounds):
        return get_kind(exp.kind).fn(dict(exp.params, **(changes or {})), rng_for(exp.id, seed), ctx)


def relative_difference(archived: np.ndarray, replayed: np.ndarray) -> np.ndarray:
    """|archived - replayed| / |replayed|, the denominator floored at REPLAY_ATOL. A loss no longer finite (a run that
    diverged, e.g. Table 2's DP-FedAvg) agrees only with the same non-finite value: 0 then, infinite against
    anything else (NaN compared as a number would pass every bound)."""
    with np.errstate(invalid="ignore"):
        rel = np.abs(archived - replayed) / np.maximum(np.abs(replayed), REPLAY_ATOL)
    same = (np.isnan(archived) & np.isnan(replayed)) | (np.isinf(archived) & (archived == replayed))
    return np.where(same, 0.0, np.where(np.isnan(rel), np.inf, rel))


def compare(
    archived: dict[tuple, np.ndarray],
    again: dict[tuple, np.ndarray],
    rounds: int,
    source,
    made_on: str | None = None,
    here: str | None = None,
) -> Replayed:
    """Judge the replayed traces against the archived ones: each loss within REPLAY_RTOL (unless the run was made on
    CPU model ``made_on`` and is replayed on another, ``here``), and their median relative difference within
    REPLAY_MEDIAN_RTOL (module docstring)."""
    other_cpu = f"made on {made_on}, replayed on {here}" if made_on and here and made_on != here else None
    problems, diffs = [], []
    for key, want in archived.items():
        label = ", ".join(f"{k}={v}" for k, v in key) or "the run"
        got = again.get(key)
        if got is None:
            problems.append(f"{source}: {label}: not trained by the replay (another experiment's history?)")
            continue
        n = min(rounds, len(want))
        if len(got) < n:
            problems.append(f"{source}: {label}: the replay made {len(got)} rounds, {n} wanted")
            continue
        a, b = want[:n], got[:n]
        rel = relative_difference(a, b)
        diffs.extend(rel.tolist())
        if other_cpu is None and np.any(rel > REPLAY_RTOL):
            i = int(np.argmax(rel > REPLAY_RTOL))  # the first round off
            problems.append(
                f"{source}: {label}: round {i + 1} train loss {a[i]:.7g} archived, {b[i]:.7g} replayed (relative "
                f"{rel[i]:.1e}, over {REPLAY_RTOL:g}): not what this code makes from this experiment's parameters, "
                "inputs and seed"
            )
    median = float(np.median(diffs)) if diffs else 0.0
    if median > REPLAY_MEDIAN_RTOL:
        problems.append(
            f"{source}: the {len(diffs)} train losses differ from the replay's by a median relative {median:.1e}, over "
            f"{REPLAY_MEDIAN_RTOL:g}, where a float reordering moves few of them: not what this code makes from this "
            "experiment's parameters, inputs and seed"
        )
    return Replayed(problems, max(diffs, default=0.0), median, len(archived), other_cpu)
