"""Paired differences of a method to each baseline over the same seeds (same partition, initialization and data
order in each seed), and whether each is resolved.

For seeds s = 1..n with the method's value a_s and the baseline's b_s: d_s = a_s - b_s, the difference is the mean
of d_s and its standard error sd(d) / sqrt(n) (fedrepro.aggregate.stats: sample std, ddof 1). Resolved uses the
report's tolerance rule (fedrepro.report.verdict.judge) with the baseline in the place of the printed value and
the paired standard error as the rebuilt one: the difference is told apart from zero when |mean d| > Z se
(Z = 1.96, two-sided 95%) with at least two seeds; otherwise it is not resolved, and ``more_seeds`` says how many
more seeds the rule needs at this spread (ceil((Z sd / |mean d|)^2) - n), as verdict.seeds_to_resolve does for a
printed value. A seed where either value is not finite (a failed row) is left out of the pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedrepro.aggregate import stats
from fedrepro.report.verdict import DEVIATES, Z, judge

RULE = (
    f"paired over seeds: d = method - baseline per seed; mean d ± se (sd/√n); resolved when |mean d| > {Z}·se "
    "with n ≥ 2 (fedrepro.report.verdict's tolerance rule with the baseline as the reference value)"
)


@dataclass(frozen=True)
class Difference:
    mean: float
    se: float
    n: int
    resolved: bool
    more_seeds: int | None  # None: resolved, or no spread to extrapolate from (n < 2 or a zero difference)


def paired_difference(method: list[float], baseline: list[float]) -> Difference:
    """The paired difference of two per-seed series of the same seeds (in the same order)."""
    if len(method) != len(baseline):
        raise ValueError(f"paired series of different lengths: {len(method)} vs {len(baseline)}")
    diffs = [a - b for a, b in zip(method, baseline) if math.isfinite(a) and math.isfinite(b)]
    s = stats(diffs)
    if s["n"] == 0:
        return Difference(math.nan, math.nan, 0, False, None)
    mean, sd, n = s["mean"], s["std"], s["n"]
    outcome = judge(0.0, None, "se", None, 0.0, mean, sd, n, deterministic=False).outcome
    resolved = n >= 2 and outcome == DEVIATES
    more = None
    if not resolved and n >= 2 and mean != 0:
        more = max(1, math.ceil((Z * sd / abs(mean)) ** 2) - n)
    return Difference(mean, s["se"], n, resolved, more)
