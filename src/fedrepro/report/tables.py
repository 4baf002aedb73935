"""A paper's tables rebuilt in the paper's layout: results/tables/<paper>/<name>.{csv,md}, and the same layouts on the
report page (fedrepro.report.page).

Rows and columns come from the registry's table_row / table_col in printed order. Each cell holds the rebuilt
mean ± standard error over seeds (or "not run"), and the Markdown file puts the printed table beside it for comparison.
A table printing several datasets one under the other (the same row and column for several experiments) is laid out
one block per experiment; a variance printed in parentheses after a number shares its cell.

Names (one per table, shared by these files, the report's CSV and the page's anchors): a paper table is
``table<N>`` (``Table 3`` -> ``table3``); an extra table (a paper table's protocol on data available offline,
artifact ``Extra table: ...``) is ``extra-`` and the experiment that rebuilds it (``adaped.table1_fmnist`` ->
``extra-table1-fmnist``).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fedrepro.config import resolve_path
from fedrepro.errors import ConfigError
from fedrepro.files import atomic_write
from fedrepro.report.fmt import fmt_pm, printed
from fedrepro.report.registry import Target, load_registry
from fedrepro.report.status import Result, evaluate_paper
from fedrepro.report.verdict import NOT_RUN

EXTRA = "Extra table"


def lays_out_a_table(t: Target) -> bool:
    """A row placed in a table (table_row given) of a table artifact. A number printed in a caption
    ("Table 3 caption") is a target but lays out no table."""
    return bool(t.table_row) and t.artifact.startswith(("Table", EXTRA))


def table_slug(artifact: str, experiments: Iterable[str] = ()) -> str:
    """The table's name: ``table3`` for "Table 3"; ``extra-<experiment>`` for an extra table rebuilt by one experiment
    (``extra-table1-fmnist``); otherwise the artifact's words joined by dashes."""
    exps = sorted(set(experiments))
    if artifact.startswith(EXTRA) and len(exps) == 1:
        return "extra-" + exps[0].split(".", 1)[-1].replace("_", "-").lower()
    if re.fullmatch(r"Table \d+", artifact):
        return artifact.lower().replace(" ", "")
    return re.sub(r"[^a-z0-9]+", "-", artifact.lower()).strip("-")


def table_names(targets: Iterable[Target], source: str = "the registry") -> dict[str, str]:
    """Artifact -> name of every table the rows lay out, in registry order (e.g. {'Table 1': 'table1', ...})."""
    experiments: dict[str, list[str]] = {}
    for t in targets:
        if lays_out_a_table(t):
            experiments.setdefault(t.artifact, []).append(t.experiment)
    names = {a: table_slug(a, exps) for a, exps in experiments.items()}
    seen: dict[str, str] = {}
    for artifact, name in names.items():
        if name in seen:
            raise ConfigError(
                f"{source}: tables {seen[name]!r} and {artifact!r} would both be named {name!r}; rename one artifact"
            )
        seen[name] = artifact
    return names


def table_artifacts(cfg: Mapping, paper: str) -> dict[str, str]:
    """Artifact -> name of the paper's tables (paper tables and extra tables), in registry order."""
    path = resolve_path(cfg["targets"][paper])
    return table_names(load_registry(path, paper), str(cfg["targets"][paper]))


@dataclass
class Block:
    """One block of a table (the whole table, or one dataset of a table that prints several one under the other):
    rows and columns in printed order and the rows judged in each cell, in registry order (a number and the
    variance the paper prints beside it in parentheses share a cell)."""

    label: str
    rows: list[str] = field(default_factory=list)
    cols: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], list[Result]] = field(default_factory=dict)


@dataclass
class Layout:
    """One table in the paper's layout."""

    artifact: str
    name: str
    blocks: list[Block]
    results: list[Result]


def _block_label(experiment: str, results: list[Result]) -> str:
    """What the rows of one experiment's block share before the first ';' of their setting (e.g. 'non-IID MNIST
    (3.6,1e-4)-DP'), else the experiment's name."""
    heads = {r.target.setting.split(";", 1)[0].strip() for r in results}
    return heads.pop() if len(heads) == 1 and "" not in heads else experiment


def _layout(artifact: str, name: str, results: list[Result]) -> Layout:
    """A table printing the same (row, column) for several experiments (datasets) is laid out one block per
    experiment; otherwise it is one block."""
    experiments: dict[tuple[str, str], set[str]] = {}
    for r in results:
        experiments.setdefault((r.target.table_row, r.target.table_col), set()).add(r.target.experiment)
    by_experiment = any(len(e) > 1 for e in experiments.values())
    blocks: dict[str, list[Result]] = {}
    for r in results:
        blocks.setdefault(r.target.experiment if by_experiment else "", []).append(r)
    out = []
    for exp, rs in blocks.items():
        block = Block(_block_label(exp, rs) if exp else "")
        cols_of_row: dict[str, list[str]] = {}
        for r in rs:
            t = r.target
            if t.table_col not in cols_of_row.setdefault(t.table_row, []):
                cols_of_row[t.table_row].append(t.table_col)
            block.cells.setdefault((t.table_row, t.table_col), []).append(r)
        block.rows = list(cols_of_row)
        block.cols = _merged_order(list(cols_of_row.values()))
        out.append(block)
    return Layout(artifact, name, out, results)


def _merged_order(sequences: list[list[str]]) -> list[str]:
    """One order of the columns consistent with every row's (each row lists its columns in printed order, but a row
    may skip some, e.g. a non-private baseline has no private column): the order of first appearance, except that a
    column some row prints after another never comes before it. Inconsistent rows keep the order of first appearance."""
    first = list(dict.fromkeys(c for seq in sequences for c in seq))
    after: dict[str, set[str]] = {c: set() for c in first}  # column -> the columns that must come before it
    for seq in sequences:
        for i, c in enumerate(seq):
            after[c].update(seq[:i])
    order: list[str] = []
    while len(order) < len(first):
        ready = [c for c in first if c not in order and after[c] <= set(order)]
        if not ready:
            return first
        order.append(ready[0])
    return order


def layouts(results: list[Result]) -> list[Layout]:
    """The tables the results lay out, in registry order."""
    names = table_names(r.target for r in results)
    rows: dict[str, list[Result]] = {a: [] for a in names}
    for r in results:
        if lays_out_a_table(r.target):
            rows[r.target.artifact].append(r)
    return [_layout(a, names[a], rs) for a, rs in rows.items()]


def in_cell(parts: list[str]) -> str:
    """The texts of one cell as the paper prints them: the first, then the others in parentheses."""
    return parts[0] + "".join(f" ({p})" for p in parts[1:]) if parts else ""


def _rebuilt(r: Result | None) -> str:
    if r is None:
        return ""
    if r.status == NOT_RUN:
        return "not run"
    return fmt_pm(r.rebuilt, r.rebuilt_se, r.target.value_text)


def _md(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body
    ]


def write_tables(
    cfg: Mapping, paper: str, out_dir: Path, scale: str | None = None, only: str | None = None
) -> list[Path]:
    scale = scale or cfg["scale"]
    tables = layouts(evaluate_paper(cfg, paper, scale))
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if only is not None:
        if only not in {lay.name for lay in tables}:
            raise ConfigError(
                f"{paper}: no table {only!r} in the registry (tables: {', '.join(lay.name for lay in tables)})"
            )
        tables = [lay for lay in tables if lay.name == only]
    for lay in tables:
        md = [f"# {paper} {lay.artifact} (scale mode: {scale}; each cell's scale in the CSV)", ""]
        for block in lay.blocks:
            header = ["Method"] + block.cols
            rows = [(row, [block.cells.get((row, c), []) for c in block.cols]) for row in block.rows]
            title = f" — {block.label}" if block.label else ""
            md += [
                f"## Rebuilt{title} (mean ± standard error over seeds)",
                "",
                *_md(header, [[row] + [in_cell([_rebuilt(r) for r in rs]) for rs in cells] for row, cells in rows]),
                "",
                f"## Printed in the paper{title}",
                "",
                *_md(
                    header,
                    [
                        [row] + [in_cell([printed(r.target.value_text, r.target.pm_text) for r in rs]) for rs in cells]
                        for row, cells in rows
                    ],
                ),
                "",
                f"## Status{title}",
                "",
                *_md(header, [[row] + [in_cell([r.status for r in rs]) for rs in cells] for row, cells in rows]),
                "",
            ]

        def write_csv(p: Path, blocks: list[Block] = lay.blocks) -> None:
            with open(p, "w", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh, lineterminator="\n")
                w.writerow(
                    [
                        "block",
                        "row",
                        "column",
                        "printed",
                        "rebuilt_mean",
                        "rebuilt_std",
                        "rebuilt_se",
                        "n",
                        "status",
                        "scale",
                        "target",
                    ]
                )
                for block, r in ((b, r) for b in blocks for rs in b.cells.values() for r in rs):
                    t = r.target
                    w.writerow(
                        [
                            block.label,
                            t.table_row,
                            t.table_col,
                            printed(t.value_text, t.pm_text),
                            "" if r.rebuilt is None else repr(r.rebuilt),
                            "" if r.rebuilt_std is None else repr(r.rebuilt_std),
                            "" if r.rebuilt_se is None else repr(r.rebuilt_se),
                            "" if r.n is None else r.n,
                            r.status,
                            r.scale,
                            t.id,
                        ]
                    )

        csv_path, md_path = out_dir / f"{lay.name}.csv", out_dir / f"{lay.name}.md"
        atomic_write(csv_path, write_csv)
        text = "\n".join(md)
        atomic_write(md_path, lambda p, text=text: p.write_text(text, encoding="utf-8"))
        written += [csv_path, md_path]
    return written
