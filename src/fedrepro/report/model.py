"""The replication report as data: built once from the registries, the summaries and the configs, then rendered as
Markdown and CSV (fedrepro.report.build) and as the HTML page. Nothing here formats text for one output.

    Report          the scale mode, one PaperReport per paper, the datasets table
    PaperReport     the paper's rows split by type (printed / check / consistency), grouped by artifact, its
                    tables in the paper's layout (fedrepro.report.tables), its calibrations, the defaults chosen where
                    it is silent (GAP comments), its rebuilt figures with the rows that judge them, and its not-run
                    rows grouped by the datasets they wait for
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fedrepro import paths
from fedrepro.config import load_paper, resolve_path
from fedrepro.report import verdict as v
from fedrepro.report.gaps import gap_comments
from fedrepro.report.status import Calibration, Result, calibrations, evaluate_paper, explains, fetch_command
from fedrepro.report.tables import Layout, layouts

# the row types (fedrepro.report.registry) as the report titles them
ROW_TYPES = {
    "printed": "Printed in the paper",
    "consistency": "The paper against itself",
    "check": "Implementation checks",
}
PRIVACY_FIGURE = {
    "artifact": "Privacy accounting",
    "caption": "epsilon vs rounds per accountant or noise level (privacy stage); every epsilon with its "
    "library and version is in results/privacy/<paper>/epsilon.csv",
}


@dataclass
class Group:
    """The rows of one paper artifact (Table 3, Figure 1a, Sec. 4 text, ...) of one row type, in registry order."""

    artifact: str
    rows: list[Result]

    def counts(self, statuses: tuple[str, ...]) -> dict[str, int]:
        return count(self.rows, statuses)


@dataclass
class Figure:
    """A rebuilt figure and the rows that judge it: what the paper says about it (printed rows) and the checks of its
    experiment (see figure_rows)."""

    name: str
    artifact: str
    caption: str
    experiment: str | None
    png: Path
    rows: list[Result] = field(default_factory=list)


@dataclass
class DataWait:
    """Rows not run for want of the same datasets: the fetch command once, then one rebuild per experiment."""

    datasets: tuple[str, ...]
    fetch: str
    rows: list[Result]

    def experiments(self) -> dict[str, tuple[str, int]]:
        """experiment -> (its rebuild command after the fetch, its number of rows)."""
        out: dict[str, tuple[str, int]] = {}
        for r in self.rows:
            rebuild = r.command.removeprefix(f"{self.fetch} && ")  # status: command = fetch && rebuild
            out[r.target.experiment] = (rebuild, out.get(r.target.experiment, ("", 0))[1] + 1)
        return out


@dataclass
class PaperReport:
    paper: str
    title: str
    config_file: str
    results: list[Result]
    calibrations: list[Calibration]
    gaps: list[tuple[str, str, str]]
    figures: list[Figure]
    tables_dir: Path = Path(".")  # where the tables' own files are (results/tables/<paper>/<name>.{csv,md})

    def of_type(self, row: str) -> list[Result]:
        return [r for r in self.results if r.target.row == row]

    @property
    def printed(self) -> list[Result]:
        return self.of_type("printed")

    @property
    def checks(self) -> list[Result]:
        return self.of_type("check")

    @property
    def consistency(self) -> list[Result]:
        return self.of_type("consistency")

    def groups(self, row: str) -> list[Group]:
        return by_artifact(self.of_type(row))

    def issues(self) -> list[Result]:
        """What this project established against the paper, each with its evidence: consistency rows that fail (the
        paper against itself), and rows whose forensic sweep traced the deviation to the paper."""
        return [r for r in self.consistency if r.status == v.FAILS] + [
            r for r in self.results if r.target.row != "consistency" and any("paper issue:" in e for e in r.evidence)
        ]

    def unexplained(self) -> list[Result]:
        """Printed rows that deviate with no forensic conclusion built at paper scale: a deviation must carry evidence,
        not prose (those the paper's config lists as unexplained show the readings tried)."""
        return [r for r in self.printed if r.status == v.DEVIATES and not explained(r)]

    @property
    def tables(self) -> list[Layout]:
        return layouts(self.results)

    def waiting_for_data(self) -> list[DataWait]:
        """Rows not run for want of data, by the datasets they wait for (the fetch command said once per group)."""
        out: dict[tuple[str, ...], DataWait] = {}
        for r in self.results:
            if r.status == v.NOT_RUN and r.waits_for:
                out.setdefault(r.waits_for, DataWait(r.waits_for, fetch_command(r.waits_for), [])).rows.append(r)
        return list(out.values())


@dataclass
class Report:
    mode: str
    papers: list[PaperReport]
    datasets: list[list[str]] = field(default_factory=list)


def explained(r: Result) -> bool:
    """A forensic conclusion built at paper scale explains the row (fedrepro.report.status.explains); a row listed as
    unexplained, with the readings tried, is not explained (its listing shows beside it)."""
    return any(explains(e) for e in r.evidence)


def count(rows: list[Result], statuses: tuple[str, ...]) -> dict[str, int]:
    c = {s: 0 for s in statuses}
    for r in rows:
        c[r.status] = c.get(r.status, 0) + 1
    return c


def by_artifact(results: list[Result]) -> list[Group]:
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.target.artifact or "(no artifact)", []).append(r)
    return [Group(a, rs) for a, rs in groups.items()]


def artifact_stem(artifact: str) -> str:
    """The paper artifact a registry artifact is about: 'Extra: Figure 1 (left), implementation check' -> 'Figure 1',
    'Sec. 4 text (Q1)' -> 'Sec. 4 text', 'Extra table: Table 1 protocol on Fashion-MNIST' -> 'Table 1 protocol on
    Fashion-MNIST'."""
    stem = re.sub(r"^Extra( table)?: ", "", artifact)
    stem = re.sub(r", implementation check$", "", stem)
    return re.sub(r" \([^()]*\)$", "", stem)


def figure_rows(fig_artifact: str, experiment: str | None, results: list[Result]) -> list[Result]:
    """The rows that judge a figure: rows of the figure's experiment about the same artifact (its panels, its
    claims, its implementation checks); when none names it, every row of the experiment."""
    if experiment is None:
        return []
    own = [r for r in results if r.target.experiment == experiment]
    stem = artifact_stem(fig_artifact)
    return [r for r in own if artifact_stem(r.target.artifact) == stem] or own


def _figures(cfg: Mapping, paper: str, results: list[Result]) -> list[Figure]:
    figs = load_paper(cfg, paper).get("figures") or {}
    out = [
        Figure(
            name,
            spec["artifact"],
            spec["caption"],
            f"{paper}.{spec['experiment']}",
            paths.figure_path(cfg, paper, name, "png"),
        )
        for name, spec in figs.items()
    ]
    out.append(
        Figure(
            "privacy_epsilon",
            PRIVACY_FIGURE["artifact"],
            PRIVACY_FIGURE["caption"],
            None,
            paths.figure_path(cfg, paper, "privacy_epsilon", "png"),
        )
    )
    for f in out:
        f.rows = figure_rows(f.artifact, f.experiment, results)
    return [f for f in out if f.png.is_file()]


def paper_report(cfg: Mapping, paper: str, mode: str) -> PaperReport:
    doc = load_paper(cfg, paper)
    results = evaluate_paper(cfg, paper, mode)
    return PaperReport(
        paper=paper,
        title=doc["title"],
        config_file=str(cfg["papers"][paper]),
        results=results,
        calibrations=calibrations(paper, doc),
        gaps=gap_comments(resolve_path(cfg["papers"][paper])),
        figures=_figures(cfg, paper, results),
        tables_dir=paths.path(cfg, "table", paper=paper, table="-", ext="md").parent,
    )


DATASET_HEAD = ["dataset", "title", "available here", "sha256 pinned", "unlocks"]


def dataset_rows(cfg: Mapping, papers: list[PaperReport]) -> list[list[str]]:
    """Per catalog dataset: availability here, pinning, and which experiments/targets/partitions it unlocks."""
    from fedrepro.config import load_partitions
    from fedrepro.data.catalog import all_datasets
    from fedrepro.data.sources import is_available

    users: dict[str, list[str]] = {}
    by_paper = {p.paper: p for p in papers}
    for paper in cfg["papers"]:
        for name, e in load_paper(cfg, paper)["experiments"].items():
            rows = by_paper[paper].results if paper in by_paper else []
            n_printed = sum(r.target.experiment == f"{paper}.{name}" and r.target.printed for r in rows)
            for d in e.get("datasets") or []:
                users.setdefault(d, []).append(f"{paper}.{name} ({n_printed} printed)")
    for name, spec in load_partitions(cfg).items():
        users.setdefault(spec["dataset"], []).append(f"partition {name}")
    rows = []
    for ds_id, ds in sorted(all_datasets().items()):
        pinned = "bundled" if not ds.files else ("yes" if all(f.sha256 for f in ds.files) else "no")
        rows.append(
            [
                ds_id,
                ds.title,
                "yes" if is_available(cfg, ds_id) else "no",
                pinned,
                "; ".join(users.get(ds_id, [])) or "-",
            ]
        )
    return rows


def build(cfg: Mapping, mode: str | None = None) -> Report:
    mode = mode or cfg["scale"]
    papers = [paper_report(cfg, paper, mode) for paper in cfg.get("targets", {})]
    return Report(mode=mode, papers=papers, datasets=dataset_rows(cfg, papers))
