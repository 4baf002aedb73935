"""A paper's tables rebuilt in the paper's layout: results/tables/<paper>/table<N>.{csv,md}.

Rows and columns come from the registry's table_row / table_col in printed order. Each cell holds the rebuilt
mean ± std over seeds (or "not run"), and the Markdown file puts the printed table beside it for comparison.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Mapping

from fedrepro.config import resolve_path
from fedrepro.errors import ConfigError
from fedrepro.report.fmt import fmt_pm, printed
from fedrepro.report.registry import load_registry
from fedrepro.report.status import Result, evaluate_paper
from fedrepro.report.verdict import NOT_RUN
from fedrepro.runio import atomic_write


def table_slug(artifact: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", artifact.lower())


def table_artifacts(cfg: Mapping, paper: str) -> list[str]:
    """Table artifacts of a paper (rows placed by table_row/table_col), in registry order (e.g. ['Table 1']), and
    extra tables beyond the paper ("Extra table: ...", e.g. a table's protocol on data available offline).
    A number printed in a caption ("Table 3 caption") is a target but lays out no table."""
    seen: list[str] = []
    for t in load_registry(resolve_path(cfg["targets"][paper]), paper):
        if t.artifact.startswith(("Table", "Extra table")) and t.table_row and t.artifact not in seen:
            seen.append(t.artifact)
    return seen


def _layout(results: list[Result]):
    rows, cols, cells = [], [], {}
    for r in results:
        t = r.target
        if t.table_row not in rows:
            rows.append(t.table_row)
        if t.table_col not in cols:
            cols.append(t.table_col)
        cells[(t.table_row, t.table_col)] = r
    return rows, cols, cells


def _rebuilt(r: Result | None) -> str:
    if r is None:
        return ""
    if r.status == NOT_RUN:
        return "not run"
    return fmt_pm(r.rebuilt, r.rebuilt_se, r.target.value_text)


def _md(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]


def write_tables(cfg: Mapping, paper: str, out_dir: Path, scale: str | None = None,
                 only: str | None = None) -> list[Path]:
    scale = scale or cfg["scale"]
    results = evaluate_paper(cfg, paper, scale)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    artifacts = table_artifacts(cfg, paper)
    if only is not None:
        if only not in {table_slug(a) for a in artifacts}:
            raise ConfigError(f"{paper}: no table {only!r} in the registry (tables: "
                              f"{', '.join(table_slug(a) for a in artifacts)})")
        artifacts = [a for a in artifacts if table_slug(a) == only]
    for artifact in artifacts:
        rs = [r for r in results if r.target.artifact == artifact]
        rows, cols, cells = _layout(rs)
        slug = table_slug(artifact)
        header = ["Method"] + cols
        rebuilt = [[row] + [_rebuilt(cells.get((row, c))) for c in cols] for row in rows]
        paper_t = [[row] + [printed(cells[(row, c)].target.value_text, cells[(row, c)].target.pm_text)
                            if (row, c) in cells else "" for c in cols] for row in rows]
        status = [[row] + [cells[(row, c)].status if (row, c) in cells else "" for c in cols] for row in rows]

        def write_csv(p: Path) -> None:
            with open(p, "w", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh, lineterminator="\n")
                w.writerow(["row", "column", "printed", "rebuilt_mean", "rebuilt_std", "rebuilt_se", "n", "status",
                            "scale", "target"])
                for r in rs:
                    t = r.target
                    w.writerow([t.table_row, t.table_col, printed(t.value_text, t.pm_text),
                                "" if r.rebuilt is None else repr(r.rebuilt),
                                "" if r.rebuilt_std is None else repr(r.rebuilt_std),
                                "" if r.rebuilt_se is None else repr(r.rebuilt_se), "" if r.n is None else r.n,
                                r.status, r.scale, t.id])

        md = [f"# {paper} {artifact} (scale mode: {scale}; each cell's scale in the CSV)", "",
              "## Rebuilt (mean ± standard error over seeds)", "",
              *_md(header, rebuilt), "", "## Printed in the paper", "", *_md(header, paper_t), "", "## Status", "",
              *_md(header, status), ""]
        csv_path, md_path = out_dir / f"{slug}.csv", out_dir / f"{slug}.md"
        atomic_write(csv_path, write_csv)
        atomic_write(md_path, lambda p: p.write_text("\n".join(md), encoding="utf-8"))
        written += [csv_path, md_path]
    return written
