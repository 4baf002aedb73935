"""The privacy stage's collector: epsilon.csv / curves.csv rows and provenance, and the figure, from real runs."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrepro.config import resolve_experiment
from fedrepro.experiments import RunContext, get_kind
from fedrepro.report.privacy import render_privacy_figure, write_privacy_tables
from fedrepro.runio import write_run

PAPER = {
    "paper": "toy",
    "title": "toy",
    "experiments": {
        "curve": {
            "kind": "privacy_curve",
            "description": "c",
            "params": {
                "noise_multiplier": 1.5,
                "sampling_rate": 0.05,
                "rounds": 40,
                "delta": 1e-4,
                "accountants": ["rdp", "opacus_rdp"],
                "primary": "opacus_rdp",
                "curve_points": 4,
            },
        },
        "grid": {
            "kind": "privacy_grid",
            "description": "g",
            "params": {
                "noise_multipliers": [1.0, 3.0],
                "sampling_rate": 0.02,
                "rounds": [20, 40],
                "delta": 1e-4,
                "accountants": ["rdp"],
                "curve_points": 2,
            },
        },
        "thm31": {
            "kind": "histograms_thm31",
            "description": "h",
            "params": {"total_epsilon": 15.0, "delta": 1e-10, "T": 50},
        },
    },
}
REGISTRY = """id,artifact,table_row,table_col,setting,metric,unit,value,pm,pm_reading,runs,tolerance,experiment,key,row,ci,needs,note
A,Table 1 caption,,,s,eps,,0.9,,,,0.05,toy.curve,epsilon.rdp,printed,false,,
B,Extra: x,,,s,eps,,2.0,,,,0.05,toy.grid,epsilon.rdp.s1_t40,check,false,,
"""


@pytest.fixture()
def toy(cfg, tmp_path):
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(PAPER))
    (tmp_path / "toy.csv").write_text(REGISTRY)
    cfg = dict(cfg, papers={"toy": str(tmp_path / "toy.yaml")}, targets={"toy": str(tmp_path / "toy.csv")})
    for name in PAPER["experiments"]:
        exp = resolve_experiment(cfg, f"toy.{name}", "quick")
        out = get_kind(exp.kind).fn(exp.params, None, RunContext(exp.id, 0))
        run = Path(cfg["results_dir"]) / "toy" / name / exp.scale / "seed0"
        write_run(run, exp, 0, out, 0.1)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fedrepro",
                "aggregate",
                "--runs",
                str(run),
                "--out",
                str(run.parent / "summary.json"),
            ],
            check=True,
            capture_output=True,
        )
    return cfg


def test_epsilon_csv_has_every_setting_and_accountant_with_versions(toy, tmp_path):
    out = tmp_path / "privacy"
    written = write_privacy_tables(toy, "toy", out, "quick")
    assert [p.name for p in written] == ["epsilon.csv", "curves.csv"]
    rows = list(csv.DictReader((out / "epsilon.csv").open()))
    curve = [r for r in rows if r["experiment"] == "curve"]
    assert {r["accountant"] for r in curve} == {"rdp", "opacus_rdp"}
    libs = {r["accountant"]: (r["library"], r["library_version"]) for r in curve}
    assert libs["rdp"][0] == "dp-accounting" and libs["opacus_rdp"][0] == "opacus"
    assert all(v and v[0].isdigit() for _, v in libs.values())
    assert all(r["rounds"] == "40" for r in curve)
    grid = [r for r in rows if r["experiment"] == "grid"]
    assert sorted(float(r["noise_multiplier"]) for r in grid) == [1.0, 3.0]
    hist = [r for r in rows if r["experiment"] == "thm31"]
    assert len(hist) == 3 and all(float(r["epsilon"]) == pytest.approx(15.0) for r in hist)
    # the final epsilon in epsilon.csv is the summary's metric, not recomputed
    summary = json.loads((Path(toy["results_dir"]) / "toy/curve/paper/summary.json").read_text())  # no quick block
    rdp = next(r for r in curve if r["accountant"] == "rdp")
    assert float(rdp["epsilon"]) == summary["metrics"]["epsilon.rdp"]["mean"]
    curves = pd.read_csv(out / "curves.csv")
    assert set(curves["experiment"]) == {"curve", "grid", "thm31"}
    assert curves.columns[0] == "experiment"
    assert set(curves[curves.experiment == "curve"]["round"]) == {10, 20, 30, 40}


def test_figure_has_a_panel_per_curve_experiment(toy, tmp_path):
    pdf, png = tmp_path / "f.pdf", tmp_path / "f.png"
    render_privacy_figure(toy, "toy", pdf, png, "quick")
    assert pdf.stat().st_size > 1000 and png.stat().st_size > 1000
    from fedrepro.experiments.privacy_curves import target_markers
    from fedrepro.report.privacy import _targets, curve_experiments

    exps = curve_experiments(toy, "toy", "quick")
    assert [e.name for e in exps] == ["curve", "grid"]
    assert _targets(toy, "toy", exps[0]) == [("epsilon.rdp", 0.9, True)]
    assert target_markers(_targets(toy, "toy", exps[0]), 40) == [(40, 0.9, True)]
    assert target_markers(_targets(toy, "toy", exps[1]), None) == [(40, 2.0, False)]
