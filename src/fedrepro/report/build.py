"""The replication report: results/report/replication.{md,csv,html}, all rendered from one report model
(fedrepro.report.model).

The headline counts printed rows only (numbers and sentences the paper states), per paper and per artifact;
implementation checks and the paper's consistency with itself are tables of their own; calibrations say what was
fitted to what; not-run rows say what they wait for. Nothing time-dependent is written, so the same inputs give
byte-identical reports.
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Mapping
from pathlib import Path

from fedrepro import paths
from fedrepro.errors import ResultError
from fedrepro.experiments.method_slot import ORIGIN
from fedrepro.files import atomic_write
from fedrepro.report import model as m
from fedrepro.report import verdict as v
from fedrepro.report.fmt import HEAD, WAITING, cells, printed
from fedrepro.report.page import EXTRA_TEXT, EXTRA_TITLE, render_page
from fedrepro.report.status import Result

CSV_COLUMNS = [
    "paper",
    "id",
    "row",
    "artifact",
    "table",
    "setting",
    "metric",
    "printed",
    "pm_reading",
    "rebuilt",
    "rebuilt_std",
    "rebuilt_se",
    "n",
    "diff",
    "tol",
    "status",
    "scale",
    "source",
    "ci",
    "reason",
    "command",
    "calibration",
    "evidence",
    "note",
]


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(_md(c) for c in row) + " |" for row in body
    ]


def _rel(target: Path, out_dir: Path) -> str:
    """A file of the run as linked from the report's directory."""
    return Path(os.path.relpath(target, out_dir.resolve())).as_posix()


def _count_text(rows: list[Result], statuses: tuple[str, ...]) -> str:
    c = m.count(rows, statuses)
    return f"{len(rows)} row{'' if len(rows) == 1 else 's'}: " + ", ".join(f"{c[s]} {s}" for s in statuses if c[s])


def markdown(report: m.Report, out_dir: Path) -> str:
    lines = [
        "# fedrepro replication report",
        "",
        f"Scale mode: **{report.mode}** (each experiment runs at the scale in the `scale` column: under `default` "
        "its `default_scale`, paper scale where that is cheap). Only paper-scale rows get a verdict.",
        "",
        "## Printed numbers and statements",
        "",
        *_table(
            ["paper", "printed rows", *v.PRINTED_STATUSES],
            [
                [p.paper, str(len(p.printed)), *map(str, m.count(p.printed, v.PRINTED_STATUSES).values())]
                for p in report.papers
            ],
        ),
        "",
        "## Implementation verified (checks; never counted as reproduced)",
        "",
        *_table(
            ["paper", "check rows", *v.CHECK_STATUSES],
            [
                [p.paper, str(len(p.checks)), *map(str, m.count(p.checks, v.CHECK_STATUSES).values())]
                for p in report.papers
            ],
        ),
        "",
        "## How rows are judged",
        "",
        v.RULE_TEXT,
        "",
        v.CONCLUSION_RULE_TEXT,
        "",
    ]
    issues = [(p.paper, r) for p in report.papers for r in p.issues()]
    lines += ["## Paper issues found", ""]
    lines += (
        _table(
            ["paper", "row", "what", "evidence"],
            [[paper, r.target.id, r.target.metric, " | ".join(r.evidence) or r.reason] for paper, r in issues],
        )
        if issues
        else ["None established."]
    )
    unexplained = [(p.paper, r) for p in report.papers for r in p.unexplained()]
    lines += ["", "## Deviations without forensic evidence", ""]
    lines += (
        _table(
            ["paper", "row", "metric", "reason"],
            [[paper, r.target.id, r.target.metric, r.reason] for paper, r in unexplained],
        )
        if unexplained
        else ["None: every printed row that deviates links a forensic conclusion."]
    )
    lines += ["", "## Datasets", "", *_table(m.DATASET_HEAD, report.datasets), ""]
    for p in report.papers:
        lines += [
            f"## {p.paper}: {p.title}",
            "",
            "### Printed rows by artifact",
            "",
            *_table(
                ["artifact", *v.PRINTED_STATUSES],
                [[g.artifact, *map(str, g.counts(v.PRINTED_STATUSES).values())] for g in p.groups("printed")],
            ),
            "",
        ]
        if p.tables:
            lines += [
                "### Tables in the paper's layout",
                "",
                *_table(
                    ["table", "artifact", "cells"],
                    [
                        [
                            f"[{lay.name}]({_rel(p.tables_dir / f'{lay.name}.md', out_dir)})",
                            lay.artifact,
                            _count_text(lay.results, v.ALL_STATUSES),
                        ]
                        for lay in p.tables
                    ],
                ),
                "",
            ]
        for g in p.groups("printed"):
            lines += [
                f"### {g.artifact} — {_count_text(g.rows, v.PRINTED_STATUSES)}",
                "",
                *_table(HEAD, [cells(r) for r in g.rows]),
                "",
            ]
        if p.calibrations:
            lines += [
                "### Calibrations (values the paper leaves open, fitted to printed rows)",
                "",
                *_table(
                    ["parameter", "fitted to", "how", "judged after it"],
                    [
                        [
                            c.param,
                            ", ".join(c.fitted_to),
                            c.how,
                            ", ".join(
                                r.target.id for r in p.printed if r.status == v.CALIBRATED and c.text() in r.calibration
                            )
                            or "-",
                        ]
                        for c in p.calibrations
                    ],
                ),
                "",
            ]
        for row_type in ("consistency", "check"):
            for g in p.groups(row_type):
                lines += [
                    f"### {m.ROW_TYPES[row_type]}: {g.artifact} — {_count_text(g.rows, v.CHECK_STATUSES)}",
                    "",
                    *_table(HEAD, [cells(r) for r in g.rows]),
                    "",
                ]
        for wait in p.waiting_for_data():
            lines += [
                f"### {WAITING}: {', '.join(wait.datasets)} ({len(wait.rows)} rows)",
                "",
                f"Fetch (networked machine, or a mirror): `{wait.fetch}`, then:",
                "",
                *_table(
                    ["experiment", "rows", "rebuild"],
                    [[exp, str(n), f"`{cmd}`"] for exp, (cmd, n) in wait.experiments().items()],
                ),
                "",
            ]
        if p.gaps:
            lines += [
                f"### Defaults chosen where the paper is silent ({p.config_file}, `# GAP:` comments)",
                "",
                *_table(["key", "value", "why"], [[f"`{k}`", val, why] for k, val, why in p.gaps]),
                "",
            ]
        if p.figures:
            lines += [f"### Figures ({p.paper})", ""]
            for f in p.figures:
                judged = ", ".join(f"{r.target.id} ({r.status})" for r in f.rows)
                lines += [
                    f"**{f.artifact}** — {f.caption}",
                    "",
                    f"![{f.artifact}]({_rel(f.png, out_dir)})",
                    "",
                    *([f"Rows: {judged}", ""] if judged else []),
                ]
    return "\n".join(lines)


def write_csv(path: Path, report: m.Report) -> None:
    def num(x):
        return "" if x is None else repr(x)

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for p in report.papers:
            table = {r.target.id: lay.name for lay in p.tables for r in lay.results}
            for r in p.results:
                t = r.target
                w.writerow(
                    [
                        p.paper,
                        t.id,
                        t.row,
                        t.artifact,
                        table.get(t.id, ""),
                        t.setting,
                        t.metric,
                        printed(t.value_text, t.pm_text),
                        t.pm_reading,
                        num(r.rebuilt),
                        num(r.rebuilt_std),
                        num(r.rebuilt_se),
                        "" if r.n is None else str(r.n),
                        num(r.diff),
                        num(r.tol),
                        r.status,
                        r.scale,
                        r.source,
                        str(t.ci).lower(),
                        r.reason,
                        r.command,
                        r.calibration,
                        " | ".join(r.evidence),
                        t.note,
                    ]
                )


def compared_table(d: Path) -> dict:
    """One ``compare`` output directory read from its structured files (table.csv, differences.csv, compare.json):
    experiment, scale, path, the table (header and rows: mean ± se (n) per cell, or "failed"), the method's failures
    with their reasons, and the paired differences (mean ± se, p of the paired t test, resolved by Holm)."""
    import json

    import pandas as pd

    d = Path(d)
    try:
        record = json.loads((d / "compare.json").read_text(encoding="utf-8"))
        cells = pd.read_csv(d / "table.csv", keep_default_na=False, na_values=[""])
        diffs = pd.read_csv(d / "differences.csv") if (d / "differences.csv").stat().st_size else pd.DataFrame()
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ResultError(f"{d}: not a compare output (table.csv, differences.csv, compare.json: {exc})") from None
    columns = list(dict.fromkeys(cells["column"]))
    header, rows = ["method", "row", *columns], []
    for (method, origin), g in cells.groupby(["method", "origin"], sort=False):
        by = g.set_index("column")

        def cell(c, by=by):
            if c not in by.index:
                return "—"
            r = by.loc[c]
            if isinstance(r.get("failed"), str) and r["failed"]:
                return "failed"
            return "—" if pd.isna(r["mean"]) else f"{r['mean']:.2f} ± {r['se']:.2f} (n={int(r['n'])})"

        rows.append([method, ORIGIN.get(origin, origin), *(cell(c) for c in columns)])
    mine = record["method"]["row"]
    failed = sorted({f for f in cells.loc[cells["method"] == mine, "failed"].dropna() if isinstance(f, str) and f})
    differences = [
        [
            r["baseline"],
            r["column"],
            "—" if r["n"] == 0 else f"{r['diff']:+.2f} ± {r['se']:.2f} (n={int(r['n'])})",
            "—" if pd.isna(r.get("p_value")) else f"{r['p_value']:.3g}",
            "yes" if bool(r["resolved"]) else "no",
        ]
        for _, r in diffs.iterrows()
    ]
    return {
        "experiment": record["experiment"],
        "scale": record["scale"],
        "path": d / "table.md",
        "header": header,
        "rows": rows,
        "failures": failed,
        "differences": differences,
        "method": mine,
        "spec": record["method"]["spec"],
    }


DIFF_HEAD = ["baseline", "column", "difference", "p (paired t)", "resolved (Holm)"]


def extra_methods(cfg: Mapping, compared: list[Path] | None = None) -> list[dict]:
    """The ``compare`` tables of the methods of config ``extra_methods`` that the workflow built under results/extra/
    (none when none is configured), and of the ``compare`` output directories ``compared`` (``report --compared``),
    read from their structured files (:func:`compared_table`): per method its name, FILE:CLASS and tables. Reported
    apart from the papers' rows and never judged."""
    out = []
    for name in sorted(cfg.get("extra_methods") or {}):
        pattern = paths.path(cfg, "extra_table", method=name, paper="*", exp="*", scale="*", ext="md")
        tables = [compared_table(Path(p).parent) for p in sorted(glob.glob(str(pattern)))]
        out.append({"name": name, "spec": cfg["extra_methods"][name], "tables": tables})
    by_spec: dict[str, dict] = {}
    for d in compared or []:
        t = compared_table(Path(d))
        by_spec.setdefault(t["spec"], {"name": t["method"], "spec": t["spec"], "tables": []})["tables"].append(t)
    return out + list(by_spec.values())


def extra_markdown(extra: list[dict], out_dir: Path) -> list[str]:
    """The Markdown report's section on :func:`extra_methods` (nothing when there are none)."""
    if not extra:
        return []
    lines = ["", f"## {EXTRA_TITLE}", "", EXTRA_TEXT]
    for method in extra:
        lines += ["", f"### {method['name']} ({method['spec']})", ""]
        if not method["tables"]:
            lines += ["No table built yet: `snakemake --cores 2` with this `extra_methods` builds them."]
        for t in method["tables"]:
            lines += [
                f"**{t['experiment']}** ({t['scale']}; [table]({_rel(t['path'], out_dir)}))",
                "",
                *_table(t["header"], t["rows"]),
                "",
            ]
            if t["failures"]:
                lines += [f"{t['method']} failed: " + "; ".join(t["failures"]), ""]
            if t["differences"]:
                lines += [f"{t['method']} minus each baseline:", "", *_table(DIFF_HEAD, t["differences"]), ""]
    return lines


def write_report(cfg: Mapping, out_dir: Path, mode: str | None = None, compared: list[Path] | None = None) -> m.Report:
    """The report (md, csv, html) in ``out_dir``; ``compared``: ``compare`` output directories shown in the section
    on methods from outside the papers, beside those of config ``extra_methods``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = m.build(cfg, mode)
    atomic_write(out_dir / paths.report_name("csv"), lambda p: write_csv(p, report))
    extra = extra_methods(cfg, compared)
    md = "\n".join([markdown(report, out_dir), *extra_markdown(extra, out_dir)])
    atomic_write(out_dir / paths.report_name("md"), lambda p: p.write_text(md, encoding="utf-8"))
    page = render_page(report, extra)
    atomic_write(out_dir / paths.report_name("html"), lambda p: p.write_text(page, encoding="utf-8"))
    return report
