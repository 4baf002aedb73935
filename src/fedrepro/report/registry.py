"""The target registry: one CSV per paper (config/targets/<paper>.csv), one row per printed number.

Columns
  id, artifact, table_row, table_col, setting, metric, unit   what the paper prints and where
  value, pm            the printed value and its printed ± (text, exactly as printed; empty for figures/claims)
  tolerance            absolute floor of the tolerance: half a unit of the last printed decimal of `value`
  experiment           PAPER.NAME of the experiment that rebuilds it
  key                  metric key in that experiment's summary.json, or `check:NAME[,NAME...]` for rows judged by
                       pass/fail checks (figures, claims)
  ci                   true: the CI replication check fails unless this target is reproduced
  needs                what a rebuild needs that this machine may lack (data, a later issue)
  note                 known paper issue / gap relevant to this number

Tolerance rule (written once, here): a numeric target is *reproduced* when
    |rebuilt mean − printed value| <= max(tolerance, 2·sqrt(pm² + rebuilt_std²))
i.e. within two combined standard deviations of the paper's ± and our seed-to-seed std (both read as the std of
a single run), and never tighter than the printed rounding.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from fedrepro.errors import ConfigError

COLUMNS = ["id", "artifact", "table_row", "table_col", "setting", "metric", "unit", "value", "pm", "tolerance",
           "experiment", "key", "ci", "needs", "note"]
K_SIGMA = 2.0


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
    tolerance: float | None
    experiment: str
    key: str
    ci: bool
    needs: str
    note: str

    @property
    def check_names(self) -> list[str] | None:
        return self.key[len("check:"):].split(",") if self.key.startswith("check:") else None

    @property
    def exp_name(self) -> str:
        return self.experiment.split(".", 1)[1]


def effective_tolerance(t: Target, rebuilt_std: float | None) -> float:
    spread = K_SIGMA * math.sqrt((t.pm or 0.0) ** 2 + (rebuilt_std or 0.0) ** 2)
    return max(t.tolerance or 0.0, spread)


def _num(text: str, where: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{where}: not a number: {text!r}") from None


def load_registry(path: str | Path, paper: str) -> list[Target]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"targets.{paper}: registry file not found: {path}")
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames != COLUMNS:
            raise ConfigError(f"{path}: header must be exactly: {','.join(COLUMNS)} (got {reader.fieldnames})")
        rows = list(reader)
    out, seen = [], set()
    for i, r in enumerate(rows, start=2):
        where = f"{path}:{i} ({r['id']})"
        if not r["id"] or r["id"] in seen:
            raise ConfigError(f"{where}: id: missing or duplicate")
        seen.add(r["id"])
        if not r["experiment"].startswith(f"{paper}."):
            raise ConfigError(f"{where}: experiment: must be {paper}.<name>, got {r['experiment']!r}")
        if not r["key"]:
            raise ConfigError(f"{where}: key: required")
        if r["ci"] not in ("true", "false"):
            raise ConfigError(f"{where}: ci: must be true or false, got {r['ci']!r}")
        value = _num(r["value"], where + " value")
        if value is None and not r["key"].startswith("check:") and r["ci"] == "true":
            raise ConfigError(f"{where}: ci: a CI target needs a printed value or a check key")
        out.append(Target(
            paper=paper, id=r["id"], artifact=r["artifact"], table_row=r["table_row"], table_col=r["table_col"],
            setting=r["setting"], metric=r["metric"], unit=r["unit"], value=value, value_text=r["value"],
            pm=_num(r["pm"], where + " pm"), pm_text=r["pm"].strip(), tolerance=_num(r["tolerance"], where + " tolerance"),
            experiment=r["experiment"], key=r["key"], ci=r["ci"] == "true", needs=r["needs"], note=r["note"],
        ))
    return out
