"""The replication report as the page a researcher reads: results/report/replication.html, one self-contained file
(inline CSS and a little inline JS, figures as data URIs, nothing fetched), rendered from the report model
(fedrepro.report.model), the same one the Markdown report is rendered from.

Per paper: a headline of printed rows by status; the paper issues this project found; every table in the paper's
layout (one cell per number: printed over rebuilt ± se (n), coloured by status; hovering a cell shows its row);
every rebuilt figure beside the rows that judge it; then every row, grouped by artifact and collapsed, each with the
anchor ``#<paper>.<id>`` (a long note piece many rows carry is written once, in the paper's list of shared notes,
and linked from each row); calibrations; rows waiting for data, grouped by the datasets they need with the fetch
command once; the defaults chosen where the paper is silent. A filter bar narrows everything to one paper, artifact
or status ("only deviates"). The template is templates/page.html.j2 (with page.css and page.js inlined).
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from pathlib import Path

import jinja2
from PIL import Image

from fedrepro.report import model as m
from fedrepro.report import verdict as v
from fedrepro.report.fmt import HEAD, WAITING, fmt_value, note_parts, printed, rebuilt_text, value_cells
from fedrepro.report.status import Result

TEMPLATES = Path(__file__).with_name("templates")
# the section on methods from outside the papers (config extra_methods), in the page and the Markdown report
EXTRA_TITLE = "Methods from outside the papers (extra rows; never judged)"
EXTRA_TEXT = (
    "Each table is a paper experiment's protocol with a method of config `extra_methods` as one more row beside the "
    "paper's methods of the same runs (python -m fedrepro compare; README: Compare your method). These rows are not "
    "the papers' and are never compared with a printed value."
)

OPEN_UP_TO = 30  # groups and tables with more rows than this start collapsed (FedHDP's tables have up to 261)


def status_class(status: str) -> str:
    return "st-" + status.replace(" ", "-")


def anchor(r: Result) -> str:
    """The row's anchor, ``<paper>.<id>`` (the report's CSV and the CI check name rows the same way)."""
    return f"{r.target.paper}.{r.target.id}"


def cell_text(r: Result) -> tuple[str, str]:
    """A table cell: what the paper prints and what was rebuilt (mean ± se (n), or the status when nothing was)."""
    t = r.target
    return printed(t.value_text, t.pm_text, t.unit) or "—", rebuilt_text(r) or r.status


def hover_text(r: Result) -> str:
    """The cell's tooltip without script: status, the tolerance it was judged with and how the printed value was
    read."""
    parts = [f"{r.target.id}: {r.status}"]
    if r.diff is not None:
        parts.append(f"diff {fmt_value(r.diff, r.target.value_text)}, tol {fmt_value(r.tol, r.target.value_text)}")
    if r.reading and r.target.pm_reading:  # what the tolerance was built from: the printed ±, or a single run
        parts.append(r.reading)
    return "; ".join(parts)


def counts(rows: list[Result], statuses: tuple[str, ...] = v.ALL_STATUSES) -> list[tuple[str, int]]:
    """(status, count) of the statuses that occur, in the order of ``statuses``."""
    return [(s, n) for s, n in m.count(rows, statuses).items() if n]


# A note piece (fmt.note_parts, the row's evidence among them, which the lists of issues and deviations show) on
# SHARED_ROWS rows of a paper or more and at least SHARED_CHARS long is written once, in the paper's list of shared
# notes, and each row links to it ("[note 3]"; the hover tip and an opened row show its text): a listing of the
# readings tried, or how a single printed run is read, otherwise repeats on hundreds of rows and costs the
# self-contained page ~0.5 MB.
SHARED_ROWS = 3
SHARED_CHARS = 60


def shared_notes(rows: list[Result]) -> dict[str, int]:
    """text -> its number (1, 2, ... in order of first use) of the note pieces the page writes once for ``rows``."""
    uses: Counter[str] = Counter()
    for r in rows:
        uses.update(list(dict.fromkeys(note_parts(r))))  # a row counts once per text; its evidence is among them
    shared = [t for t, n in uses.items() if n >= SHARED_ROWS and len(t) >= SHARED_CHARS]
    return {t: i for i, t in enumerate(shared, 1)}


PAGE_COLORS = 64  # a figure's colours on the page: a palette PNG is ~3x smaller than matplotlib's RGBA one


def page_png(png: Path) -> bytes:
    """The figure as the page embeds it: the same pixels reduced to a palette of PAGE_COLORS colours (the plots
    have a few line colours plus their anti-aliasing; the PNG file beside the page keeps every colour). Keeps the
    self-contained page a few MB with every paper's figures in it."""
    with Image.open(png) as im:
        palette = im.convert("RGB").quantize(colors=PAGE_COLORS, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return out.getvalue()


def data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(page_png(png)).decode()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(
        cls=status_class,
        anchor=anchor,
        value_cells=value_cells,
        note_parts=note_parts,
        shared_notes=shared_notes,
        cell_text=cell_text,
        hover=hover_text,
        counts=counts,
        data_uri=data_uri,
    )
    return env


def render_page(report: m.Report, extra: list[dict] | None = None) -> str:
    """The page; ``extra``: the tables of methods from outside the papers (fedrepro.report.build.extra_methods),
    shown in a section of their own after the papers."""

    statuses = [(s, sum(m.count(p.results, v.ALL_STATUSES)[s] for p in report.papers)) for s in v.ALL_STATUSES]
    return (
        _environment()
        .get_template("page.html.j2")
        .render(
            report=report,
            v=v,
            head=HEAD,
            dataset_head=m.DATASET_HEAD,
            waiting=WAITING,
            open_up_to=OPEN_UP_TO,
            statuses=[(s, n) for s, n in statuses if n],
            row_types=m.ROW_TYPES,
            css=(TEMPLATES / "page.css").read_text(encoding="utf-8"),
            js=(TEMPLATES / "page.js").read_text(encoding="utf-8"),
            extra=extra or [],
            diff_head=["baseline", "column", "difference", "p (paired t)", "resolved (Holm)"],
            extra_title=EXTRA_TITLE,
            extra_text=EXTRA_TEXT,
        )
    )
