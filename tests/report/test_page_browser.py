"""The report page as a reader uses it, in Debian's chromium driven by Playwright (never `playwright install`): it opens
offline, Table 3's cells carry their rows' statuses, the "deviates" filter leaves only deviating rows, an anchor
opens its row. Screenshots go to results/report/ (CI keeps them).

On the page of a real run (CI, after the workflow):
    FEDREPRO_REPORT_PAGE=results/report/replication.html python -m pytest tests/report/test_page_browser.py -k real
checks every table and filter the same way, measures the page's size and render time, and saves
results/report/replication.png. Without chromium or playwright these tests skip, unless FEDREPRO_BROWSER=required
(CI), where that is a failure.
"""

import json
import os
import time
from pathlib import Path

import pytest
from report_fixture import ROWS, expected_status, fixture_report

from fedrepro import paths
from fedrepro.config import load_global, resolve_path
from fedrepro.report.page import render_page

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRED = os.environ.get("FEDREPRO_BROWSER") == "required"


def _missing() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return "" if CHROMIUM.exists() else f"{CHROMIUM} is missing (apt-get install chromium)"


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        if REQUIRED:
            pytest.fail(f"FEDREPRO_BROWSER=required but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _open(browser, page_file: Path):
    """The page opened offline: any request that is not the file itself (or a data: URI) is refused and recorded."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    fetched, errors = [], []
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(("file:", "data:"))
            else (fetched.append(route.request.url), route.abort())
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    start = time.perf_counter()
    page.goto(page_file.resolve().as_uri(), wait_until="load")
    load_s = time.perf_counter() - start
    return page, fetched, errors, load_s


def _visible_rows(page) -> list[tuple[str, str]]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('tr.row'))
        .filter((r) => r.checkVisibility()).map((r) => [r.id, r.dataset.status])""")


def _screenshot(page, name: str) -> Path:
    out = paths.path(load_global(), "report", ext="png").with_name(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out))
    return out


def test_fixture_page_in_chromium(browser, cfg, tmp_path):
    report = fixture_report(cfg, tmp_path)
    shared = "a note on several rows, written once on the page and linked from each of them: " * 2
    for r in report.papers[0].results:  # T3.far among them
        r.evidence = [*r.evidence, shared]
    page_file = tmp_path / "replication.html"
    page_file.write_text(render_page(report), encoding="utf-8")
    page, fetched, errors, _ = _open(browser, page_file)
    assert not fetched and not errors
    # Table 3's cells carry their rows' statuses, and a status shows as a colour
    cells = page.evaluate("""() => Array.from(document.querySelectorAll('#adaped-table3 a.part'))
        .map((a) => [a.dataset.row, a.dataset.status, getComputedStyle(a).backgroundColor])""")
    assert {row: status for row, status, _ in cells} == {
        f"adaped.{rid}": expected_status(rid) for rid in ROWS if rid.startswith("T3.")
    }
    colour = {status: bg for _, status, bg in cells}
    assert len({colour["reproduced"], colour["deviates"], colour["not run"], colour["not comparable"]}) == 4
    # hovering a number shows its row: tolerance, the reading of the printed ±, the note
    page.hover("#adaped-table3 a.part[data-row='adaped.T3.far']")
    tip = page.inner_text("#tip")
    assert page.is_visible("#tip") and "tol: " in tip and "read as a standard error" in tip and "T3.far" in tip
    assert shared.strip() in tip and "[note" not in tip  # the shared note spelled out, not its link
    # printed rows show, checks are folded until opened or filtered for
    printed = {f"adaped.{rid}" for rid, (fields, *_) in ROWS.items() if fields.get("row", "printed") == "printed"}
    assert {i for i, _ in _visible_rows(page)} == printed
    # "only deviates": only deviating rows remain, all of them, and the other cells are dimmed
    page.click("#filters button[data-filter-status='deviates']")
    shown = _visible_rows(page)
    assert shown and {s for _, s in shown} == {"deviates"}
    assert sorted(i for i, _ in shown) == sorted(f"adaped.{r}" for r in ROWS if expected_status(r) == "deviates")
    dimmed = page.evaluate("""() => Array.from(document.querySelectorAll('#adaped-table3 a.part.dim'))
        .map((a) => a.dataset.status)""")
    assert dimmed and "deviates" not in dimmed
    assert page.is_visible("#adaped-figure-fig1a") and page.is_hidden("#adaped-extra-table1-fmnist")
    assert page.locator("#adaped-figure-fig1a .rowlist:visible").count() == 1  # the claim's list, not the checks'
    _screenshot(page, "browser-test.png")
    # a row's anchor (as a CI failure message gives it) opens the row even where the filter hid it
    page.goto(page_file.resolve().as_uri() + "#adaped.T3.ok")
    page.wait_for_function("document.getElementById('adaped.T3.ok').checkVisibility()")
    assert page.evaluate("document.getElementById('adaped.T3.ok').classList.contains('hit')")
    # clicking the row opens its note with the shared note spelled out
    note = page.locator("[id='adaped.T3.ok'] td.note")
    assert shared.strip() not in note.inner_text()
    note.click()
    assert shared.strip() in note.inner_text()
    # clicking the filter again shows everything
    page.click("#filters button[data-filter-status='reproduced']")
    page.click("#filters button[data-filter-status='reproduced']")
    assert {s for _, s in _visible_rows(page)} > {"deviates", "reproduced"}
    page.close()


REAL = os.environ.get("FEDREPRO_REPORT_PAGE")


@pytest.mark.skipif(not REAL, reason="set FEDREPRO_REPORT_PAGE to the page of a run (CI does)")
def test_real_report_page(browser):
    page_file = resolve_path(REAL)
    size_mb = page_file.stat().st_size / 1e6
    page, fetched, errors, load_s = _open(browser, page_file)
    assert not fetched and not errors
    timing = json.loads(page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])"))
    print(
        f"\n{page_file.name}: {size_mb:.2f} MB, load event after {timing['loadEventEnd']:.0f} ms (goto {load_s:.2f} s)"
    )
    assert size_mb < 5, "the page should stay a few MB"
    assert timing["loadEventEnd"] < 10_000, "the page should render within a few seconds"
    # every table in the paper's layout, every number in it with a status
    tables = page.evaluate("""() => Array.from(document.querySelectorAll('details.layout')).map((d) =>
        [d.id, d.querySelectorAll('a.part').length, d.querySelectorAll('a.part:not([data-status])').length])""")
    assert tables and all(n > 0 and unlabelled == 0 for _, n, unlabelled in tables)
    assert page.locator("section.paper .fig img").count() > 0
    _screenshot(page, "replication.png")
    # one status only (deviates, or the first status the run has): all its rows, nothing else
    status = page.evaluate("""() => { const b = Array.from(document.querySelectorAll('#filters [data-filter-status]'))
        .map((b) => b.dataset.filterStatus); return b.includes('deviates') ? 'deviates' : b[0]; }""")
    page.click(f"#filters button[data-filter-status='{status}']")
    shown = _visible_rows(page)
    assert {s for _, s in shown} == {status}
    assert len(shown) == page.locator(f"tr.row[data-status='{status}']").count()
    page.close()
