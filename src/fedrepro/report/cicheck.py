"""CI replication check: exit 1 when a row flagged `ci=true` is not good (a printed row not reproduced, or reproduced
after calibration; a check or consistency row that does not pass; a row not built), or when any printed row deviates
without a built forensic conclusion (fedrepro.audit.forensics)."""

from __future__ import annotations

import csv
from pathlib import Path

from fedrepro.errors import FedreproError, ResultError
from fedrepro.report.verdict import DEVIATES, GOOD

COLUMNS = ("paper", "id", "row", "ci", "status", "printed", "rebuilt", "reason", "evidence")  # the columns read


def ci_check(report_csv: Path) -> int:
    if not report_csv.is_file():
        raise FedreproError(f"replication report not found: {report_csv} (build it with the `report` rule first)")
    rebuild = "rebuild it with `snakemake --cores 2` or `python -m fedrepro report`"
    try:
        with open(report_csv, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ResultError(f"{report_csv}: not a replication report (no column {', '.join(missing)}); {rebuild}")
            rows, unexplained = [], []
            for r in reader:
                if any(r[c] is None for c in COLUMNS):  # a row cut short
                    raise ResultError(f"{report_csv}: line {reader.line_num}: fewer columns than the header; {rebuild}")
                if r["ci"] == "true":
                    rows.append(r)
                if (
                    r["row"] == "printed"
                    and r["status"] == DEVIATES
                    and not any(
                        not e.split(": ", 1)[-1].startswith("not built") for e in r["evidence"].split(" | ") if e
                    )
                ):
                    unexplained.append(r)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultError(f"{report_csv}: cannot read the replication report ({exc}); {rebuild}") from None
    if not rows:
        raise FedreproError(f"{report_csv}: no target is flagged for CI; the check would prove nothing")
    bad = [r for r in rows if r["status"] not in GOOD]
    for r in rows:
        mark = "ok  " if r["status"] in GOOD else "FAIL"
        print(
            f"{mark} {r['paper']}.{r['id']:<28} {r['status']:<14} printed={r['printed']:<14} "
            f"rebuilt={r['rebuilt'][:10]:<10} {r['reason'][:90]}"
        )
    page = report_csv.with_suffix(".html")  # the report page beside the CSV has an anchor per row
    for r in bad:
        print(f"     {r['paper']}.{r['id']} on the report page: {page}#{r['paper']}.{r['id']}")
    print(
        f"CI replication check: {len(rows) - len(bad)} good (printed rows reproduced, checks passing), {len(bad)} not "
        f"(of {len(rows)} CI rows)"
    )
    for r in unexplained:
        print(f"FAIL {r['paper']}.{r['id']:<28} deviates without a forensic conclusion: {r['reason'][:90]}")
    if unexplained:
        print(
            f"{len(unexplained)} printed row(s) deviate with no forensic evidence (a forensic_sweep experiment naming "
            "the row, built): a deviation is explained by evidence, not prose"
        )
    return 1 if bad or unexplained else 0
