"""FedHDP target registry: generated from config/targets/fedhdp_printed.tsv (notes §5) and cannot drift."""

import csv
import re
from collections import Counter
from decimal import Decimal

import fedhdp_registry as gen
import pytest
from kinds import call_kind

from fedrepro.config import REPO_ROOT
from fedrepro.report.registry import load_registry

ROOT = REPO_ROOT
CSV = ROOT / "config" / "targets" / "fedhdp.csv"
NOTES = ROOT.parent / "shared" / "notes" / "fedhdp.md"


def rows():
    with open(CSV, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_committed_registry_equals_generator_output():
    assert CSV.read_text(encoding="utf-8") == gen.generate(), (
        "config/targets/fedhdp.csv is stale: run `python scripts/fedhdp_registry.py`"
    )
    load_registry(CSV, "fedhdp")


def test_printed_table_has_the_808_rows_of_the_notes():
    printed = gen.read_printed()
    assert len(printed) == 808
    assert len({r["notes_id"] for r in printed}) == 808
    if NOTES.is_file():  # the TSV is a verbatim extraction of notes §5
        text = NOTES.read_text(encoding="utf-8")
        for r in printed:
            assert f"| {r['notes_id']} | {r['artifact']} | {r['setting']} | {r['metric']} | {r['printed']} |" in text


def test_every_printed_number_is_registered():
    ids = {r["id"] for r in rows()}
    for p in gen.read_printed():
        rid = p["notes_id"].replace(",", "_")
        assert rid in ids or {f"{rid}.fmnist", f"{rid}.femnist"} <= ids, p["notes_id"]
        m = gen.CELL.match(p["printed"])
        if m and m.group(2) is not None and p["artifact"].startswith("Table"):
            assert f"{rid}.var" in ids, p["notes_id"]


def test_counts_by_table():
    c = Counter(r["artifact"] for r in rows())
    # cells + one variance row per parenthesized variance
    for table, cells in {
        "Table 3": 47,
        "Table 4": 47,
        "Table 8": 144,
        "Table 9": 165,
        "Table 10": 165,
        "Table 11": 165,
    }.items():
        n_var = sum(1 for p in gen.read_printed() if p["artifact"] == table and "(" in p["printed"])
        assert c[table] == cells + n_var, table
    assert c["Table 2"] == 4 and c["Table 5"] == 12 and c["Table 6"] == 14


def test_naming_contract():
    assert gen.alg_slug("NonPrivate+Ditto") == "nonprivate_ditto"
    assert gen.alg_slug("DP-FedAvg+Ditto") == "dp_fedavg_ditto"
    assert gen.alg_slug("HDP-FedAvg+Ditto") == "hdp_fedavg_ditto"
    assert gen.alg_slug("FedHDP_r=0.01") == "fedhdp_r_0_01" and gen.alg_slug("FedHDP_r=0") == "fedhdp_r_0"
    rs = {r["id"]: r for r in rows()}
    r = rs["T8.lam0.005.DP-FedAvg+Ditto.Acc_g_p"]
    assert (r["experiment"], r["key"], r["value"], r["tolerance"]) == (
        "fedhdp.noniid_mnist",
        "lam0.005.dp_fedavg_ditto.acc_g_p",
        "88.64",
        "0.005",
    )
    v = rs["T8.lam0.005.DP-FedAvg+Ditto.Acc_g_p.var"]
    assert (v["key"], v["value"]) == ("lam0.005.dp_fedavg_ditto.acc_g_p_var", "0.39")
    assert rs["T9.lam0.25.FedHDP_r=0.9.D_l"]["experiment"] == "fedhdp.skewed_mnist"
    assert rs["T10.lam0.05.NonPrivate+Ditto.Acc_g"]["experiment"] == "fedhdp.fmnist"
    assert rs["T11.lam0.25.FedHDP_r=0.5.Acc_l_np"]["experiment"] == "fedhdp.femnist"
    learning = [
        r
        for r in rows()
        if re.match(r"T(3|4|8|9|10|11)\.", r["id"]) and ".cap." not in r["id"] and r["row"] != "consistency"
    ]
    for r in learning:
        assert r["ci"] == "false" and r["needs"], r["id"]
        assert re.fullmatch(
            r"(lam[\d.]+|table[34])\.[a-z0-9_]+\.(acc_g|acc_g_p|acc_g_np|d_g|acc_l_p|acc_l_np|d_l)"
            r"(_var)?",
            r["key"],
        ), r["key"]
        assert Decimal(r["tolerance"]) == Decimal(5).scaleb(Decimal(r["value"]).as_tuple().exponent - 1)


def test_summary_tables_point_at_the_appendix_cells_they_repeat():
    all_rows = rows()
    rs = {r["id"]: r for r in all_rows}
    appendix = {}
    for a in all_rows:
        if a["artifact"] in ("Table 8", "Table 9", "Table 10", "Table 11"):
            appendix.setdefault((a["experiment"], a["key"]), []).append(a)
    t3 = [r for r in all_rows if r["artifact"] == "Table 3"]
    same = 0
    for r in t3 + [r for r in all_rows if r["artifact"] == "Table 4"]:
        twins = appendix.get((r["experiment"], r["key"]), [])
        if r["key"].startswith("lam"):
            assert len(twins) == 1 and Decimal(twins[0]["value"]) == Decimal(r["value"]), r["id"]
            same += 1
        else:
            assert not twins and r["key"].startswith("table4."), r["id"]
    assert same == len(t3) + 75 - 1
    # FMNIST FedHDP: Acc_l,np comes from the lam = 0.005 run (notes §7 #21)
    assert rs["T4.FMNIST.FedHDP_r=0.01.Acc_l_np"]["key"] == "lam0.005.fedhdp_r_0_01.acc_l_np"
    assert rs["T4.FMNIST.FedHDP_r=0.01.Acc_l_p"]["key"] == "lam0.05.fedhdp_r_0_01.acc_l_p"


def test_inconsistent_cells_are_marked():
    rs = {r["id"]: r for r in rows()}
    flagged = {
        r["id"]
        for r in rows()
        if r["note"].startswith("INCONSISTENT in the paper:") or " INCONSISTENT in the paper:" in r["note"]
    }
    # notes §7 #9 (Delta != np - p), #10 (FEMNIST lam=0.05 r=0 row), #5 (Table 2)
    for rid in (
        "T8.lam0.005.FedHDP_r=0.001.D_g",
        "T9.lam0.05.FedHDP_r=0.5.D_g",
        "T9.lam0.05.FedHDP_r=0.75.D_g",
        "T9.lam0.25.FedHDP_r=0.025.D_l",
        "T10.lam0.05.FedHDP_r=0.025.D_l",
        "T11.lam0.05.FedHDP_r=0.Acc_l_p",
        "T2.hom-data.hom-priv",
    ):
        assert rid in flagged, rid
        assert rs[rid]["note"].startswith("INCONSISTENT in the paper:"), rid
    # consistent or only coarsely printed cells are not flagged; T11 lam0.05 r=0.025's Delta_l 1.01 against 80.99 - "80"
    # holds within the printed digits (80 stands for [79.5, 80.5]: the relation row's rule, issue 30)
    for rid in (
        "T9.lam0.005.FedHDP_r=0.5.D_g",
        "T8.lam0.005.FedHDP_r=0.D_l",
        "T11.lam0.05.FedHDP_r=0.Acc_g",
        "T11.lam0.05.FedHDP_r=0.025.D_l",
    ):
        assert rid not in flagged, rid
    assert rs["T2.hom-data.hom-priv"]["ci"] == "false"
    # 5 Deltas, the 6 cells of the r=0 row that copy r=0.001 (all but Acc_g), Table 2; nothing else
    assert len({re.sub(r"\.var$", "", f) for f in flagged}) == 12
    assert not [f for f in flagged if not re.match(r"T(2|8|9|10|11)\.", f)]


def test_theory_rows_are_ci_checks_of_existing_experiments():
    from fedrepro.config import load_global, load_paper

    exps = load_paper(load_global(), "fedhdp")["experiments"]
    theory = [
        r
        for r in rows()
        if r["experiment"] in ("fedhdp.fig1", "fedhdp.fig2", "fedhdp.fig3", "fedhdp.fig4", "fedhdp.table2")
    ]
    assert len(theory) >= 7 + 4 + 1
    for r in theory:
        assert r["experiment"].split(".", 1)[1] in exps
        assert r["key"].startswith("check:") or r["key"].startswith("examples."), r["id"]


@pytest.mark.parametrize("exp", ["fig1", "fig2", "fig3", "fig4", "table2"])
def test_theory_checks_named_in_the_registry_are_produced(exp):
    """Every check a theory row names is one the experiment computes (run at a tiny size)."""
    import numpy as np

    from fedrepro.config import load_global, load_paper
    from fedrepro.experiments import RunContext

    e = load_paper(load_global(), "fedhdp")["experiments"][exp]
    small = {
        "fig1": {"trials": 200},
        "fig2": {"trials": 200},
        "fig3": {"trials": 50},
        "fig4": {"trials": 200},
        "table2": {"trials": 200},
    }[exp]
    out = call_kind(e["kind"], {**e["params"], **small}, np.random.default_rng(0), RunContext("t", 0))
    named = set()
    for r in rows():
        if r["experiment"] == f"fedhdp.{exp}" and r["key"].startswith("check:"):
            named |= set(r["key"][len("check:") :].split(","))
    assert named and named <= set(out.checks)


def test_learning_rows_match_the_learning_experiments_methods_and_lambdas():
    """The naming contract seen from the other side: every `lam<λ>.<method>.<metric>` row names a method and a
    lambda that its experiment (config/fedhdp.yaml) trains, for the experiments defined so far."""
    from fedrepro.config import load_global, load_paper

    exps = load_paper(load_global(), "fedhdp")["experiments"]
    checked = 0
    for r in rows():
        name = r["experiment"].split(".", 1)[1]
        m = re.fullmatch(r"lam([\d.]+)\.([a-z0-9_]+)\.[a-z_]+", r["key"])
        if not m or name not in exps or "methods" not in exps[name]["params"]:
            continue
        params = exps[name]["params"]
        assert m.group(2) in params["methods"], (r["id"], m.group(2))
        assert float(m.group(1)) in [float(x) for x in params["lams"]], r["id"]
        checked += 1
    assert checked or not any(n in exps for n in gen.TABLE_EXP.values())
