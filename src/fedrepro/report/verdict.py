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
  stale                         the runs are sound but were made under other parameters or input data than the
                                configuration and data now give: never judged; the row names what changed and the
                                command that rebuilds it
  invalid                       the rebuilt value is not a finite number (NaN or inf in the summary, undefined in
                                every seed, or missing from a paper-scale summary), the summary is another
                                experiment's or was made from synthetic test data, or its seed runs do not bear it
                                out (a run missing or damaged; a mean, std, count or check its runs do not give):
                                never judged, and it fails CI
Statuses of a check or consistency row: passes, fails, inconclusive, shown (a rebuilt number with nothing to compare
it to), not comparable (a number compared at quick scale), not run, stale and invalid (as for a printed row). A row
judged by pass/fail checks passes when every named check passes in every seed.

Tolerance rule, for a printed value v (± p) and a rebuilt mean m over n seeds with sample std s. Every spread
estimated from seeds is read with Student's t, never with a normal quantile: t_q(df) is the two-sided 95% quantile of
Student's t with df degrees of freedom (scipy.stats; t_q(inf) = 1.96):
    se_rebuilt = s / sqrt(n), with n - 1 degrees of freedom (the standard error of the rebuilt mean, not the
                 seed-to-seed spread)
    se_printed = what the paper says its ± is (registry column pm_reading), with its degrees of freedom df_p:
                 ci95 -> p / 1.96 (df_p inf: the paper's interval is already a 95% one); se -> p (df_p inf: the
                 paper states a standard error); std over R runs (column runs) -> p / sqrt(R) (df_p = R - 1);
                 std with R unstated, or unknown -> p, the ± read as the printed mean's own standard error (the
                 widest reading, said in the row; df_p inf); no ± -> 0;
                 single (a printed single run: one draw of the random experiment, no ±) -> s, the per-run spread of
                 the rebuilt seeds, so that tol is the 95% prediction interval of one more run,
                 t_q(n - 1) * s * sqrt(1 + 1/n)
    tol        = max(floor, sqrt((t_q(df_p) * se_printed)^2 + (t_q(n - 1) * se_rebuilt)^2)), each side's standard
                 error read with its own t (Banerjee's conservative interval: at least 95 % at every n, and
                 continuous as either side's se goes to 0. Welch-Satterthwaite's df, the usual approximation, calls
                 a faithful rebuild *deviates* 7-9 % of the time with two or three seeds against a stated standard
                 error; Hsu's t at the smaller df multiplies a stated se by t_q(n - 1) however small the seeds'
                 spread: 12.7 at n = 2; tests/report/test_verdict_coverage.py)
    deviates      if |m - v| > tol
    inconclusive  if |m - v| <= tol but the rebuild cannot resolve the value: t_q(n - 1) * se_rebuilt > max(floor,
                  t_q(df_p) * se_printed, RESOLUTION * |v|), or fewer than two seeds of an experiment that draws
                  randomness
    reproduced    otherwise
where floor is half a unit of the last printed digit (registry column tolerance) and RESOLUTION = 10 %: a verdict
needs the rebuilt mean pinned down to 10 % of the printed value (or to the paper's own uncertainty or rounding, if
wider), so a noisy rebuild can never pass by the width of its own noise. With n = 2 seeds t_q(1) = 12.7: two seeds
rarely resolve anything, and the rule says so instead of calling a faithful rebuild a deviation (1.96 in place of
t_q would cover ~70 % of faithful single runs at n = 2, not 95 %; tests/report/test_verdict_coverage.py).

A printed single run is the same rule with the printed draw's uncertainty measured by our seeds, not stated by the
paper: it is noise the rebuild must resolve, not an allowance the paper grants. Such a row is inconclusive when its
prediction half-width t_q(n - 1) * s * sqrt(1 + 1/n) exceeds max(floor, RESOLUTION * |v|) (the seed-to-seed spread
is too wide to tell one draw from another; more seeds narrow it only towards 1.96 * s), and, whatever the
difference, with fewer than two seeds of a random experiment (no spread to judge it against). A deterministic
experiment (s = 0) is judged by the floor and the printed ±, as any row.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy import stats

# the tolerance rule's version, which a kind that judges inside its runs (a forensic sweep) records with them, so
# that the report can say when a conclusion was judged under an older rule (RULE_VERSIONS: what each one was)
RULE_VERSION = 2
RULE_VERSIONS = {
    1: "t at the smaller degrees of freedom of the two sides (Hsu): at two seeds 12.7 times a stated se",
    2: "each side's se with its own t (Banerjee)",
}
Z = 1.96  # the normal 97.5% quantile: reads a printed 95% interval as a standard error (p / Z), nothing else
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
STALE = "stale"
PRINTED_STATUSES = (REPRODUCED, CALIBRATED, FITTED, DEVIATES, INCONCLUSIVE, NOT_COMPARABLE, NOT_RUN, STALE, INVALID)
# check and consistency rows
PASSES = "passes"
FAILS = "fails"
SHOWN = "shown"
CHECK_STATUSES = (PASSES, FAILS, INCONCLUSIVE, SHOWN, NOT_COMPARABLE, NOT_RUN, STALE, INVALID)
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


@functools.lru_cache(maxsize=4096)
def t_quantile(df: float) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (scipy.stats.t.ppf(0.975, df)); df inf
    gives the normal's 1.95996. ``df`` must be positive."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df!r}")
    return float(stats.t.ppf(0.975, df))


def tolerance_width(se_p: float, df_p: float, se_r: float, df_r: float) -> float:
    """The 95% half-width of (rebuilt mean - printed value) from the two sides' standard errors, each read with its
    own Student's t: sqrt((t(df_p) se_p)^2 + (t(df_r) se_r)^2) (Banerjee's interval for the Behrens-Fisher problem,
    at least 95 % at every n, tests/report/test_verdict_coverage.py). It moves continuously from one side's half-width
    to the other's as either standard error goes to 0; a side without uncertainty (se 0) drops out."""
    return math.hypot(*(t_quantile(df) * se for se, df in ((se_p, df_p), (se_r, df_r)) if se > 0))


@dataclass(frozen=True)
class Judgement:
    """The comparison of one rebuilt mean with one printed value: one of reproduced / deviates / inconclusive, or
    invalid when the rebuilt mean or std is not a finite number (:func:`not_finite`). ``quantile``: the multiple of
    sqrt(se_printed^2 + se_rebuilt^2) that ``tol`` is before the floor (its t quantiles, combined:
    :func:`tolerance_width`); ``df``: the rebuilt side's degrees of freedom, n - 1."""

    outcome: str
    diff: float
    tol: float
    se_printed: float
    se_rebuilt: float
    reading: str
    why: str = ""
    df: float = math.inf
    quantile: float = Z


def printed_se(
    pm: float | None, reading: str, runs: int | None, std: float | None = None, n: int = 0
) -> tuple[float, str, float]:
    """The standard error of the printed value implied by its ± and what the paper says the ± is, that reading in
    words (shown in the report), and its degrees of freedom (inf where the paper states a 95% interval or a standard
    error, or where the ± is taken as a known standard error; R - 1 for a std over R runs). A printed single run
    (``reading`` SINGLE) has no ±: its uncertainty is the per-run spread ``std`` of the ``n`` rebuilt seeds, with
    n - 1 degrees of freedom."""
    if reading == SINGLE:
        s = std or 0.0
        if n < 2:
            return s, "printed single run: one rebuilt seed, no spread to judge it against", math.inf
        q = t_quantile(n - 1)
        return (
            s,
            f"printed single run judged against the spread of the {n} rebuilt seeds (prediction interval "
            f"±{q * s * math.sqrt(1 + 1 / n):.3g}, t {q:.3g} at {n - 1} df)",
            n - 1,
        )
    if not pm:
        return 0.0, "no ± printed", math.inf
    if reading == "ci95":
        return pm / Z, f"±{pm:g} read as the paper's 95% interval (se {pm / Z:.3g}, df ∞)", math.inf
    if reading == "se":
        return pm, f"±{pm:g} read as a standard error (the paper says so; df ∞)", math.inf
    if reading == "std" and runs:
        se = pm / math.sqrt(runs)
        df = runs - 1 if runs > 1 else math.inf
        return se, f"±{pm:g} read as the std over the paper's {runs} runs (se {se:.3g}, df {df:g})", df
    if reading == "std":
        return (
            pm,
            f"±{pm:g} read as a std over an unstated number of runs, taken as the se (widest reading; df ∞)",
            (math.inf),
        )
    return pm, f"±{pm:g} of unstated kind, taken as the se of the printed mean (widest reading; df ∞)", math.inf


def _half_width(reading: str, se_p: float, df_p: float, std: float, n: int) -> tuple[float, float]:
    """The rebuild's noise the rule asks to be resolved, and what the row allows for it: (noise, allowance without
    floor and resolution). A printed single run: the prediction half-width t(n - 1) s sqrt(1 + 1/n); otherwise the
    rebuilt mean's 95% half-width t(n - 1) s / sqrt(n), against the paper's own t(df_p) se_printed."""
    q = t_quantile(n - 1)
    if reading == SINGLE:
        return q * std * math.sqrt(1 + 1 / n), 0.0
    return q * std / math.sqrt(n), t_quantile(df_p) * se_p


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
    std = std or 0.0
    se_p, words, df_p = printed_se(pm, reading, runs, std, n)
    se_r = std / math.sqrt(n) if n > 0 else math.inf
    single = reading == SINGLE
    se = math.hypot(se_p, se_r)
    df = n - 1 if n > 1 else math.inf  # the rebuilt side's
    # a single printed run: one draw against the seeds' spread, t(n - 1) on both; else each side with its own t
    width = t_quantile(df_p) * se if single else tolerance_width(se_p, df_p, se_r, df)
    q = width / se if se > 0 else Z
    diff = mean - value
    tol = max(floor, width)
    facts = dict(diff=diff, tol=tol, se_printed=se_p, se_rebuilt=se_r, reading=words, df=df, quantile=q)
    if single and not deterministic and n < 2:  # the tolerance would be the floor alone: no verdict either way
        why = "one seed: no spread to judge a single printed run against; run the paper scale's seeds"
        return Judgement(INCONCLUSIVE, why=why, **facts)
    if abs(diff) > tol:
        return Judgement(DEVIATES, **facts)
    if not deterministic and n < 2:
        why = "one seed of a random experiment: no standard error; run the paper scale's seeds"
        return Judgement(INCONCLUSIVE, why=why, **facts)
    if n < 2:  # deterministic, one run: nothing to resolve
        return Judgement(REPRODUCED, **facts)
    # the noise the rebuild must pin down, against what the paper's own uncertainty or rounding allows; a single
    # printed run's uncertainty is measured by our seeds, so it is noise to resolve, not an allowance
    noise, allowance = _half_width(reading, se_p, df_p, std, n)
    resolvable = max(floor, allowance, RESOLUTION * abs(value))
    if noise > resolvable:
        what = "prediction half-width of one run" if single else "95% half-width"
        if not single or Z * std <= resolvable:
            todo = f"run more seeds ({seeds_to_resolve(value, pm, reading, runs, floor, std, n)} more)"
        else:  # 1.96 s alone is too wide: the experiment's spread, not the number of seeds, is what is too noisy
            todo = f"more seeds cannot resolve one printed run (the seeds' spread alone gives {Z * std:.3g})"
        why = f"rebuild too noisy to judge: its {what} {noise:.3g} (n = {n}) exceeds {resolvable:.3g}; {todo}"
        return Judgement(INCONCLUSIVE, why=why, **facts)
    return Judgement(REPRODUCED, **facts)


def seeds_to_resolve(
    value: float, pm: float | None, reading: str, runs: int | None, floor: float | None, std: float, n: int
) -> int | None:
    """How many more seeds the rule needs before a rebuild with seed std ``std`` over ``n`` seeds can resolve the
    printed ``value`` (no longer *inconclusive* for noise), assuming the spread stays: the smallest n' >= 2 whose
    half-width (t quantile at n' - 1 df, which shrinks as n' grows: solved for, not extrapolated) is within what
    the row allows; 0 when it already is, None when no number of seeds can (a printed single run whose seeds'
    spread alone is wider than the resolution). With fewer than two seeds there is no spread to extrapolate from:
    one more seed (then ask again)."""
    if n < 2:
        return 2 - n
    if std == 0:
        return 0
    floor = floor or 0.0
    se_p, _, df_p = printed_se(pm, reading, runs, std, n)
    resolvable = max(floor, _half_width(reading, se_p, df_p, std, n)[1], RESOLUTION * abs(value))  # n-free

    def resolved(k: int) -> bool:
        return _half_width(reading, se_p, df_p, std, k)[0] <= resolvable

    if resolvable <= 0 or (reading == SINGLE and Z * std >= resolvable and not resolved(n)):
        return None  # 1.96 s: the half-width as n' -> inf
    return more_seeds_until(resolved, n)


MAX_SEEDS = 1_000_000  # beyond this a resolution is one of float rounding: no number of seeds worth stating


def more_seeds_until(resolved, n: int) -> int | None:
    """How many seeds beyond ``n`` the first n' >= n with ``resolved(n')`` needs (0 when n already is), for a
    ``resolved`` that stays true once true (a half-width shrinking in n': solved for with t at each n', never
    extrapolated with a fixed factor): doubling, then bisection. None past MAX_SEEDS."""
    if resolved(n):
        return 0
    lo, hi = n, 2 * n  # resolved(lo) is false
    while not resolved(hi):
        if hi > MAX_SEEDS:
            return None
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if resolved(mid) else (mid, hi)
    return hi - n


CONCLUSION_RULE_TEXT = (
    "A forensic conclusion says no more than its readings resolve, in one of three forms: *reproduced under R* (the "
    "readings under which the row is reproduced by the rule above, the closest first); *inconclusive under R (n seeds; "
    "run k more)* when no reading reproduces it and the reading nearest the printed value is too noisy to judge (k: "
    "the seeds the rule needs at that reading's spread), with the closest resolved reading after it; and *no reading "
    "in the ranges reproduces it (closest R at distance D, resolved)* only when the reading nearest the printed value "
    "deviates under the rule (D = |rebuilt − printed| / tol). A paper issue names the reading under which it holds."
)


RULE_TEXT = (
    "A **printed** row (a number or sentence the paper states) is *reproduced* only when rebuilt at paper scale with "
    "nothing fitted to it: |rebuilt mean − printed| ≤ tol = max(floor, √((t_p·se_printed)² + (t_r·se_rebuilt)²)), "
    "where "
    "se_rebuilt = std/√n is the standard error over the n seeds run (n − 1 degrees of freedom), se_printed comes from "
    f"the printed ± as the paper states it (95% interval → ±/{Z}; a standard error → ± itself; std over R runs → ±/√R "
    "with R − 1 degrees of freedom; unknown → ± itself, the widest reading, named in the row), t_p and t_r are "
    "Student's t two-sided 95% quantiles (scipy.stats) at each side's own degrees of freedom (a side the paper states "
    "as a 95% interval or a standard error counts as known, ∞; the rebuilt side n − 1): Banerjee's interval, at least "
    "95% at every n and continuous as either side's spread goes to 0 (Welch–Satterthwaite's df would cover only "
    "91–93% with two or three seeds), and floor is half a unit of the last printed digit. A printed single run "
    "(one draw without ±) is judged against the std s of the rebuilt seeds: tol is the prediction interval "
    "t(n − 1)·s·√(1 + 1/n), inconclusive when that exceeds "
    f"max(floor, {RESOLUTION:.0%} of the printed value) or with one seed. Outside tol it *deviates*; inside tol but "
    f"with t(n − 1)·se_rebuilt above max(floor, t·se_printed, {RESOLUTION:.0%} of the printed value), or with one "
    "seed of a random experiment, it is *inconclusive*. A value fitted to printed rows (a calibration) makes those "
    "rows *fitted* (no verdict) and the rows it enters *reproduced after calibration*. Rows rebuilt only at quick "
    "scale are *not comparable*: value shown, no verdict. A rebuilt value that is not a finite number (NaN, inf, "
    "undefined in every seed, missing), or a summary its seed runs do not bear out (a run missing or damaged, a mean, "
    "count or check that its runs do not give), is never judged: the row is *invalid*, naming the file. A run made "
    "under other parameters or data than the configuration now gives is *stale*: never judged, with the command "
    "that rebuilds it (a forensic sweep's paper issue or fix reworded changes nothing it computed: its run stays "
    "current and its conclusions are given in the new words). Sentences are judged by named pass/fail checks, in "
    "every seed. "
    "**Check** rows verify the implementation (simulation vs our closed forms, library cross-checks, the replication "
    "inventories' reference values (docs/notes/), inputs read back, protocols on stand-in data): they pass or fail "
    "and are never counted as reproduced paper numbers. **Consistency** rows check the paper against itself; a "
    "failure is a paper issue."
)
