"""config extra_methods: the workflow plans one compare_method job per extra method and compatible experiment (from
the runs of the paper's methods: AdaPeD's, FedHDP's and PPSGD's learning experiments), none without it, and the
report lists those tables apart from the papers' rows."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from sliced_workflow import SNAKEMAKE, slice_paper, snakemake_args

from fedrepro.config import REPO_ROOT
from fedrepro.report.build import extra_markdown, extra_methods

SLICES = {  # paper -> experiments: training experiments (compatible) beside ones that train no Algorithm
    "adaped": ("fig2a_mnist", "fig3b"),
    "fedhdp": ("noniid_mnist",),
    "ppsgd": ("fig1c_emnist", "fig1d_emnist_cnn", "fig1a_synthetic"),
}


def _config(tmp: Path) -> list[str]:
    """A slice of three papers without registry rows, data fetchable (MNIST and TFF EMNIST from their canonical
    sources, so a clone without the offline mirror plans it too)."""
    papers = {}
    for paper, exps in SLICES.items():
        header = (REPO_ROOT / "config" / "targets" / f"{paper}.csv").read_text().splitlines()[0] + "\n"
        papers[paper] = slice_paper(tmp, paper, exps, figures=False, registry=header)[:2]
    return snakemake_args(tmp, papers, data={"dir": f"{tmp}/data", "online": True})


def _dry(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "2", "--nolock", *args], cwd=REPO_ROOT, capture_output=True, text=True
    )


@pytest.mark.slow
def test_extra_method_is_planned_for_compatible_experiments_only(tmp_path):
    cfg = _config(tmp_path)
    with_method = _dry([*cfg, "--config", "extra_methods={fedprox: examples/fedprox.py:FedProx}"])
    assert with_method.returncode == 0, with_method.stderr[-2000:]
    planned = sorted(set(re.findall(r"results/extra/(\S+)/table\.md", with_method.stdout)))
    assert planned == [
        "fedprox/adaped/fig2a_mnist/quick",
        "fedprox/fedhdp/noniid_mnist/quick",
        "fedprox/ppsgd/fig1c_emnist/quick",
        "fedprox/ppsgd/fig1d_emnist_cnn/quick",
    ]
    plain = _dry(cfg)
    assert plain.returncode == 0 and "compare_method" not in plain.stdout and "results/extra" not in plain.stdout


@pytest.mark.slow
def test_a_bad_extra_method_entry_names_the_key(tmp_path):
    r = _dry([*_config(tmp_path), "--config", "extra_methods={fedprox: examples/fedprox.py}"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "extra_methods.fedprox: 'examples/fedprox.py' does not match" in out


def test_report_lists_extra_tables_apart_and_nothing_without_them(tmp_path):
    dirs = {"results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "f"), "data": {"dir": "data"}}
    cfg = {**dirs, "extra_methods": {"fedprox": "examples/fedprox.py:FedProx"}}
    table = tmp_path / "results" / "extra" / "fedprox" / "adaped" / "table4_femnist_sample" / "quick" / "table.md"
    table.parent.mkdir(parents=True)
    table.write_text(
        "# t\n\n| method | row | acc |\n|---|---|---|\n| fedavg | paper's | 90.00 ± 0.10 (n=3) |\n"
        "| fedprox | yours | 89.00 ± 0.20 (n=3) |\n\n## fedprox minus each baseline\n\n| baseline | x |\n"
    )
    extra = extra_methods(cfg)
    assert [t["experiment"] for t in extra[0]["tables"]] == ["adaped.table4_femnist_sample"]
    text = "\n".join(extra_markdown(extra, tmp_path / "results" / "report"))
    assert "## Methods from outside the papers (extra rows; never judged)" in text
    link = "../extra/fedprox/adaped/table4_femnist_sample/quick/table.md"
    assert f"**adaped.table4_femnist_sample** (quick; [table]({link}))" in text
    assert "| fedprox | yours | 89.00 ± 0.20 (n=3) |" in text and "| baseline | x |" not in text
    assert extra_methods(dirs) == [] and extra_markdown([], tmp_path) == []
