"""Paired differences of a method to each baseline over the same seeds (same partition, initialization and data
order in each seed), and which of one table's differences are resolved.

For seeds s = 1..n with the method's value a_s and the baseline's b_s: d_s = a_s - b_s, the difference is the mean
of d_s and its standard error sd(d) / sqrt(n) (fedrepro.aggregate.stats: sample std, ddof 1). Each difference is
tested against zero with the paired t test (n - 1 degrees of freedom, scipy.stats: the spread is estimated from n
seeds, so never with 1.96), and a table's K differences are judged together: Holm's step-down procedure at a
family-wise 5 % (sort the K p-values; the k-th smallest is resolved while it and every smaller one are below
5 % / (K - k + 1)), so that "resolved" in a table of 8-12 comparisons is not the 5 % of each one. A difference needs
at least two seeds. ``more_seeds`` says how many more seeds would resolve it at this spread under the strictest step
of the procedure (5 % / K: enough whatever its rank), solved with t at each number of seeds. A seed where either value
is not finite (a failed row) is left out of the pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import stats as st

from fedrepro.aggregate import stats
from fedrepro.report.verdict import more_seeds_until

FAMILY_ALPHA = 0.05
RULE = (
    "paired over seeds: d = method − baseline per seed; mean d ± se (sd/√n); a paired t test of d = 0 (n − 1 "
    f"degrees of freedom); resolved when Holm's step-down procedure over this table's comparisons rejects d = 0 at a "
    f"family-wise {FAMILY_ALPHA:.0%} (n ≥ 2); more seeds: what the strictest step ({FAMILY_ALPHA:.0%} / number of "
    "comparisons) needs at this spread"
)


@dataclass(frozen=True)
class Difference:
    mean: float
    se: float
    n: int
    p_value: float  # two-sided paired t test of d = 0; nan with fewer than two pairs
    resolved: bool = False  # set by holm() over the table's comparisons
    more_seeds: int | None = None  # None: resolved, or no spread to extrapolate from (n < 2 or a zero difference)


def paired_difference(method: list[float], baseline: list[float]) -> Difference:
    """The paired difference of two per-seed series of the same seeds (in the same order), tested alone; a table's
    differences are resolved together by :func:`holm`."""
    if len(method) != len(baseline):
        raise ValueError(f"paired series of different lengths: {len(method)} vs {len(baseline)}")
    diffs = [a - b for a, b in zip(method, baseline) if math.isfinite(a) and math.isfinite(b)]
    s = stats(diffs)
    if s["n"] == 0:
        return Difference(math.nan, math.nan, 0, math.nan)
    mean, sd, n = s["mean"], s["std"], s["n"]
    return Difference(mean, s["se"], n, _p_value(mean, sd, n))


def _p_value(mean: float, sd: float, n: int) -> float:
    if n < 2:
        return math.nan
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * st.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def seeds_to_resolve(mean: float, sd: float, n: int, alpha: float) -> int | None:
    """More seeds (0 if none) after which |mean| is resolved at two-sided level ``alpha`` by the paired t test at
    this spread: the smallest n' >= 2 with |mean| > t(1 - alpha/2, n' - 1) sd / sqrt(n'); None for a zero mean,
    fewer than two pairs, or more than verdict.MAX_SEEDS seeds (a difference of float rounding around zero)."""
    if n < 2 or mean == 0:
        return None

    return more_seeds_until(lambda k: abs(mean) > st.t.ppf(1 - alpha / 2, k - 1) * sd / math.sqrt(k), n)


def holm(diffs: Sequence[Difference], alpha: float = FAMILY_ALPHA) -> list[Difference]:
    """The table's differences with ``resolved`` by Holm's step-down procedure at family-wise ``alpha`` over those
    that can be tested (n >= 2), and ``more_seeds`` for each one not resolved (at the strictest level alpha / K)."""
    testable = sorted((d.p_value, i) for i, d in enumerate(diffs) if d.n >= 2)
    k_total = len(testable)
    resolved: set[int] = set()
    for rank, (p, i) in enumerate(testable):
        if p > alpha / (k_total - rank):
            break  # step-down: every larger p-value stays unresolved
        resolved.add(i)
    out = []
    for i, d in enumerate(diffs):
        if i in resolved:
            out.append(replace(d, resolved=True, more_seeds=None))
            continue
        sd = d.se * math.sqrt(d.n) if d.n >= 2 else math.nan
        more = seeds_to_resolve(d.mean, sd, d.n, alpha / max(k_total, 1)) if d.n >= 2 else None
        out.append(replace(d, resolved=False, more_seeds=max(1, more) if more is not None else None))
    return out
