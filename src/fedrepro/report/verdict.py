"""What a report row may claim, written once: the statuses and the tolerance rule.

Row types (fedrepro.report.registry): ``printed`` rows are numbers and sentences the paper states, and only they are
ever counted as reproduced; ``check`` rows verify this project's implementation (simulation vs our own closed form,
library cross-checks, the replication inventories' reference values (docs/notes/), inputs read back, protocols on
stand-in data); ``consistency``
rows check the paper's own statements against each other (a failure is a paper issue, not a deviation of ours).

Statuses of a printed row
  reproduced                    rebuilt at paper scale, within tolerance, no value fitted to it
  reproduced after calibration  as reproduced, on a row that a calibrated value enters (a value the paper leaves open,
                                fitted to *other* printed rows, which the experiment's `calibration` names)
  fitted                        a calibrated value was fitted to this row: shown, never a verdict
  deviates                      rebuilt at paper scale and outside tolerance
  inconclusive                  rebuilt at paper scale, within tolerance, but too noisy to tell (run more seeds)
  not comparable                rebuilt only at quick scale: value shown, no verdict on a paper number
  not run                       data offline, not built, or no rule yet; with the command that builds it
  invalid                       the rebuilt value is not a finite number (NaN or inf in the summary, undefined in
                                every seed, or missing from a paper-scale summary), or the summary is another
                                experiment's or was made from synthetic test data: never judged, and it fails CI
Statuses of a check or consistency row: passes, fails, inconclusive, shown (a rebuilt number with nothing to compare
it to), not comparable (a number compared at quick scale), not run, invalid (as for a printed row). A row judged by
pass/fail checks passes when every named check passes in every seed.

Tolerance rule, for a printed value v (± p) and a rebuilt mean m over n seeds with sample std s:
    se_rebuilt = s / sqrt(n)                 the standard error of the rebuilt mean, not the seed-to-seed spread
    se_printed = what the paper says its ± is (registry column pm_reading):
                 ci95 -> p / 1.96; se -> p; std over R runs (column runs) -> p / sqrt(R);
                 std with R unstated, or unknown -> p (the ± read as the printed mean's own standard error: the widest
                 reading, said in the row); no ± -> 0;
                 single (a printed single run: one draw of the random experiment, no ±) -> s, the per-run spread
                 of the rebuilt seeds, so that tol is the 95% prediction interval of one more run,
                 Z * s * sqrt(1 + 1/n)
    tol        = max(floor, Z * sqrt(se_printed^2 + se_rebuilt^2)),   Z = 1.96 (two-sided 95%)
    deviates      if |m - v| > tol
    inconclusive  if |m - v| <= tol but the rebuild cannot resolve the value: Z * se_rebuilt > max(floor,
                  Z * se_printed, RESOLUTION * |v|), or fewer than two seeds of an experiment that draws randomness
    reproduced    otherwise
where floor is half a unit of the last printed digit (registry column tolerance) and RESOLUTION = 10 %: a verdict
needs the rebuilt mean pinned down to 10 % of the printed value (or to the paper's own uncertainty or rounding, if
wider), so a noisy rebuild can never pass by the width of its own noise.

A printed single run is the same rule with the printed draw's uncertainty measured by our seeds, not stated by the
paper: it is noise the rebuild must resolve, not an allowance the paper grants (with se_printed = s, Z * se_rebuilt
never exceeds Z * se_printed, so the test above could not fire). Such a row is inconclusive when its prediction
half-width Z * s * sqrt(1 + 1/n) exceeds max(floor, RESOLUTION * |v|) (the seed-to-seed spread is too wide to tell
one draw from another; more seeds narrow it only towards Z * s), and, whatever the difference, with fewer than two
seeds of a random experiment (no spread to judge it against). A deterministic experiment (s = 0) is judged by the
floor, as any row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z = 1.96
RESOLUTION = 0.10
# registry column pm_reading: what the printed ± is, or SINGLE, a printed single run (one draw, no ±)
PM_READINGS = ("std", "se", "ci95", "unknown")
SINGLE = "single"

# printed rows
REPRODUCED = "reproduced"
CALIBRATED = "reproduced after calibration"
FITTED = "fitted"
DEVIATES = "deviates"
INCONCLUSIVE = "inconclusive"
NOT_COMPARABLE = "not comparable"
NOT_RUN = "not run"
INVALID = "invalid"
PRINTED_STATUSES = (REPRODUCED, CALIBRATED, FITTED, DEVIATES, INCONCLUSIVE, NOT_COMPARABLE, NOT_RUN, INVALID)
# check and consistency rows
PASSES = "passes"
FAILS = "fails"
SHOWN = "shown"
CHECK_STATUSES = (PASSES, FAILS, INCONCLUSIVE, SHOWN, NOT_COMPARABLE, NOT_RUN, INVALID)
ALL_STATUSES = PRINTED_STATUSES + (PASSES, FAILS, SHOWN)
# what the CI replication check accepts for a row flagged ci=true
GOOD = (REPRODUCED, CALIBRATED, PASSES)


def not_finite(mean: float | None, std: float | None = None) -> str:
    """Why a rebuilt mean (and its std) cannot be judged, or "" when it can: only finite numbers are ever compared
    with a printed value (NaN fails every comparison, so a tolerance test would pass it). None is undefined."""
    if mean is None:
        return "the rebuilt mean is undefined (None: NaN or missing in every seed)"
    bad = [f"{name} {x!r}" for name, x in (("mean", mean), ("std", std)) if x is not None and not math.isfinite(x)]
    return f"the rebuilt {' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not finite" if bad else ""


@dataclass(frozen=True)
class Judgement:
    """The comparison of one rebuilt mean with one printed value: one of reproduced / deviates / inconclusive, or
    invalid when the rebuilt mean or std is not a finite number (:func:`not_finite`)."""

    outcome: str
    diff: float
    tol: float
    se_printed: float
    se_rebuilt: float
    reading: str
    why: str = ""


def printed_se(
    pm: float | None, reading: str, runs: int | None, std: float | None = None, n: int = 0
) -> tuple[float, str]:
    """The standard error of the printed value implied by its ± and what the paper says the ± is, and that reading
    in words (shown in the report). A printed single run (``reading`` SINGLE) has no ±: its uncertainty is the
    per-run spread ``std`` of the ``n`` rebuilt seeds."""
    if reading == SINGLE:
        s = std or 0.0
        if n < 2:
            return s, "printed single run: one rebuilt seed, no spread to judge it against"
        return s, (
            f"printed single run judged against the spread of the {n} rebuilt seeds (prediction interval "
            f"±{Z * s * math.sqrt(1 + 1 / n):.3g})"
        )
    if not pm:
        return 0.0, "no ± printed"
    if reading == "ci95":
        return pm / Z, f"±{pm:g} read as the paper's 95% interval (se {pm / Z:.3g})"
    if reading == "se":
        return pm, f"±{pm:g} read as a standard error (the paper says so)"
    if reading == "std" and runs:
        return pm / math.sqrt(
            runs
        ), f"±{pm:g} read as the std over the paper's {runs} runs (se {pm / math.sqrt(runs):.3g})"
    if reading == "std":
        return pm, f"±{pm:g} read as a std over an unstated number of runs, taken as the se (widest reading)"
    return pm, f"±{pm:g} of unstated kind, taken as the se of the printed mean (widest reading)"


def judge(
    value: float,
    pm: float | None,
    reading: str,
    runs: int | None,
    floor: float | None,
    mean: float,
    std: float | None,
    n: int,
    deterministic: bool,
) -> Judgement:
    """The tolerance rule of this module's docstring. ``std``: the sample std of the n rebuilt seeds."""
    floor = floor or 0.0
    bad = not_finite(mean, std)
    if bad:
        return Judgement(INVALID, math.nan, math.nan, math.nan, math.nan, "", f"{bad}: no verdict")
    se_p, words = printed_se(pm, reading, runs, std, n)
    se_r = (std or 0.0) / math.sqrt(n) if n > 0 else math.inf
    diff = mean - value
    tol = max(floor, Z * math.sqrt(se_p**2 + se_r**2))
    single = reading == SINGLE
    if single and not deterministic and n < 2:  # the tolerance would be the floor alone: no verdict either way
        return Judgement(
            INCONCLUSIVE,
            diff,
            tol,
            se_p,
            se_r,
            words,
            "one seed: no spread to judge a single printed run against; run the paper scale's seeds",
        )
    if abs(diff) > tol:
        return Judgement(DEVIATES, diff, tol, se_p, se_r, words)
    if not deterministic and n < 2:
        return Judgement(
            INCONCLUSIVE,
            diff,
            tol,
            se_p,
            se_r,
            words,
            "one seed of a random experiment: no standard error; run the paper scale's seeds",
        )
    # the noise the rebuild must pin down, against what the paper's own uncertainty or rounding allows; a single
    # printed run's uncertainty is measured by our seeds (se_p = s), so it is noise to resolve, not an allowance
    noise = Z * math.sqrt(se_p**2 + se_r**2) if single else Z * se_r
    resolvable = max(floor, RESOLUTION * abs(value)) if single else max(floor, Z * se_p, RESOLUTION * abs(value))
    if noise > resolvable:
        what = "prediction half-width of one run" if single else "95% half-width"
        if not single or Z * se_p <= resolvable:
            todo = "run more seeds"
        else:  # Z * s alone is too wide: the experiment's spread, not the number of seeds, is what is too noisy
            todo = f"more seeds cannot resolve one printed run (the seeds' spread alone gives {Z * se_p:.3g})"
        return Judgement(
            INCONCLUSIVE,
            diff,
            tol,
            se_p,
            se_r,
            words,
            f"rebuild too noisy to judge: its {what} {noise:.3g} (n = {n}) exceeds {resolvable:.3g}; {todo}",
        )
    return Judgement(REPRODUCED, diff, tol, se_p, se_r, words)


def seeds_to_resolve(
    value: float, pm: float | None, reading: str, runs: int | None, floor: float | None, std: float, n: int
) -> int | None:
    """How many more seeds the rule needs before a rebuild with seed std ``std`` over ``n`` seeds can resolve the
    printed ``value`` (no longer *inconclusive* for noise), assuming the spread stays; 0 when it already can, None
    when no number of seeds can (a printed single run whose seeds' spread alone is wider than the resolution). With
    fewer than two seeds there is no spread to extrapolate from: one more seed (then ask again)."""
    if n < 2:
        return 2 - n
    floor = floor or 0.0
    resolvable = max(floor, RESOLUTION * abs(value))
    if std == 0:
        return 0
    if reading == SINGLE:  # Z s sqrt(1 + 1/n') <= resolvable
        ratio = (resolvable / (Z * std)) ** 2
        if ratio <= 1:
            return None
        need = max(2, math.ceil(1 / (ratio - 1)))
    else:  # Z s / sqrt(n') <= max(floor, Z se_printed, RESOLUTION |v|)
        se_p, _ = printed_se(pm, reading, runs, std, n)
        resolvable = max(resolvable, Z * se_p)
        if resolvable <= 0:
            return None
        need = math.ceil((Z * std / resolvable) ** 2)
    return max(0, need - n)


CONCLUSION_RULE_TEXT = (
    "A forensic conclusion says no more than its readings resolve, in one of three forms: *reproduced under R* (the "
    "readings under which the row is reproduced by the rule above, the closest first); *inconclusive under R (n seeds; "
    "run k more)* when no reading reproduces it and the reading nearest the printed value is too noisy to judge (k: "
    "the seeds the rule needs at that reading's spread), with the closest resolved reading after it; and *no reading "
    "in the ranges reproduces it (closest R at distance D, resolved)* only when the reading nearest the printed value "
    "deviates under the rule (D = |rebuilt − printed| / tol). A paper issue names the reading under which it holds."
)


RULE_TEXT = (
    f"A **printed** row (a number or sentence the paper states) is *reproduced* only when rebuilt at paper scale with "
    f"nothing fitted to it: |rebuilt mean − printed| ≤ tol = max(floor, {Z}·√(se_printed² + se_rebuilt²)), where "
    f"se_rebuilt = std/√n is the standard error over the n seeds run, se_printed comes from the printed ± as the paper "
    f"states it (95% interval → ±/{Z}; std over R runs → ±/√R; unknown → ± itself, the widest reading, named in the "
    f"row; a printed single run, one draw without ± → the std s of the rebuilt seeds, so tol is the prediction "
    f"interval {Z}·s·√(1 + 1/n), inconclusive when that exceeds max(floor, {RESOLUTION:.0%} of the printed value) "
    f"or with one seed) and floor is half a unit of the last printed digit. Outside tol it *deviates*; inside tol but "
    f"with {Z}·se_rebuilt above max(floor, {Z}·se_printed, {RESOLUTION:.0%} of the printed value), or with one seed "
    "of a random experiment, it is *inconclusive*. A value fitted to printed rows (a calibration) makes those rows "
    "*fitted* (no verdict) and the rows it enters *reproduced after calibration*. Rows rebuilt only at quick scale are "
    "*not comparable*: value shown, no verdict. A rebuilt value that is not a finite number (NaN, inf, undefined in "
    "every seed, missing) is never judged: the row is *invalid*, naming the file. Sentences are judged by named "
    "pass/fail checks, in every seed. "
    "**Check** rows verify the implementation (simulation vs our closed forms, library cross-checks, the replication "
    "inventories' reference values (docs/notes/), inputs read back, protocols on stand-in data): they pass or fail "
    "and are never counted as reproduced paper numbers. **Consistency** rows check the paper against itself; a "
    "failure is a paper issue."
)
