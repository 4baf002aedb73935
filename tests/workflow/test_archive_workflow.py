"""The workflow takes an experiment's archived paper-scale seeds instead of training it: on a checkout whose archive
holds every paper seed of an experiment, current, the default run restores them (rule restore_archived), judges its
rows at paper scale and names the archived source; `archive={use: false}` trains it as configured instead."""

from __future__ import annotations

import csv
import subprocess

import pytest
from sliced_workflow import SNAKEMAKE, slice_paper, snakemake_args
from tiny_fedhdp import TINY, made_runs

from fedrepro.cli import main
from fedrepro.config import REPO_ROOT

ROW = "TINY.acc_g"


def _registry() -> str:
    """One printed row of the tiny protocol: NON-PRIVATE's global accuracy, as a single run."""
    text = (REPO_ROOT / "config" / "targets" / "fedhdp.csv").read_text()
    header = text.splitlines()[0].split(",")
    row = dict.fromkeys(header, "")
    row |= dict(
        id=ROW,
        artifact="test",
        setting="tiny protocol",
        metric="Acc_g",
        unit="%",
        value="50",
        pm_reading="single",
        tolerance="0.5",
        experiment="fedhdp.tiny",
        key="lam0.05.nonprivate_ditto.acc_g",
        row="printed",
        ci="false",
    )
    return ",".join(header) + "\n" + ",".join(row[h] for h in header) + "\n"


def _snakemake(args: list[str], dry: bool = False) -> subprocess.CompletedProcess:
    cmd = [SNAKEMAKE, *(["-n"] if dry else []), "--cores", "2", "--nolock", *args]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)


@pytest.mark.slow
def test_the_default_run_restores_an_archived_experiment_and_judges_it_at_paper_scale(tmp_path):
    tiny = {**TINY, "default_scale": "quick", "quick": {"rounds": 1}}
    paper, registry, _ = slice_paper(tmp_path, "fedhdp", [], add={"tiny": tiny}, figures=False, registry=_registry())
    archive = tmp_path / "archive"
    made = tmp_path / "made"
    sets = ["--config-set", f"results_dir={made}/results", "--config-set", f"archive.dir={archive}"]
    sets += ["--config-set", f"papers.fedhdp={paper}"]
    made_runs(made, sets)
    runs = [str(made / "results" / "fedhdp" / "tiny" / "paper" / f"seed{s}") for s in (0, 1)]
    assert main(["archive", "add", *runs, *sets]) == 0

    args = snakemake_args(tmp_path, {"fedhdp": (paper, registry)}, scale="default", archive={"dir": str(archive)})
    done = _snakemake(args)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "results" / "fedhdp" / "tiny" / "paper" / "seed0"
    assert (run / "archived.json").is_file() and not (tmp_path / "results" / "fedhdp" / "tiny" / "quick").exists()
    assert (run / "metrics.json").read_bytes() == (archive / "fedhdp/tiny/paper/seed0/metrics.json").read_bytes()
    assert "restore_archived" in done.stderr and "rule run_experiment:" not in done.stderr
    with open(tmp_path / "results" / "report" / "replication.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == ROW)
    assert row["scale"] == "paper" and row["status"] in ("reproduced", "deviates", "inconclusive"), row
    assert row["source"].startswith("archived (") and "2 of 2 seeds" in row["source"]
    assert ROW in (tmp_path / "results" / "report" / "replication.html").read_text()

    # retraining from scratch instead: the archive is not used, the experiment runs at its default (quick) scale
    fresh = _snakemake([*args, "--config", "archive={use: false}"], dry=True)
    assert fresh.returncode == 0 and "results/fedhdp/tiny/quick/seed0" in fresh.stdout
    assert "restore_archived" not in fresh.stdout
