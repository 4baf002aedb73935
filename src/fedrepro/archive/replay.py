"""Replaying the first rounds of an archived run: a forged or mis-attributed run is caught without the full run's
cost.

An archived learning run's history holds each round's training loss (``round_losses`` in the evaluation rows,
fedrepro.learning.engine.train). The replay resolves the experiment at the paper's settings, reads the same verified
inputs, and trains with every engine run stopped after round R (engine.replay_rounds): client sampling, minibatches,
noise and the lr schedule of the first R rounds are the full run's. Each method's (and grid point's) first R losses
must equal the archived ones within REPLAY_RTOL: float32 sums reorder across CPUs and BLAS builds (measured: ~1e-7
relative after 2 rounds here), while another seed, another parameter or a hand-edited history differs in the first
round by orders of magnitude more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedrepro.archive.store import Entry
from fedrepro.config import resolve_experiment
from fedrepro.errors import FedreproError
from fedrepro.experiments import RunContext, get_kind
from fedrepro.learning.engine import replay_rounds
from fedrepro.run_inputs import prepare_inputs, run_inputs
from fedrepro.runio import read_history
from fedrepro.seeding import rng_for

REPLAY_RTOL = 1e-4
REPLAY_ATOL = 1e-6
TRACE = "round_losses"
# history columns that tell one engine run of an experiment from another (a method, a grid point, a privacy level)
RUN_KEYS = ("method", "lr_grid", "lr_candidate", "eps", "epsilon_key", "sigma", "alpha")


def traces(history: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """Each engine run's per-round losses in round order, keyed by the history's run columns."""
    if TRACE not in history.columns:
        return {}
    keys = [k for k in RUN_KEYS if k in history.columns]
    out: dict[tuple, list[float]] = {}
    for _, row in history.sort_values("round", kind="stable").iterrows():
        key = tuple((k, row[k]) for k in keys)
        out.setdefault(key, []).extend(float(x) for x in row[TRACE])
    return {k: np.asarray(v) for k, v in out.items()}


def replayable(entry: Entry) -> bool:
    """Whether the archived run's history holds the per-round trace a replay compares (engine-trained kinds)."""
    return bool(traces(read_history(entry.dir)))


@dataclass(frozen=True)
class Replayed:
    problems: list[str]  # one line each, naming the run and the file; [] when the run replays
    max_relative_difference: float  # over every trace compared (for the record)
    compared: int  # traces compared


def replay(cfg: Mapping, entry: Entry, rounds: int) -> Replayed:
    """Rerun the first ``rounds`` rounds of the archived run and compare each engine run's losses."""
    archived = traces(read_history(entry.dir))
    source = entry.dir / "history.parquet"
    if not archived:
        raise FedreproError(f"{source}: no per-round trace ({TRACE}): {entry.experiment} cannot be replayed")
    exp = resolve_experiment(cfg, entry.experiment, "paper")
    prepare_inputs(cfg, exp)
    data, partitions, inputs = run_inputs(cfg, exp)
    ctx = RunContext(exp_id=exp.id, seed=entry.seed, data=data, partitions=partitions, config=cfg, inputs=inputs)
    with replay_rounds(rounds):
        out = get_kind(exp.kind).fn(exp.params, rng_for(exp.id, entry.seed), ctx)
    again = traces(out.history)
    problems, worst = [], 0.0
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
        worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), REPLAY_ATOL))))
        if not np.allclose(a, b, rtol=REPLAY_RTOL, atol=REPLAY_ATOL):
            i = int(np.argmax(np.abs(a - b) - REPLAY_RTOL * np.abs(b)))
            problems.append(
                f"{source}: {label}: round {i + 1} train loss {a[i]:.7g} archived, {b[i]:.7g} replayed (rtol "
                f"{REPLAY_RTOL:g}): not what this code makes from this experiment's parameters, inputs and seed"
            )
    return Replayed(problems, worst, len(archived))
