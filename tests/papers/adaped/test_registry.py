"""The AdaPeD target registry (config/targets/adaped.csv) checked against the paper text.

Every row with a printed value must match the paper: table cells by position (row label x column label in the
markdown transcription, and the column's values in row order in the pdftotext transcription), text numbers by their
sentence (anchored patterns below), and every value, with its ±, must occur in both transcriptions.
The checks are written as functions returning a list of problems so that the tests below can also show that a
corrupted registry is rejected.
"""

from __future__ import annotations

import copy
import csv
import re
from decimal import Decimal

import pytest

from fedrepro.config import REPO_ROOT
from fedrepro.report.registry import COLUMNS

REPO = REPO_ROOT
REGISTRY = REPO / "config" / "targets" / "adaped.csv"
SHARED = REPO_ROOT.parent / "shared"
PAPERS = SHARED / "papers"
NOTES = SHARED / "notes" / "adaped.md"
PAPER_MD = "adaped_ozkara2023.md"
PAPER_PDFTEXT = "adaped_ozkara2023_pdftext.txt"

HEADER = COLUMNS
TABLE_ROWS = {"Table 1": 21, "Table 2": 6, "Table 3": 6, "Table 4": 7, "Table 5": 7}
ARTIFACTS = set(TABLE_ROWS) | {
    "Figure 1a",
    "Figure 1b",
    "Figure 2a",
    "Figure 2b",
    "Figure 3a",
    "Figure 3b",
    "Sec. 4 text",
    "App. K text",
    "Remark 1",
}
FIGURE_IDS = {
    "F1a",
    "F1b",
    "F2a",
    "F2b",
    "F3a",
    "F3b",
    "F1a.claim",
    "F3a.claim",
    "F3b.claim",
    "F1a.local",
    "F1a.pers",
    "F3a.local",
    "F3a.pers",
    "F3b.local",
    "F3b.pers",
}
QUALITATIVE_IDS = {"Q1", "Q2"}

NUM = r"\d+(?:\.\d+)?"
PMNUM = rf"{NUM} ± {NUM}"
# Printed numbers outside the tables: the sentence that prints them, and the registry ids of its numbers in order.
ANCHORS = [
    (rf"gain of ({PMNUM})% against local estimator", ["S4.pol"]),
    (
        rf"decrease in MSE by ({PMNUM})%, ({PMNUM})%, ({PMNUM})%, ({PMNUM})%",
        ["K.bern.normal", "K.bern.uniform", "K.bern.3spike", "K.bern.beta"],
    ),
    (
        rf"d ?= ?50, personalized regression has an MSE gain of ({PMNUM})%, ({PMNUM})%, and when d ?= ?100, ?"
        rf"({PMNUM})%, ({PMNUM})% compared to local and FedAvg regression",
        ["K.lin.d50.local", "K.lin.d50.fedavg", "K.lin.d100.local", "K.lin.d100.fedavg"],
    ),
    (
        rf"alternating algorithm only results in ({NUM})% and ({NUM})% increase in MSE",
        ["K.lin.d50.alt", "K.lin.d100.alt"],
    ),
    (rf"equal to ({NUM}) when m ?= ?10", ["R1.ex"]),
]


# ----------------------------------------------------------------------------------------------------------- loading
def load_registry() -> tuple[list[str], list[dict[str, str]]]:
    with REGISTRY.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    # Extra rows (artifact "Extra: ...", id "X."): rebuilt numbers the paper does not print (e.g. the noise its
    # privacy statements imply); they are not checked against the paper text here (see test_registry_extras.py).
    return header, [d for d in (dict(zip(header, r)) for r in body if r) if not d["artifact"].startswith("Extra")]


def normalise(text: str) -> str:
    """One spelling for both transcriptions: LaTeX ± and % unescaped, $ dropped, ε unified, whitespace collapsed."""
    text = text.replace("\\pm", "±").replace("\\%", "%").replace("$", "")
    text = text.replace("\\epsilon", "ε").replace("(cid:15)", "ε").replace("ϵ", "ε")
    text = re.sub(r"\s+", " ", text)
    return re.sub(r" ?± ?", " ± ", text)


def printed(row: dict[str, str]) -> str:
    return f"{row['value']} ± {row['pm']}" if row["pm"] else row["value"]


def half_unit(value: str) -> Decimal:
    """Half a unit of the last printed decimal: 60.86 -> 0.005, 10.7 -> 0.05, 1 -> 0.5."""
    return Decimal(5).scaleb(Decimal(value).as_tuple().exponent - 1)


def md_tables(md_raw: str) -> list[dict]:
    """The markdown transcription's tab-separated tables, in order of appearance: header + {(row, col): cell}."""
    tables, lines, i = [], md_raw.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("Method\t"):
            cols = [normalise(c).strip() for c in lines[i].split("\t")[1:]]
            cells, order, i = {}, [], i + 1
            while i < len(lines) and "\t" in lines[i]:
                parts = [normalise(c).strip() for c in lines[i].split("\t")]
                order.append(parts[0])
                for col, cell in zip(cols, parts[1:]):
                    cells[(parts[0], col)] = cell
                i += 1
            tables.append({"cols": cols, "rows": order, "cells": cells})
        else:
            i += 1
    return tables


# ------------------------------------------------------------------------------------------------------------ checks
def check_format(header: list[str], rows: list[dict[str, str]]) -> list[str]:
    problems = []
    if header != HEADER:
        problems.append(f"header {header} != {HEADER}")
    ids = [r["id"] for r in rows]
    problems += [f"duplicate id {i}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for r in rows:
        rid = r["id"]
        if r["artifact"] not in ARTIFACTS:
            problems.append(f"{rid}: unknown artifact {r['artifact']!r}")
        is_table = r["artifact"] in TABLE_ROWS
        if is_table != bool(r["table_row"] and r["table_col"]):
            problems.append(f"{rid}: table_row/table_col must be filled exactly for Table artifacts")
        if is_table and not (r["value"] and r["pm"]):
            problems.append(f"{rid}: table rows print value ± pm")
        if not re.fullmatch(r"adaped\.[a-z0-9_]+", r["experiment"]):
            problems.append(f"{rid}: experiment {r['experiment']!r} is not adaped.<name>")
        key = r["key"]
        if not key:
            problems.append(f"{rid}: empty key")
        elif key.startswith("check:"):
            if not re.fullmatch(r"[a-z0-9_]+(,[a-z0-9_]+)*", key[len("check:") :]):
                problems.append(f"{rid}: malformed check key {key!r}")
        elif not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)*", key):
            problems.append(f"{rid}: malformed metric key {key!r}")
        if r["ci"] not in ("true", "false"):
            problems.append(f"{rid}: ci must be true or false, got {r['ci']!r}")
        if r["unit"] not in ("", "%"):
            problems.append(f"{rid}: unit {r['unit']!r}")
        if not r["setting"] or not r["metric"]:
            problems.append(f"{rid}: setting and metric are required")
        for field in ("value", "pm"):
            if r[field] and not re.fullmatch(NUM, r[field]):
                problems.append(f"{rid}: {field} {r[field]!r} is not a plain printed number")
        if r["pm"] and not r["value"]:
            problems.append(f"{rid}: pm without value")
        if r["value"]:
            if not r["tolerance"] or not re.fullmatch(r"\d+(\.\d+)?", r["tolerance"]):
                problems.append(f"{rid}: tolerance {r['tolerance']!r} missing or not a number")
            elif re.fullmatch(NUM, r["value"]) and Decimal(r["tolerance"]) != half_unit(r["value"]):
                problems.append(f"{rid}: tolerance {r['tolerance']} != {half_unit(r['value'])} for value {r['value']}")
        elif r["tolerance"]:
            problems.append(f"{rid}: tolerance without value")
        if (rid in FIGURE_IDS or rid in QUALITATIVE_IDS) and r["value"]:
            problems.append(f"{rid}: figure/qualitative rows carry no value")
    return problems


def check_counts(rows: list[dict[str, str]]) -> list[str]:
    problems = []
    for art, n in TABLE_ROWS.items():
        got = sum(r["artifact"] == art for r in rows)
        if got != n:
            problems.append(f"{art}: {got} rows, the paper's table has {n} numbers")
    missing = (FIGURE_IDS | QUALITATIVE_IDS) - {r["id"] for r in rows}
    if missing:
        problems.append(f"missing figure/qualitative rows {sorted(missing)}")
    return problems


def check_occurrence(rows: list[dict[str, str]], texts: dict[str, str]) -> list[str]:
    """Every printed value (with its ±, and % for percentages outside tables) occurs in both transcriptions."""
    problems = []
    for r in rows:
        if not r["value"]:
            continue
        form = printed(r)
        if r["unit"] == "%" and r["artifact"] not in TABLE_ROWS:
            form += "%"
        pattern = rf"(?<![\d.]){re.escape(form)}(?!\.?\d)"
        for name, text in texts.items():
            if not re.search(pattern, text):
                problems.append(f"{r['id']}: {form!r} not found in {name}")
    return problems


def check_tables(rows: list[dict[str, str]], md_raw: str, pdftext: str) -> list[str]:
    """Table cells by position: md cell (row, col) == value ± pm; pdftotext prints each column in row order."""
    problems, tables = [], md_tables(md_raw)
    if len(tables) != len(TABLE_ROWS):
        return [f"found {len(tables)} tables in {PAPER_MD}, expected {len(TABLE_ROWS)}"]
    for art, table in zip(TABLE_ROWS, tables):
        mine = [r for r in rows if r["artifact"] == art]
        seen = {}
        for r in mine:
            cell = (r["table_row"], r["table_col"])
            if cell not in table["cells"]:
                problems.append(f"{r['id']}: no cell {cell} in {art} (rows {table['rows']}, cols {table['cols']})")
            elif table["cells"][cell] != printed(r):
                problems.append(f"{r['id']}: {art} {cell} prints {table['cells'][cell]!r}, registry has {printed(r)!r}")
            if cell in seen:
                problems.append(f"{r['id']}: cell {cell} already registered as {seen[cell]}")
            seen[cell] = r["id"]
        uncovered = set(table["cells"]) - set(seen)
        if uncovered:
            problems.append(f"{art}: printed cells without a registry row {sorted(uncovered)}")
        by_cell = {(r["table_row"], r["table_col"]): printed(r) for r in mine}
        for col in table["cols"]:
            column = " ".join(by_cell.get((row, col), "?") for row in table["rows"])
            if column not in pdftext:
                problems.append(f"{art} column {col!r}: {column!r} not printed in this order in {PAPER_PDFTEXT}")
    return problems


def check_anchors(rows: list[dict[str, str]], texts: dict[str, str]) -> list[str]:
    """Text numbers by their sentence: the k-th number of the sentence is the value (± pm) of the k-th id."""
    problems, by_id = [], {r["id"]: r for r in rows}
    anchored = set()
    for pattern, ids in ANCHORS:
        anchored |= set(ids)
        for name, text in texts.items():
            m = re.search(pattern, text)
            if not m:
                problems.append(f"sentence {pattern!r} not found in {name}")
                continue
            for rid, got in zip(ids, m.groups()):
                if rid not in by_id:
                    problems.append(f"{rid}: missing from the registry ({name} prints {got!r})")
                elif printed(by_id[rid]) != got:
                    problems.append(f"{rid}: {name} prints {got!r}, registry has {printed(by_id[rid])!r}")
    loose = {r["id"] for r in rows if r["value"] and r["artifact"] not in TABLE_ROWS} - anchored
    if loose:
        problems.append(f"text values without an anchored sentence in this test: {sorted(loose)}")
    return problems


# ------------------------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def paper():
    if not PAPERS.is_dir():
        pytest.skip(f"paper transcriptions not available: {PAPERS} does not exist")
    md_raw = (PAPERS / PAPER_MD).read_text(encoding="utf-8")
    pdf_raw = (PAPERS / PAPER_PDFTEXT).read_text(encoding="utf-8")
    return {"md_raw": md_raw, "texts": {PAPER_MD: normalise(md_raw), PAPER_PDFTEXT: normalise(pdf_raw)}}


def test_header_exact():
    with REGISTRY.open(encoding="utf-8", newline="") as f:
        assert next(csv.reader(f)) == HEADER
    assert REGISTRY.read_text(encoding="utf-8").splitlines()[0] == ",".join(HEADER)


def test_format(registry):
    header, rows = registry
    assert check_format(header, rows) == []


def test_ids_unique(registry):
    ids = [r["id"] for r in registry[1]]
    assert len(ids) == len(set(ids))


def test_tolerance_is_half_unit_of_last_printed_decimal(registry):
    for r in registry[1]:
        if r["value"]:
            assert Decimal(r["tolerance"]) == half_unit(r["value"]), r["id"]
        else:
            assert r["tolerance"] == "", r["id"]
    assert half_unit("60.86") == Decimal("0.005")
    assert half_unit("10.7") == Decimal("0.05")
    assert half_unit("0.01") == Decimal("0.005")
    assert half_unit("1") == Decimal("0.5")
    assert half_unit("4.7") == Decimal("0.05")


def test_row_counts_per_table(registry):
    assert check_counts(registry[1]) == []


def test_values_occur_in_both_transcriptions(registry, paper):
    assert check_occurrence(registry[1], paper["texts"]) == []


def test_table_cells_by_position(registry, paper):
    assert check_tables(registry[1], paper["md_raw"], paper["texts"][PAPER_PDFTEXT]) == []


def test_md_tables_have_the_expected_sizes(paper):
    sizes = [len(t["cells"]) for t in md_tables(paper["md_raw"])]
    assert sizes == list(TABLE_ROWS.values())


def test_text_numbers_by_sentence(registry, paper):
    assert check_anchors(registry[1], paper["texts"]) == []


def test_every_notes_id_is_registered(registry):
    if not NOTES.is_file():
        pytest.skip(f"replication notes not available: {NOTES}")
    notes = NOTES.read_text(encoding="utf-8")
    section = notes.split("## 5.", 1)[1].split("\n## ", 1)[0]
    note_ids = set(re.findall(r"^\| ([A-Z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)*) \|", section, flags=re.M)) - {"id"}
    assert len(note_ids) >= 60
    assert note_ids - {r["id"] for r in registry[1]} == set()


# The checks must be able to fail: corrupt one field of a valid registry and expect a problem.
def _mutated(rows, rid, **changes):
    rows = copy.deepcopy(rows)
    for r in rows:
        if r["id"] == rid:
            r.update(changes)
    return rows


@pytest.mark.parametrize(
    "rid, changes",
    [
        ("T1.r1.c1", {"value": "60.68"}),  # digit transposition
        ("T1.r1.c1", {"value": "63.12", "pm": "0.31"}),  # a real number of the wrong cell
        ("T2.r2.c3", {"pm": "0.56"}),
        ("T3.r2.c2", {"table_col": "n = 30"}),
        ("T5.r3", {"table_row": "QuPeD (FP) (Ozkara et al., 2021)"}),
    ],
)
def test_corrupted_table_rows_are_rejected(registry, paper, rid, changes):
    rows = _mutated(registry[1], rid, **changes)
    problems = check_tables(rows, paper["md_raw"], paper["texts"][PAPER_PDFTEXT]) + check_occurrence(
        rows, paper["texts"]
    )
    assert problems


@pytest.mark.parametrize(
    "rid, changes",
    [
        ("K.bern.normal", {"value": "12.0", "pm": "1.6"}),  # swapped with the uniform prior
        ("S4.pol", {"value": "10.1"}),
        ("K.lin.d100.alt", {"value": "4.8"}),
        ("R1.ex", {"value": "0.1"}),
    ],
)
def test_corrupted_text_rows_are_rejected(registry, paper, rid, changes):
    rows = _mutated(registry[1], rid, **changes)
    assert check_anchors(rows, paper["texts"])


@pytest.mark.parametrize(
    "rid, changes",
    [
        ("T1.r1.c1", {"tolerance": "0.05"}),
        ("K.lin.d50.alt", {"tolerance": "0.05"}),
        ("S4.pol", {"experiment": "political"}),
        ("F1a", {"key": ""}),
        ("T4.r1", {"ci": "yes"}),
    ],
)
def test_corrupted_fields_are_rejected(registry, rid, changes):
    header, rows = registry
    assert check_format(header, _mutated(rows, rid, **changes))


def test_dropped_row_is_rejected(registry):
    rows = [r for r in registry[1] if r["id"] != "T4.r7"]
    assert check_counts(rows)
