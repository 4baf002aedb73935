"""The FedHDP, histograms and PPSGD registries (and every registry's extra rows): format, provenance, tolerances.

A row either reproduces a number the paper prints (its value must occur in the paper's text) or is an *extra*
(artifact "Extra: ...", id "X."): a rebuilt number the paper does not print, e.g. a reference value from the notes.
"""

import csv
import re
from decimal import Decimal

import pytest

from fedrepro.config import REPO_ROOT, load_global, load_paper
from fedrepro.report.registry import COLUMNS, load_registry

ROOT = REPO_ROOT
PAPERS_DIR = ROOT.parent / "shared" / "papers"
PAPER_FILES = {
    "fedhdp": "fedhdp_aldaghri.md",
    "histograms": "histograms_setlur.md",
    "ppsgd": "ppsgd_bietti2022.md",
    "adaped": "adaped_ozkara2023.md",
}
CFG = load_global()


def rows(paper):
    with open(ROOT / CFG["targets"][paper], encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def half_unit(value: str) -> Decimal:
    d = Decimal(value)
    return Decimal(5).scaleb(d.as_tuple().exponent - 1)


def paper_text(paper):
    path = PAPERS_DIR / PAPER_FILES[paper]
    if not path.is_file():
        pytest.skip(f"{path} not present (the shared papers live beside the checkout)")
    text = path.read_text(encoding="utf-8")
    return re.sub(r"\s+", " ", text.replace("$", "").replace("\\ ", " "))


@pytest.mark.parametrize("paper", sorted(CFG["targets"]))
def test_header_ids_and_experiments(paper):
    with open(ROOT / CFG["targets"][paper], encoding="utf-8") as f:
        assert next(csv.reader(f)) == COLUMNS
    rs = rows(paper)
    ids = [r["id"] for r in rs]
    assert len(ids) == len(set(ids))
    load_registry(ROOT / CFG["targets"][paper], paper)  # parses (numbers, booleans)
    defined = set(load_paper(CFG, paper)["experiments"])
    for r in rs:
        assert r["experiment"].startswith(f"{paper}."), r["id"]
        name = r["experiment"].split(".", 1)[1]
        assert name in defined or r["needs"], f"{r['id']}: {r['experiment']} undefined and no `needs` given"
        assert r["key"], r["id"]
        if r["ci"] == "true":
            assert name in defined, f"{r['id']} is CI-flagged but its experiment does not exist"


@pytest.mark.parametrize("paper", sorted(CFG["targets"]))
def test_extras_are_marked_as_such(paper):
    for r in rows(paper):
        extra = r["artifact"].startswith("Extra")
        assert extra == r["id"].startswith("X."), r["id"]
        assert not (extra and r["row"] == "printed"), f"{r['id']}: an extra is never a printed row"
        if extra and r["value"]:
            assert r["note"], f"{r['id']}: an extra value must say where it comes from"


@pytest.mark.parametrize("paper", ["fedhdp", "histograms", "ppsgd"])
def test_printed_values_occur_in_the_paper_with_half_unit_tolerance(paper):
    text = paper_text(paper)
    for r in rows(paper):
        if r["artifact"].startswith("Extra") or not r["value"]:
            continue
        v = r["value"]
        shown = {"1e-10": "10^{-10}"}.get(v, v)
        forms = [shown] + ([f"{int(v):,}"] if v.isdigit() and int(v) >= 1000 else [])  # printed as 2,000
        assert any(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", text) for f in forms), (
            f"{r['id']}: {v} not in the paper"
        )
        assert Decimal(r["tolerance"]) == half_unit(v), r["id"]


def test_fedhdp_registers_each_printed_epsilon_under_both_conversions():
    rs = {r["id"]: r for r in rows("fedhdp")}
    fitted = {
        row
        for e in load_paper(CFG, "fedhdp")["experiments"].values()
        for c in e.get("calibration") or []
        for row in c["fitted_to"]
    }
    assert fitted == {"T3.cap.eps.nonIID"}
    for tag in ("T3.cap.eps.nonIID", "T4.cap.eps.FMNIST", "T4.cap.eps.FEMNIST"):
        # CI gates the captions the accountant reading was not fitted to (a fitted row cannot fail)
        assert rs[tag]["key"] == "epsilon.rdp" and rs[tag]["ci"] == ("false" if tag in fitted else "true")
        assert rs[tag + ".classic"]["key"] == "epsilon.rdp_classic"
        assert rs[tag + ".classic"]["value"] == rs[tag]["value"]
    for t in ("T8", "T9", "T10", "T11"):
        assert rs[f"{t}.cap.eps"]["key"] == "epsilon.rdp"


def test_fedhdp_experiments_use_the_table7_settings():
    exps = load_paper(CFG, "fedhdp")["experiments"]
    got = {
        n: (e["params"]["sampling_rate"], e["params"]["noise_multiplier"], e["params"]["rounds"], e["params"]["delta"])
        for n, e in exps.items()
        if n in ("eps_mnist", "eps_fmnist", "eps_femnist")
    }
    assert got == {
        "eps_mnist": (0.05, 1.5, 500, 1e-4),
        "eps_fmnist": (0.03, 4.0, 500, 1e-4),
        "eps_femnist": (0.03, 1.0, 500, 1e-4),
    }


def test_histograms_table1_has_all_18_cells():
    t1 = [r for r in rows("histograms") if r["artifact"] == "Table 1"]
    assert len(t1) == 18
    assert {r["table_col"] for r in t1} == {"Avg. KL for non-private version", "Avg. KL for private version"}
