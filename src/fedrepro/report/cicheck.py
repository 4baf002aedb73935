"""CI replication check: exit 1 when a target flagged `ci=true` is not reproduced (deviates or was not built)."""

from __future__ import annotations

import csv
from pathlib import Path

from fedrepro.errors import FedreproError
from fedrepro.report.status import REPRODUCED


def ci_check(report_csv: Path) -> int:
    if not report_csv.is_file():
        raise FedreproError(f"replication report not found: {report_csv} (build it with the `report` rule first)")
    with open(report_csv, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["ci"] == "true"]
    if not rows:
        raise FedreproError(f"{report_csv}: no target is flagged for CI; the check would prove nothing")
    bad = [r for r in rows if r["status"] != REPRODUCED]
    for r in rows:
        mark = "ok  " if r["status"] == REPRODUCED else "FAIL"
        print(f"{mark} {r['paper']}.{r['id']:<22} {r['status']:<11} printed={r['printed']:<14} "
              f"rebuilt={r['rebuilt'][:10]:<10} {r['reason'][:90]}")
    print(f"CI replication check: {len(rows) - len(bad)} reproduced, {len(bad)} not reproduced "
          f"(of {len(rows)} CI targets)")
    return 1 if bad else 0
