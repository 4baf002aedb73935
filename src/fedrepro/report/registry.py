"""The target registry: one CSV per paper (config/targets/<paper>.csv), one row per number or statement to judge.

Columns
  id, artifact, table_row, table_col, setting, metric, unit   what is judged and where the paper prints it
  value, pm            the printed value and its printed ± (text, exactly as printed; empty for claims/figures)
  pm_reading           what the paper says its ± is: std (over `runs` runs), se, ci95 (a 95% interval), or unknown
                       (the paper does not say); required when pm is given. Or single: the value is a printed single
                       run (one draw of a random experiment, no ±, no runs), judged against the spread of the
                       rebuilt seeds
  runs                 the number of runs behind the printed value, when the paper states it
  tolerance            absolute floor of the tolerance: half a unit of the last printed decimal of `value`
  experiment           PAPER.NAME of the experiment that rebuilds it
  key                  metric key in that experiment's summary.json, or `check:NAME[,NAME...]` for rows judged by
                       pass/fail checks (claims, figures' visible properties, implementation checks)
  row                  printed      a number or sentence the paper states: the only rows counted as reproduced
                       check        an implementation check (simulation vs our own closed form, a library cross-check,
                                    the replication inventories' reference values (docs/notes/), inputs read back, a
                                    protocol on stand-in data)
                       consistency  the paper's own statements checked against each other (a failure is a paper
                                    issue, not a deviation of ours)
  ci                   true: the CI replication check fails unless this row is reproduced (printed) / passes
  needs                what a rebuild needs that this machine may lack (data, a later issue)
  note                 known paper issue / gap relevant to this row

How rows are judged (statuses, the tolerance rule) is fedrepro.report.verdict. The loader validates every row
completely and reports all bad rows at once, each with its line and what to do.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from fedrepro.errors import ConfigError
from fedrepro.report.verdict import PM_READINGS, SINGLE

COLUMNS = [
    "id",
    "artifact",
    "table_row",
    "table_col",
    "setting",
    "metric",
    "unit",
    "value",
    "pm",
    "pm_reading",
    "runs",
    "tolerance",
    "experiment",
    "key",
    "row",
    "ci",
    "needs",
    "note",
]
ROW_TYPES = ("printed", "check", "consistency")


@dataclass(frozen=True)
class Target:
    paper: str
    id: str
    artifact: str
    table_row: str
    table_col: str
    setting: str
    metric: str
    unit: str
    value: float | None
    value_text: str
    pm: float | None
    pm_text: str
    pm_reading: str
    runs: int | None
    tolerance: float | None
    experiment: str
    key: str
    row: str
    ci: bool
    needs: str
    note: str

    @property
    def check_names(self) -> list[str] | None:
        return self.key[len("check:") :].split(",") if self.key.startswith("check:") else None

    @property
    def exp_name(self) -> str:
        return self.experiment.split(".", 1)[1]

    @property
    def printed(self) -> bool:
        return self.row == "printed"


class _Row:
    """One CSV row being validated: collects every problem instead of stopping at the first."""

    def __init__(self, where: str, raw: dict, problems: list[str]):
        self.where, self.raw, self.problems = where, raw, problems

    def bad(self, column: str, what: str) -> None:
        self.problems.append(f"{self.where}: {column}: {what}")

    def text(self, column: str) -> str:
        return (self.raw.get(column) or "").strip()

    def number(self, column: str, *, minimum: float | None = None, integer: bool = False) -> float | None:
        text = self.text(column)
        if not text:
            return None
        try:
            x = int(text) if integer else float(text)
        except ValueError:
            self.bad(column, f"not {'an integer' if integer else 'a number'}: {text!r}")
            return None
        if not integer and not math.isfinite(x):
            self.bad(column, f"not a finite number: {text!r}")
            return None
        if minimum is not None and x < minimum:
            self.bad(column, f"must be >= {minimum:g}, got {text}")
            return None
        return x


def _parse(r: _Row, paper: str, experiments: Collection[str] | None) -> Target | None:
    before = len(r.problems)
    if None in r.raw.values() or None in r.raw:  # csv.DictReader: a short row has None values, a long one a None key
        r.bad("columns", f"expected {len(COLUMNS)} comma-separated fields; quote fields that contain commas")
        return None
    for column in ("id", "artifact", "experiment", "key"):
        if not r.text(column):
            r.bad(column, "required")
    experiment, key = r.text("experiment"), r.text("key")
    if experiment and not experiment.startswith(f"{paper}."):
        r.bad("experiment", f"must be {paper}.<name>, got {experiment!r}")
    elif experiments is not None and experiment and experiment.split(".", 1)[1] not in experiments:
        r.bad(
            "experiment",
            f"no experiment {experiment.split('.', 1)[1]!r} in config/{paper}.yaml (known: "
            f"{', '.join(sorted(experiments))})",
        )
    if key.startswith("check:") and not all(key[len("check:") :].split(",")):
        r.bad("key", f"check:NAME[,NAME...] with non-empty names, got {key!r}")
    row = r.text("row")
    if row not in ROW_TYPES:
        r.bad("row", f"must be one of {', '.join(ROW_TYPES)}, got {row!r}")
    ci = r.text("ci")
    if ci not in ("true", "false"):
        r.bad("ci", f"must be true or false, got {ci!r}")
    value = r.number("value")
    pm = r.number("pm", minimum=0.0)
    tolerance = r.number("tolerance", minimum=0.0)
    runs = r.number("runs", minimum=1, integer=True)
    reading = r.text("pm_reading")
    if reading == SINGLE:
        for column in ("pm", "runs"):
            if r.text(column):
                r.bad(
                    column,
                    f"a printed single run (pm_reading {SINGLE}) is one draw with no ± and no run count: empty "
                    f"{column}, or give the printed ± its reading ({', '.join(PM_READINGS)}) instead of {SINGLE}",
                )
        if value is None:
            r.bad("value", f"pm_reading {SINGLE} (a printed single run) without a printed value")
    elif pm is not None and reading not in PM_READINGS:
        r.bad(
            "pm_reading",
            f"the printed ± needs a reading, one of {', '.join(PM_READINGS)} (unknown when the "
            f"paper does not say what it is), got {reading!r}",
        )
    elif pm is None and reading:
        r.bad(
            "pm_reading",
            f"{reading!r} given without a printed ± (pm): give pm, write {SINGLE} for a printed single run (one "
            "draw, no ±), or leave it empty",
        )
    if pm is not None and value is None:
        r.bad("pm", "a printed ± without a printed value")
    if value is None and not key.startswith("check:") and (row == "printed" or ci == "true"):
        r.bad("value", f"a {'printed' if row == 'printed' else 'CI'} row needs a printed value or a check: key")
    if len(r.problems) > before:
        return None
    return Target(
        paper=paper,
        id=r.text("id"),
        artifact=r.text("artifact"),
        table_row=r.text("table_row"),
        table_col=r.text("table_col"),
        setting=r.text("setting"),
        metric=r.text("metric"),
        unit=r.text("unit"),
        value=value,
        value_text=r.text("value"),
        pm=pm,
        pm_text=r.text("pm"),
        pm_reading=reading,
        runs=int(runs) if runs is not None else None,
        tolerance=tolerance,
        experiment=experiment,
        key=key,
        row=row,
        ci=ci == "true",
        needs=r.text("needs"),
        note=r.text("note"),
    )


def load_registry(path: str | Path, paper: str, experiments: Collection[str] | None = None) -> list[Target]:
    """The validated rows of one paper's registry. ``experiments``: the experiment names of config/<paper>.yaml
    (when given, every row must name one of them). Every bad row is reported, in one ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"targets.{paper}: registry file not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows, end = [], 1
            for raw in reader:
                start, end = end + 1, reader.line_num
                rows.append((start, end, raw))
            header = reader.fieldnames
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path}: not a readable CSV file ({exc})") from None
    if header != COLUMNS:
        raise ConfigError(f"{path}: header must be exactly: {','.join(COLUMNS)} (got {','.join(header or [])})")
    shape = [_misshapen(path, start, end, raw) for start, end, raw in rows]
    shape = [m for m in shape if m]
    if shape:  # the columns of such a row are shifted: nothing in it can be read
        raise ConfigError(shape[0] + (f" (and {len(shape) - 1} more such row(s))" if len(shape) > 1 else ""))
    out, seen, problems = [], {}, []
    for line, _, raw in rows:
        r = _Row(f"{path}:{line} ({(raw.get('id') or '').strip() or 'no id'})", raw, problems)
        t = _parse(r, paper, experiments)
        if t is None:
            continue
        if t.id in seen:
            r.bad("id", f"duplicate of line {seen[t.id]}")
            continue
        seen[t.id] = line
        out.append(t)
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ConfigError(
            f"{path}: {len(problems)} bad registry row(s); fix them (columns: see "
            "src/fedrepro/report/registry.py):\n  " + "\n  ".join(problems[:20]) + more
        )
    return out


def _misshapen(path: Path, start: int, end: int, raw: Mapping) -> str | None:
    """Why the CSV row on lines ``start``-``end`` cannot be read column by column: another number of fields than the
    header (a stray comma, or a stray quote that swallows the fields up to the next quote), or a quoted field running
    over several lines (no registry field holds a line break); None when it can."""
    fields = len(COLUMNS) - sum(v is None for v in raw.values()) + len(raw.get(None) or [])
    if end > start:
        return (
            f"{path}:{start}: a quoted field runs on to line {end} (a stray or unclosed quote); registry fields hold "
            "no line breaks: fix the quoting on that line"
        )
    if fields != len(COLUMNS):
        return (
            f"{path}:{start}: {fields} fields where the header has {len(COLUMNS)} (a stray quote or comma shifts the "
            "columns); fix that line"
        )
    return None


def check_keys(path: str | Path, targets: list[Target], experiments: Mapping[str, Mapping]) -> None:
    """Every row's key is one its experiment's kind declares it produces (a metric key, or check names); all rows
    that are not are reported at once. ``experiments``: the experiments of config/<paper>.yaml (name -> entry)."""
    from fedrepro.experiments import get_kind

    problems = []
    for t in targets:
        kind = get_kind(experiments[t.exp_name]["kind"])
        if t.check_names is not None:
            bad = [c for c in t.check_names if not kind.produces_check(c)]
            what, known = "check(s)", kind.checks
        else:
            bad = [] if kind.produces_metric(t.key) else [t.key]
            what, known = "metric", kind.metrics
        if bad:
            problems.append(
                f"{path} ({t.id}): key: {what} {', '.join(bad)} not produced by kind {kind.name} of "
                f"{t.experiment} (it declares: {', '.join(known) or 'none'})"
            )
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ConfigError(
            f"{path}: {len(problems)} registry row(s) name what no kind produces; fix the key:\n  "
            + "\n  ".join(problems[:20])
            + more
        )
