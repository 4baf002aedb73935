"""CI replication check: exit 1 when a row flagged `ci=true` is not good (a printed row not reproduced, or reproduced
after calibration; a check or consistency row that does not pass; a row not built, stale or invalid), when a row the
registries flag `ci=true` is missing from the report (a report cut short or of other papers proves nothing about
it), or when any printed row deviates without evidence: a forensic conclusion (fedrepro.audit.forensics) built at
paper scale (a quick grid is a wiring check and explains nothing), or the paper's listing of it as unexplained with
the readings tried (``unexplained:`` in config/<paper>.yaml)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedrepro.errors import FedreproError, ResultError
from fedrepro.report.registry import Target
from fedrepro.report.status import explains, listed_unexplained
from fedrepro.report.verdict import DEVIATES, GOOD


def flagged_targets(cfg: Mapping, papers: Iterable[str] | None = None) -> list[tuple[str, Target]]:
    """(paper, target) of every registry row flagged ``ci=true``, over ``papers`` (default: the configured ones)."""
    from fedrepro.config import resolve_path
    from fedrepro.report.registry import load_registry

    return [
        (paper, t)
        for paper in (cfg["papers"] if papers is None else papers)
        for t in load_registry(resolve_path(cfg["targets"][paper]), paper)
        if t.ci
    ]


def flagged_rows(cfg: Mapping) -> list[tuple[str, str]]:
    """(paper, id) of every registry row flagged ``ci=true``, over the configured papers."""
    return [(paper, t.id) for paper, t in flagged_targets(cfg)]


COLUMNS = ("paper", "id", "row", "ci", "status", "printed", "rebuilt", "reason", "evidence")  # the columns read


def ci_check(report_csv: Path, flagged: list[tuple[str, str]] | None = None) -> int:
    """``flagged``: the registries' CI rows (:func:`flagged_rows`), each of which must be in the report."""
    if not report_csv.is_file():
        raise FedreproError(f"replication report not found: {report_csv} (build it with the `report` rule first)")
    rebuild = "rebuild it with `snakemake --cores 2` or `python -m fedrepro report`"
    try:
        with open(report_csv, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ResultError(f"{report_csv}: not a replication report (no column {', '.join(missing)}); {rebuild}")
            rows, unexplained, listed = [], [], []
            for r in reader:
                if any(r[c] is None for c in COLUMNS):  # a row cut short
                    raise ResultError(f"{report_csv}: line {reader.line_num}: fewer columns than the header; {rebuild}")
                if r["ci"] == "true":
                    rows.append(r)
                if r["row"] == "printed" and r["status"] == DEVIATES:
                    evidence = [e for e in r["evidence"].split(" | ") if e]
                    if not any(explains(e) for e in evidence):
                        (listed if any(listed_unexplained(e) for e in evidence) else unexplained).append(r)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultError(f"{report_csv}: cannot read the replication report ({exc}); {rebuild}") from None
    if not rows:
        raise FedreproError(f"{report_csv}: no target is flagged for CI; the check would prove nothing")
    absent = sorted(set(flagged or ()) - {(r["paper"], r["id"]) for r in rows})
    for paper, rid in absent:
        print(f"FAIL {paper}.{rid:<28} flagged ci=true in its registry but missing from {report_csv}")
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
    if listed:
        print(
            f"{len(listed)} printed row(s) deviate listed as unexplained, with the readings tried (`unexplained:` in "
            "config/<paper>.yaml): shown in the report, not explained"
        )
    for r in unexplained:
        print(f"FAIL {r['paper']}.{r['id']:<28} deviates without a forensic conclusion: {r['reason'][:90]}")
    if unexplained:
        print(
            f"{len(unexplained)} printed row(s) deviate with no forensic evidence (a forensic experiment naming the "
            "row, built at paper scale) and are not listed as unexplained with the readings tried: a deviation is "
            "explained by evidence, not prose"
        )
    if absent:
        print(
            f"{len(absent)} CI row(s) of the registries are missing from the report: it was cut short, edited or built "
            "for other papers; rebuild it with `snakemake --cores 2` or `python -m fedrepro report`"
        )
    return 1 if bad or unexplained or absent else 0
