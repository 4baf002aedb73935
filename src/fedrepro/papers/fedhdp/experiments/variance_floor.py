"""Deviation forensics by exact derivation: FedHDP's printed across-client variances against the floor the local test
sets of a reading put under them (issue: FedHDP's MNIST tables settled).

A client's accuracy measured on n_k test images is p_k + e_k, with e_k binomial noise of variance p_k(1 - p_k)/n_k
around its true accuracy p_k. Over the clients of a group, the expected variance of the measured accuracies is

    E[Var_k(measured)] = Var_k(p_k) + mean_k p_k(1 - p_k)/n_k
                      >= Var_k(p_k) + mean_k p_k(1 - p_k)/n_max
                       = Var_k(p_k)(1 - 1/n_max) + pbar(1 - pbar)/n_max    (as mean_k p_k(1 - p_k) = pbar(1 - pbar)
                      >= pbar(1 - pbar)/n_max,                                 - Var_k(p_k))

whatever the model: no training, seed or hyperparameter can bring it lower. In the paper's unit (100 x Var of
accuracies in [0, 1], docs/notes/fedhdp.md §7.19) the floor is 100 pbar(1 - pbar)/n_max, with pbar the group's mean
accuracy. With pbar the PRINTED mean of the same cell (the paper's own run) and n_max the largest local test set of the
reading, a printed variance below the floor is impossible under that reading: the reading cannot have made the printed
numbers. The realized variance over K clients scatters around its expectation with relative sd ~sqrt(2/K); the
comparison allows three of those at the smallest group of the partition (K = its opt-out clients, 100 of 2,000:
the floor times 1 - 3 sqrt(2/100) = 0.58) and the printed rounding (half a unit of the last digit). The conclusion
names the test-set size the printed pair needs (n >= 100 pbar(1 - pbar)/variance) and what the reading gives; under
a reading whose floor is below the printed value, the row is not explained here (passes: the floor does not forbid
it).
"""

from __future__ import annotations

import numpy as np

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.papers.fedhdp.experiments.derivations import partition_clients, printed_targets, row_of

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["experiment", "rows", "partition"],
    "properties": {
        "experiment": {"type": "string", "minLength": 1},  # whose rows these are (same paper)
        "rows": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}},
        "partition": {"type": "string", "minLength": 1},  # the reading: its clients' local test sets
    },
}


def floor_of(mean_pct: float, n_max: int) -> float:
    """100 pbar(1 - pbar)/n_max for a mean accuracy in %: the least expected across-client variance (paper's unit)."""
    p = mean_pct / 100.0
    return 100.0 * p * (1.0 - p) / n_max


def _test_sizes(ctx: RunContext, partition: str) -> tuple[np.ndarray, int]:
    """The clients' local test-set sizes under the partition, and the smallest client group (opt-out or not)."""
    clients = partition_clients(ctx, partition)
    sizes = np.array([c.get("test", 0) for c in clients], dtype=np.int64)
    opt_out = sum(bool(c.get("opt_out")) for c in clients)
    return sizes, min(opt_out or len(sizes), len(sizes) - opt_out or len(sizes))


def conclude(t, mean_row, n_max: int, n_min: int, group: int) -> Check:
    """One variance row against the floor of the reading, from the printed mean of its cell; ``group``: the smallest
    client group, for the scatter of a realized variance around its expectation."""
    printed, mean = float(t.value), float(mean_row.value)
    floor = floor_of(mean, n_max)
    unit = float(t.tolerance or 0.0)  # half a unit of the last printed digit
    need = float("inf") if printed <= 0 else 100.0 * (mean / 100) * (1 - mean / 100) / printed
    forbids = printed + unit < floor * (1 - 3 * (2 / group) ** 0.5)
    reading = f"the partition's local test sets ({n_min}-{n_max} images per client)"
    if forbids:
        detail = (
            f"the config's reading cannot make the printed pair: the printed variance {t.value_text} with the printed "
            f"mean {mean_row.value_text} is below {floor:.3g} = 100 p(1 - p)/{n_max}, the least expected across-client "
            f"variance of any model's accuracies measured on {reading} (an exact bound, whatever the training); it "
            f"needs local test sets of >= {need:.0f} images per client"
        )
    else:
        detail = (
            f"the printed variance {t.value_text} is not below {floor:.3g}, the floor of {reading} at the printed mean "
            f"{mean_row.value_text}: the reading does not forbid it (not explained here)"
        )
    return Check(not forbids, detail, printed, floor, unit)


def _variance_and_mean(ctx: RunContext, targets: dict, rid: str, experiment: str) -> tuple:
    """The variance row ``rid`` of params.rows (a row of ``experiment``) and the mean row it is printed beside."""
    t = row_of(ctx, targets, rid, experiment)
    mean_row = targets.get(rid.removesuffix(".var"))
    if not rid.endswith(".var") or mean_row is None:
        raise ConfigError(f"{ctx.exp_id}: params.rows: {rid} is not a variance row with a mean row beside it")
    return t, mean_row


@experiment_kind(
    "fedhdp_variance_floor",
    SCHEMA,
    deterministic=True,
    metrics=("floor.*", "needs_test_images.*", "test_images.*"),
    checks=("conclusion.*",),
    forensic=True,
)
def fedhdp_variance_floor(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    _, targets = printed_targets(ctx)
    pairs = [_variance_and_mean(ctx, targets, rid, p["experiment"]) for rid in p["rows"]]  # before any work
    sizes, group = _test_sizes(ctx, p["partition"])
    n_max, n_min = int(sizes.max()), int(sizes[sizes > 0].min())
    checks, floors, needs = {}, {}, {}
    for t, mean_row in pairs:
        rid = t.id
        c = conclude(t, mean_row, n_max, n_min, group)
        checks[f"conclusion.{rid}"] = c
        floors[rid] = c.expected
        needs[rid] = 100.0 * (mean_row.value / 100) * (1 - mean_row.value / 100) / t.value if t.value else None
    return RunOutput(
        metrics={"floor": floors, "needs_test_images": needs, "test_images": {"min": n_min, "max": n_max}},
        checks=checks,
    )
