"""The Snakemake workflow end to end on a two-experiment slice: report, determinism, nothing-to-do, kill+resume."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sliced_workflow import SNAKEMAKE, slice_paper, snakemake_args

from fedrepro.config import REPO_ROOT

ROOT = REPO_ROOT
pytestmark = pytest.mark.slow

REGISTRY = """id,artifact,table_row,table_col,setting,metric,unit,value,pm,pm_reading,runs,tolerance,experiment,key,row,ci,needs,note
R1.ex,Remark 1,,,m=1e4,ratio,,0.01,,,,0.005,adaped.remark1,ratio,printed,true,,
F3b,Figure 3b,,,fig3b,curves,,,,,,,adaped.fig3b,"check:local_flat_matches_closed_form,personalized_flat_matches_closed_form",check,true,,
T9,Table 9,Local,n = 1,made-up,MSE,,0.0099,,,,0.05,adaped.remark1,a,printed,false,,
"""


PRIVACY_CURVE = {
    "kind": "privacy_curve",
    "description": "test: epsilon vs rounds",
    "params": {
        "noise_multiplier": 1.5,
        "sampling_rate": 0.05,
        "rounds": 50,
        "delta": 1e-4,
        "accountants": ["rdp", "rdp_classic"],
        "curve_points": 5,
    },
}


def _setup(tmp: Path, seeds, experiments=("remark1", "fig3b"), privacy=False) -> list[str]:
    """AdaPeD's ``experiments`` (and a privacy curve), fig3b at 4 repetitions, the registry rows above of those kept."""
    files = slice_paper(
        tmp,
        "adaped",
        experiments,
        shorten={"fig3b": {"reps": 4}} if "fig3b" in experiments else None,
        add={"eps_test": PRIVACY_CURVE} if privacy else None,
        registry=REGISTRY,
    )
    # remark1 (no quick overrides) runs at paper scale
    return snakemake_args(tmp, {"adaped": files[:2]}, seeds={"quick": seeds, "paper": [0, 1]})


def _snakemake(args, **kw):
    return subprocess.run(
        [SNAKEMAKE, "--cores", "2", "--nolock", *args], cwd=ROOT, capture_output=True, text=True, **kw
    )


def _metrics(tmp: Path):
    return {
        p.relative_to(tmp).as_posix(): json.loads(p.read_text())["metrics"]
        for p in sorted((tmp / "results").rglob("metrics.json"))
    }


def test_full_run_report_rerun_identical_and_nothing_to_do(tmp_path):
    cfg = _setup(tmp_path, [0, 1], privacy=True)
    r = _snakemake(cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    # The privacy stage: a deterministic kind runs once (first seed), its epsilons are collected per accountant.
    assert [p.name for p in (tmp_path / "results" / "adaped" / "eps_test" / "paper").glob("seed*")] == ["seed0"]
    eps = (tmp_path / "results" / "privacy" / "adaped" / "epsilon.csv").read_text().splitlines()
    assert len(eps) == 3 and eps[1].startswith("eps_test,") and ",rdp_classic,dp-accounting," in eps[2]
    assert (tmp_path / "figures" / "adaped" / "privacy_epsilon.png").is_file()
    report = (tmp_path / "results" / "report" / "replication.csv").read_text()
    assert "R1.ex" in report and "reproduced" in report
    assert (tmp_path / "figures" / "adaped" / "fig3b.pdf").is_file()
    assert (tmp_path / "results" / "tables" / "adaped" / "table9.md").is_file()
    first = _metrics(tmp_path)
    assert len(first) == 5
    dry = _snakemake([*cfg, "-n"])
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    r = _snakemake([*cfg, "--forceall"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert _metrics(tmp_path) == first
    html = tmp_path / "report.html"
    r = _snakemake([*cfg, "--report", str(html)])
    assert r.returncode == 0, r.stderr[-3000:]
    page = html.read_text()
    assert "Figure 3b" in page and "Replication report" in page  # captions name the paper artifacts
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?://', page)  # self-contained: nothing fetched
    ci = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedrepro",
            "ci-check",
            "--report",
            str(tmp_path / "results" / "report" / "replication.csv"),
            "--config-set",
            f"targets.adaped={tmp_path / 'adaped.csv'}",
            "--config-set",
            "only_papers=[adaped]",
        ],
        capture_output=True,
        text=True,
    )
    assert ci.returncode == 0, ci.stdout


def test_bad_config_stops_with_key_name(tmp_path):
    cfg = _setup(tmp_path, [0])
    r = _snakemake([*cfg, "--config", "scale=huge", "-n"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and ": scale:" in out and "'huge' is not one of" in out


def test_killed_run_resumes_to_the_same_result(tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    for d in (ref, killed):
        d.mkdir()
    seeds = list(range(6))
    r = _snakemake(_setup(ref, seeds, ("fig3b",)))
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = _setup(killed, seeds, ("fig3b",))
    proc = subprocess.Popen(
        [SNAKEMAKE, "--cores", "2", "--nolock", *cfg],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list((killed / "results").rglob("metrics.json")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "results" / "report" / "replication.csv").exists(), "run finished before it was killed"
    r = _snakemake([*cfg, "--rerun-incomplete"])
    assert r.returncode == 0, r.stderr[-3000:]
    norm = lambda m: {k.split("/", 1)[1]: v for k, v in m.items()}  # noqa: E731
    assert norm(_metrics(killed)) == norm(_metrics(ref))
    assert not [p for p in (killed / "results").rglob("*") if p.name.endswith((".tmp", ".part"))]
