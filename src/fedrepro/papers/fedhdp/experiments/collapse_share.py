"""Deviation forensics by exact derivation: FedHDP's r = 0 rows of skewed non-IID MNIST, whose global model collapsed
to the opt-out clients' digit, against the digit assignment of a partition (issue: FedHDP's MNIST tables settled).

At r = 0 the server averages only the non-private clients' updates (App. C), and in skewed MNIST every non-private
client holds one digit (7, Sec. 5): the global model learns to answer 7. Its printed accuracy on MNIST's test set
(Table 9, Acc_g 10.27 / 10.28) is the sevens' share of that set (1,028 of 10,000); our own runs answer 7 on every test
image. The premise: the paper's model answered 7 on all but at most E test images (E = ``collapse_tol`` points of the
test set, 10 images at the default 0.1; a cell whose printed Acc_g lies further from the sevens' share is not judged).
A client's local test images are all of its digit, so a private client that does not hold 7 scores 0 but for those E
images (together at most E / n_min of accuracy over all such clients, n_min the fewest local test images of a client),
and one that holds 7 scores at most 1. With k private clients of n holding 7 and m = Acc_p / 100 their mean accuracy:

    n m <= k + E / n_min                                  (Acc_g,p; and Acc_l,p: at r = 0 no private client trains,
                                                           so its personal model is the global one)
    Var_k / 100 = mean(a^2) - m^2 <= m (1 - m)            (a in [0, 1]: the printed variance needs m at least the
                                                           root of m (1 - m) = Var / 100 below 1/2)
    Δ = Acc_np - 100 m,  Acc_np <= 100                    (every non-private client holds 7)

Each printed number, at the edge of its rounding (half a unit of its last digit), so bounds k from below, whatever the
training, seed or hyperparameters. A partition with fewer private clients holding 7 cannot have made it; the
conclusion names the bound, what the partition makes under an exact collapse (100 k / n, 100 (k/n)(1 - k/n),
Acc_np - 100 k / n: its rebuilt value at any seed) and what a uniform random digit per client gives (N_7 ~
Binomial(N, 1/10), minus the non-private clients).
"""

from __future__ import annotations

import math

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
        "partition": {"type": "string", "minLength": 1},  # the reading: its clients' digits and opt-out flags
        # how far (points of accuracy) the cell's printed Acc_g may lie from the opt-out digit's share of the test set
        # for the collapse to be the premise: 0.1 = 10 of MNIST's 10,000 test images
        "collapse_tol": {"type": "number", "exclusiveMinimum": 0, "default": 0.1},
    },
}
MEANS = ("acc_g_p", "acc_l_p")
VARIANCES = ("acc_g_p_var", "acc_l_p_var")
GAPS = {"d_g": "Acc_g_np", "d_l": "Acc_l_np"}  # a Δ row's key -> the id suffix of its cell's non-private mean


def least_share(kind: str, value: float, half_unit: float, np_row: tuple[float, float] | None = None) -> float:
    """The least mean accuracy m of the private clients (in [0, 1]) a printed number of ``kind`` (the last part of its
    metric key) allows at the edge of its rounding; for a Δ row, ``np_row``: its cell's printed Acc_np and half unit."""
    lo, hi = value - half_unit, value + half_unit
    if kind in MEANS:
        return max(0.0, lo / 100)
    if kind in VARIANCES:  # m (1 - m) >= Var / 100, and m (1 - m) rises with m below 1/2
        return (1 - math.sqrt(max(0.0, 1 - 4 * min(max(lo, 0.0), 25.0) / 100))) / 2
    if kind in GAPS:
        if np_row is None:
            raise ValueError("a Δ row needs the printed Acc_np of its cell")
        return max(0.0, (np_row[0] - np_row[1] - hi) / 100)  # Acc_np at the low edge of its rounding
    raise ValueError(f"no collapse relation for a {kind} row")


def least_holding(share: float, n_private: int, stray: float) -> int:
    """The fewest private clients holding the digit that give a mean accuracy ``share``, ``stray`` of the sum coming
    from the others (the E images answered against the collapse, at most E / n_min)."""
    return max(0, math.ceil(share * n_private - stray - 1e-9))


def value_at(kind: str, share: float, np_mean: float) -> float:
    """The number a partition with this share makes under the collapse (its rebuilt value, whatever the seed)."""
    if kind in MEANS:
        return 100 * share
    if kind in VARIANCES:
        return 100 * share * (1 - share)
    return np_mean - 100 * share


def _partition(ctx: RunContext, partition: str) -> dict:
    clients = partition_clients(ctx, partition)
    if not clients or any("digit" not in c for c in clients):
        raise ConfigError(f"{ctx.exp_id}: partition {partition!r} does not record each client's digit")
    digit = np.array([c["digit"] for c in clients])
    opt_out = np.array([bool(c.get("opt_out")) for c in clients])
    test = np.array([c.get("test", 0) for c in clients])
    held = sorted(set(digit[opt_out].tolist()))
    if len(held) != 1:
        raise ConfigError(f"{ctx.exp_id}: partition {partition!r}: its opt-out clients hold digits {held}, not one")
    d7 = held[0]
    private = ~opt_out
    return {
        "digit": int(d7),
        "n_clients": len(clients),
        "n_private": int(private.sum()),
        "n_nonprivate": int(opt_out.sum()),
        "private_holding": int((private & (digit == d7)).sum()),
        "test_images": int(test.sum()),
        "test_share": float(test[digit == d7].sum() / test.sum()),
        "min_test_images": int(test[private & (test > 0)].min()),  # a client with no test images scores nothing
    }


def conclude(t, kind: str, acc_g, np_row, part: dict, collapse_tol: float) -> tuple[Check, int | None]:
    """One row against the partition's count of private clients holding the opt-out digit, under the collapse of its
    cell's global model (the premise: its printed Acc_g ``acc_g`` within ``collapse_tol`` points of that digit's share
    of the test set): the conclusion, and the least count the printed number needs (None where the premise fails)."""
    from scipy.stats import binom

    d, n_priv, k = part["digit"], part["n_private"], part["private_holding"]
    np_print = (float(np_row.value), float(np_row.tolerance or 0.0)) if np_row is not None else None
    made = value_at(kind, k / n_priv, np_print[0] if np_print else 100.0)
    unit = float(t.tolerance or 0.0)
    share = 100 * part["test_share"]
    gap = abs(float(acc_g.value) - share)
    if gap > collapse_tol:
        detail = (
            f"not judged: the premise does not hold: the cell's printed Acc_g {acc_g.value_text} is not the digit-{d} "
            f"share of the test set ({share:.2f}, |diff| {gap:.2f} > {collapse_tol}): not explained here"
        )
        return Check(True, detail, float(t.value), made, unit), None
    stray_images = math.floor(collapse_tol / 100 * part["test_images"] + 1e-9)
    least = least_holding(
        least_share(kind, float(t.value), unit, np_print), n_priv, stray_images / part["min_test_images"]
    )
    forbids = k < least
    n, m = part["n_clients"], part["n_nonprivate"]
    premise = (
        f"under the collapse of the r = 0 global model to digit {d} (the cell's Acc_g {acc_g.value_text}, the digit's "
        f"share of the test set {share:.2f}: answering {d} on all but <= {stray_images} test images), where a private "
        f"client scores ~1 if it holds {d} and ~0 otherwise"
    )
    if not forbids:
        detail = (
            f"not forbidden: the printed {t.value_text} needs >= {least} of the {n_priv} private clients to hold {d}, "
            f"and the partition has {k} (not explained here), {premise}"
        )
        return Check(True, detail, float(t.value), made, unit), least
    tail = float(binom.sf(least + m - 1, n, 0.1))  # P(N_d - m >= least), N_d ~ Binomial(n, 1/10)
    detail = (
        f"the config's partition cannot make it: the printed {t.value_text} needs >= {least} of the {n_priv} private "
        f"clients to hold {d} (an exact bound, whatever the training) and the partition has {k}, which makes "
        f"{made:.4g} at any seed; a uniform random digit per client gives {n * 0.1 - m:.0f} ± "
        f"{math.sqrt(n * 0.09):.1f} (N_{d} - {m}, N_{d} ~ Binomial({n}, 1/10)), >= {least} in {100 * tail:.2g}% of "
        f"draws; {premise}"
    )
    return Check(False, detail, float(t.value), made, unit), least


@experiment_kind(
    "fedhdp_collapse_share",
    SCHEMA,
    deterministic=True,
    metrics=("needs_private_holding.*", "partition.*"),
    checks=("conclusion.*",),
    forensic=True,
)
def fedhdp_collapse_share(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    _, targets = printed_targets(ctx)
    part = _partition(ctx, p["partition"])
    checks, needs = {}, {}
    for rid in p["rows"]:
        t = row_of(ctx, targets, rid, p["experiment"])
        kind = t.key.rsplit(".", 1)[-1]
        if kind not in (*MEANS, *VARIANCES, *GAPS):
            raise ConfigError(
                f"{ctx.exp_id}: params.rows: {rid} ({t.key}) is not a private group's mean, variance or Δ"
            )
        cell = rid.rsplit(".", 2 if kind in VARIANCES else 1)[0]
        acc_g = targets.get(f"{cell}.Acc_g")
        np_row = targets.get(f"{cell}.{GAPS[kind]}") if kind in GAPS else None
        if acc_g is None or (kind in GAPS and np_row is None):
            raise ConfigError(f"{ctx.exp_id}: params.rows: {rid}: its cell has no printed Acc_g (or Acc_np) row")
        checks[f"conclusion.{rid}"], needs[rid] = conclude(t, kind, acc_g, np_row, part, p["collapse_tol"])
    return RunOutput(metrics={"needs_private_holding": needs, "partition": part}, checks=checks)
