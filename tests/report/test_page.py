"""The report page, the Markdown report and the CSV rendered from one small report model (tests/helpers/
report_fixture.py): every row once with its anchor, table cells carrying their rows' statuses, the fetch command once
per dataset, figures embedded beside their rows, nothing fetched from the network. The page in a real browser:
test_page_browser.py."""

import csv
import re
from html.parser import HTMLParser

import pytest
from report_fixture import ROWS, expected_status, fixture_report

from fedrepro.report.build import markdown, write_csv
from fedrepro.report.page import render_page

FETCH = "python -m fedrepro data fetch election_county_returns"


class Elements(HTMLParser):
    """Every start tag as (tag, attributes)."""

    def __init__(self, text: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def having(self, attr: str, tag: str | None = None) -> list[dict]:
        return [a for t, a in self.found if attr in a and (tag is None or t == tag)]


@pytest.fixture()
def report(cfg, tmp_path):
    return fixture_report(cfg, tmp_path)


def test_every_row_has_one_anchor_and_its_status(report):
    page = Elements(render_page(report))
    rows = {a["id"]: a for a in page.having("id", "tr")}
    assert set(rows) == {f"adaped.{rid}" for rid in ROWS}
    for rid in ROWS:
        assert rows[f"adaped.{rid}"]["data-status"] == expected_status(rid)
        assert f"st-{expected_status(rid).replace(' ', '-')}" in rows[f"adaped.{rid}"]["class"]


def test_table_cells_in_the_paper_layout_carry_their_status(report):
    html = render_page(report)
    page = Elements(html)
    parts = {a["data-row"]: a for a in page.having("data-row", "a")}
    in_tables = {rid for rid, (fields, *_) in ROWS.items() if fields.get("table_row", "local")}
    assert set(parts) == {f"adaped.{rid}" for rid in in_tables}
    for rid in in_tables:
        assert parts[f"adaped.{rid}"]["data-status"] == expected_status(rid)
        assert parts[f"adaped.{rid}"]["href"] == f"#adaped.{rid}"
    # the tables are named as their files are, and the variance shares its number's cell
    assert {a["id"] for a in page.having("id", "details")} >= {
        "adaped-table3",
        "adaped-table1",
        "adaped-extra-table1-fmnist",
    }
    cells = [c for c in re.findall(r'<td class="cell">.*?</td>', html) if 'data-row="adaped.T3.far"' in c]
    assert len(cells) == 1 and 'data-row="adaped.T3.far.var"' in cells[0] and "T3.ok" not in cells[0]


def test_fetch_command_said_once_per_dataset(report):
    html = render_page(report)
    md = markdown(report, report.papers[0].tables_dir.parent)
    waiting = [r for r in report.papers[0].results if r.waits_for]
    assert len(waiting) == 2
    assert html.count(FETCH) == 1 and md.count(FETCH) == 1
    # ... each waiting row still says what it waits for
    for r in waiting:
        row = html.split(f'id="adaped.{r.target.id}"')[1].split("</tr>")[0]
        assert "election_county_returns" in row and FETCH not in row


def test_figure_embedded_beside_its_claims_and_checks(report):
    html = render_page(report)
    fig = html.split('id="adaped-figure-fig1a"')[1].split('<div class="fig')[0].split("<h3>")[0]
    assert 'src="data:image/png;base64,' in fig
    assert 'href="#adaped.F1a.claim"' in fig and 'href="#adaped.F1a.sim"' in fig
    assert "What the paper says" in fig and "Implementation checks" in fig
    assert 'href="#adaped.T3.ok"' not in fig  # a row of another artifact is not the figure's


def test_figure_embedded_as_a_palette_png_of_the_same_picture(tmp_path):
    """The page embeds figures smaller than matplotlib writes them, with the same picture: same size, every pixel
    within a few levels (a broken reduction, e.g. a 2-colour palette or a resize, fails)."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    from fedrepro.report.page import data_uri

    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.linspace(0, 1, 40)
    for k in range(6):
        ax.plot(x, np.sin(3 * k * x), marker="o", ms=3, label=f"k={k}")
    ax.legend()
    png = tmp_path / "fig.png"
    fig.savefig(png, dpi=150)
    plt.close(fig)
    embedded = base64.b64decode(data_uri(png).removeprefix("data:image/png;base64,"))
    assert len(embedded) < png.stat().st_size / 2
    with Image.open(png) as a, Image.open(io.BytesIO(embedded)) as b:
        assert a.size == b.size
        diff = np.abs(np.asarray(a.convert("RGB"), dtype=int) - np.asarray(b.convert("RGB"), dtype=int))
    assert np.percentile(diff, 99) <= 24 and diff.mean() < 2


def test_paper_issues_and_headline(report):
    html = render_page(report)
    issues = html.split("Paper issues found (1)")[1].split("</ul>")[0]
    assert 'href="#adaped.C.sum"' in issues
    headline = html.split('<section class="paper" id="adaped"')[1].split("Paper issues found")[0]
    printed = [rid for rid, (f, *_) in ROWS.items() if f.get("row", "printed") == "printed"]
    assert f"{len(printed)} printed rows" in headline
    assert f">{sum(expected_status(r) == 'deviates' for r in printed)} deviates</button>" in headline


def test_page_is_self_contained(report):
    html = render_page(report)
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""", html)
    assert "<script>" in html and "<style>" in html and "@import" not in html


def test_markdown_and_csv_from_the_same_model(report, tmp_path):
    md = markdown(report, tmp_path)
    assert "[extra-table1-fmnist](tables/extra-table1-fmnist.md)" in md
    assert "[table3](tables/table3.md)" in md
    write_csv(tmp_path / "r.csv", report)
    rows = {r["id"]: r for r in csv.DictReader(open(tmp_path / "r.csv", encoding="utf-8"))}
    assert rows["T3.far"]["table"] == "table3" and rows["X.fm.acc"]["table"] == "extra-table1-fmnist"
    assert rows["F1a.claim"]["table"] == ""
    assert FETCH in rows["T3.offline"]["command"]  # the CSV keeps each row's full command


def test_a_ci_failure_points_to_its_row_on_the_page(tmp_path, capsys):
    from fedrepro.cli import main

    report = tmp_path / "replication.csv"
    with open(report, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(
            fh, fieldnames=["paper", "id", "row", "printed", "rebuilt", "status", "ci", "reason", "evidence"]
        )
        w.writeheader()
        w.writerow(
            dict(
                paper="adaped",
                id="T3.ok",
                row="printed",
                evidence="",
                printed="1",
                rebuilt="1",
                status="reproduced",
                ci="true",
                reason="",
            )
        )
        w.writerow(
            dict(
                paper="adaped",
                id="T3.far",
                row="printed",
                evidence="",
                printed="1",
                rebuilt="2",
                status="deviates",
                ci="true",
                reason="",
            )
        )
    assert main(["ci-check", "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'replication.html'}#adaped.T3.far" in out and "#adaped.T3.ok" not in out


def test_which_rows_judge_a_figure(report):
    from fedrepro.report.model import artifact_stem, figure_rows

    assert artifact_stem("Extra: Figure 1 (left), implementation check") == "Figure 1"
    assert artifact_stem("Sec. 4 text (Q1)") == "Sec. 4 text"
    assert artifact_stem("Extra table: Table 1 protocol on Fashion-MNIST") == "Table 1 protocol on Fashion-MNIST"
    results = report.papers[0].results
    assert [r.target.id for r in figure_rows("Figure 1a", "adaped.fig1a", results)] == ["F1a.claim", "F1a.sim"]
    # a figure no row names (an extra plot of a table's run) is judged by every row of its experiment
    assert [r.target.id for r in figure_rows("Extra: psi over training", "adaped.table1_fmnist", results)] == [
        "X.fm.acc"
    ]
    assert figure_rows("Privacy accounting", None, results) == []


def test_methods_from_outside_get_a_section_of_their_own(report, tmp_path):
    extra = [
        {
            "name": "fedprox",
            "spec": "examples/fedprox.py:FedProx",
            "tables": [
                {
                    "experiment": "adaped.table4_femnist_sample",
                    "scale": "quick",
                    "path": tmp_path / "table.md",
                    "header": ["method", "row", "acc"],
                    "rows": [["fedavg", "paper's", "90.00 ± 0.10 (n=3)"], ["fedprox", "yours", "89.00 ± 0.20 (n=3)"]],
                    "method": "fedprox",
                    "failures": ["seed 2: fedprox.py:8: RuntimeError: not yet"],
                    "differences": [["fedavg", "acc", "-1.00 ± 0.22 (n=3)", "0.0452", "no"]],
                }
            ],
        }
    ]
    plain, with_extra = render_page(report), render_page(report, extra)
    assert "Methods from outside the papers" not in plain and render_page(report, []) == plain
    section = with_extra.split("<h2>Methods from outside the papers (extra rows; never judged)</h2>", 1)[1]
    assert "<td>fedprox</td><td>yours</td><td>89.00 ± 0.20 (n=3)</td>" in section
    assert "fedprox failed: seed 2: fedprox.py:8: RuntimeError: not yet" in section
    assert "<th>p (paired t)</th>" in section and "<td>-1.00 ± 0.22 (n=3)</td><td>0.0452</td><td>no</td>" in section
    assert 'id="adaped.' not in section  # apart from the papers' rows


def test_a_note_on_many_rows_is_written_once_and_linked(report):
    """A long note piece on SHARED_ROWS rows or more is written once per paper, each row linking to it; on fewer rows
    it is written out in each. The Markdown report keeps every row's full note. Fails if the page repeats the shared
    text, drops it, or links a row to another note."""
    from fedrepro.report.page import SHARED_CHARS, SHARED_ROWS

    rows = report.papers[0].results
    many = "readings tried: " + "a listing the config gives to many rows. " * 3
    few = "a forensic conclusion that names only two rows, written out in each of them, twice over"
    assert len(many) >= SHARED_CHARS and len(few) >= SHARED_CHARS and len(rows) >= SHARED_ROWS + 2
    for r in rows[:SHARED_ROWS]:
        r.evidence = [*r.evidence, many]
    for r in rows[SHARED_ROWS : SHARED_ROWS + SHARED_ROWS - 1]:
        r.evidence = [*r.evidence, few]
    html = render_page(report)
    assert html.count(many) == 1
    note_id = re.search(rf'<li id="(adaped-note-\d+)">{re.escape(many)}</li>', html)[1]
    for r in rows[:SHARED_ROWS]:
        row = html.split(f'id="adaped.{r.target.id}"')[1].split("</tr>")[0]
        assert f'href="#{note_id}"' in row and many not in row
    assert html.count(few) == SHARED_ROWS - 1
    assert markdown(report, report.papers[0].tables_dir.parent).count(many) >= SHARED_ROWS
