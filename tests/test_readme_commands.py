"""Every command the README shows is run by a test, or is marked here with why it cannot run in the test suite (the
network, a cluster, hours of compute): a README command this table does not know fails the first test, so a new
example cannot go untested. The cheap ones run here as printed (their /tmp paths moved into a temp dir); the
Snakemake forms are planned (`snakemake -n`), which checks that the targets, config keys and options exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from sliced_workflow import SNAKEMAKE

from fedrepro.config import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
RUN, DRY = "run here as printed", "planned here with snakemake -n"
FEDPROX = "python -m fedrepro compare examples/fedprox.py:FedProx --experiment adaped.table4_femnist_sample"


def readme_commands() -> list[str]:
    """`python -m fedrepro ...` and `snakemake ...` commands of the README: fenced bash lines (continuations joined,
    comments dropped) and inline code, whitespace normalized."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s+#", line.strip())[0].strip()
            if line.startswith(("python -m fedrepro", "snakemake", "bash scripts", ". .venv")):
                out.append(" ".join(line.split()))
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    out += [" ".join(c.split()) for c in re.findall(r"`((?:python\s+-m\s+fedrepro|snakemake)[^`]*)`", prose)]
    return sorted(set(out))


COVERED = {
    # README command 1 and 2: .ci/run runs both on a clean clone (the CI contract)
    "bash scripts/setup.sh && . .venv/bin/activate && snakemake --cores 2": "CI: .ci/run (README command 1)",
    ". .venv/bin/activate && python -m pytest": "CI: .ci/run (README command 2)",
    "snakemake --cores 2": "CI: .ci/run; tests/workflow/test_workflow.py (a slice)",
    "snakemake": DRY,
    "snakemake -n": DRY,
    "snakemake --cores 2 figures/adaped/fig1a.pdf": DRY,
    "snakemake --cores 2 results/tables/adaped/table3.md": DRY,
    "snakemake --cores 2 results/adaped/bernoulli/paper/summary.json": DRY,
    "snakemake --cores 2 --config scale=paper": DRY,
    "snakemake --cores 1 --forcerun report -- results/report/replication.html": DRY,
    "snakemake --config scale=paper": DRY,
    "snakemake --cores 2 --config 'only_papers=[fedhdp]'": DRY,
    "snakemake --cores 2 --config 'default_scales={fedhdp.skewed_mnist: paper}'": DRY,
    "snakemake --cores 2 --config scale=paper -- results/adaped/table4_femnist_sample/paper/summary.json": DRY,
    "snakemake --cores 2 --config scale=paper -- results/ppsgd/fig1a_synthetic/paper/summary.json": DRY,
    "snakemake --cores 2 --config 'archive={use: false}'": DRY,
    "snakemake --cores 2 --config 'extra_methods={fedprox: examples/fedprox.py:FedProx}'": DRY,
    "snakemake --cores 2 --config 'data={online: true}'": DRY,
    "snakemake --configfile config/config.yaml my-overrides.yaml": "tests/helpers/sliced_workflow.py (every workflow "
    "test layers an override file so)",
    "snakemake --unlock": "tests/workflow/test_kill_resume.py (after a kill -9)",
    "snakemake --cores 2 --rerun-incomplete": "tests/workflow/test_kill_resume.py",
    "snakemake --report report.html": "tests/workflow/test_workflow.py::test_full_run_report_rerun_identical_and_"
    "nothing_to_do; CI",
    "snakemake --profile profiles/slurm [--config scale=paper] [targets]": "needs a SLURM cluster: .ci/slurm_test.sh "
    "in CI; tests/workflow/test_slurm_profile.py",
    "python -m fedrepro": RUN,
    "python -m fedrepro list": RUN,
    "python -m fedrepro run adaped.fig3b --seed 0 --out /tmp/fig3b/seed0": RUN,
    "python -m fedrepro run adaped.fig3b --seed 1 --out /tmp/fig3b/seed1": RUN,
    "python -m fedrepro aggregate --runs /tmp/fig3b/seed0 /tmp/fig3b/seed1 --out /tmp/fig3b/summary.json": RUN,
    "python -m fedrepro run adaped.fig1a --set n=7 --set 'eps0=[0.2, 0.4]' --set delta=1e-6 --out /tmp/x": RUN,
    "python -m fedrepro report --out-dir /tmp/report": RUN,
    "python -m fedrepro archive list": RUN,
    "python -m fedrepro campaign --dry-run": RUN,
    "python -m fedrepro campaign --jobs 2 --commit": "trains hours of paper-scale runs: tests/archive/test_campaign.py "
    "(the queue, archiving as runs end, a failed run, a stale entry, uncommitted code)",
    "python -m fedrepro campaign fedhdp.skewed_mnist --jobs 2 --commit": "trains hours: tests/archive/test_campaign.py "
    "(a named experiment's lacking seeds)",
    "python -m fedrepro campaign fedhdp.forensic_noniid_clip --commit": "trains hours: tests/archive/test_campaign.py "
    "(a named experiment's lacking seeds)",
    "python -m fedrepro campaign fedhdp.skewed_mnist --seeds 2 3 --commit": "trains hours: tests/archive/"
    "test_campaign.py (seeds beyond the config's, archived before the config asks for them)",
    "python -m fedrepro archive verify": RUN,
    "python -m fedrepro archive compare": RUN,
    "python -m fedrepro archive verify --replay 2": "CI: .ci/run; tests/archive/test_archive.py (replays)",
    "python -m fedrepro archive add results/fedhdp/noniid_mnist/paper/seed0": "tests/archive/test_archive.py (a "
    "paper-scale run of hours is what it takes)",
    "python -m fedrepro ci-check --report results/report/replication.csv": "CI; tests/report/test_report.py",
    "python -m fedrepro data fetch --all --dry-run": RUN,
    "python -m fedrepro compare examples/scaffold.py:Scaffold --experiment ppsgd.x_fig1c_femnist_sample --scale quick "
    "--seeds 0 1 --lr 0.01 0.03 0.1 --out /tmp/scaffold": "needs the LEAF sample in ../shared; "
    "tests/papers/ppsgd/test_method.py::test_scaffold_runs_by_construction_and_its_rows_epsilon_is_the_protocols",
    "python -m fedrepro compare examples/histogram_shrinkage.py:Shrinkage --experiment histograms.x_synthetic "
    "--scale quick --out /tmp/shrink": RUN,
    "python -m fedrepro data fetch <dataset>": "tests/data/test_download.py (a placeholder: any dataset)",
    "python -m fedrepro data partition NAME --out DIR": "tests/workflow/test_faults.py (a placeholder)",
    "python -m fedrepro plan [--cores N]": "run here as python -m fedrepro plan --cores 2 (test_plan_runs)",
    "python -m fedrepro run histograms.x_synthetic --scale paper --seed 0 --out /tmp/h": "hours of a 2.2 GB run: "
    "benchmarks/paper_scale.py measures it; tests/papers/histograms run its pipeline at test size",
    "python -m fedrepro run adaped.table2_fmnist --scale quick --seed 0 --out /tmp/t2": "needs Debian's "
    "dataset-fashion-mnist (CI installs it); the workflow runs it in CI",
    f"{FEDPROX} --out /tmp/fp": "needs the LEAF sample in ../shared; tests/compare/test_acceptance.py",
    f"{FEDPROX} --scale quick --method-arg mu=0.1 --lr 0.05 0.1 0.2 --out /tmp/fedprox_mu01": "needs the LEAF sample; "
    "tests/compare/test_compare.py::test_method_args_and_an_lr_grid_with_a_diverging_lr",
    "python -m fedrepro report --out-dir DIR --compared OUT...": "a placeholder: "
    "tests/workflow/test_extra_methods.py::test_report_lists_extra_tables_apart_and_nothing_without_them",
    "python -m fedrepro report --out-dir /tmp/report --compared /tmp/fedprox /tmp/fedprox_mu01": "needs those compare "
    "outputs; tests/workflow/test_extra_methods.py::test_report_lists_extra_tables_apart_and_nothing_without_them",
    "python -m fedrepro compare examples/fedprox.py:FedProx --experiment adaped.table4_femnist_sample --scale quick "
    "--out /tmp/fedprox": "tests/compare/test_acceptance.py (needs the LEAF sample in ../shared)",
    "python -m fedrepro compare examples/fedprox.py:FedProx --experiment adaped.table4_femnist_sample --seeds 0 1 2 3 "
    "4 --baselines results/adaped/table4_femnist_sample/paper/seed* --out /tmp/fedprox": "needs the workflow's runs "
    "of the LEAF sample (its archived paper seeds, restored): tests/compare/test_compare.py (baselines from runs)",
}


def test_every_readme_command_is_run_by_a_test_or_marked():
    unknown = [c for c in readme_commands() if c not in COVERED]
    assert unknown == [], "README commands with no test (add them to COVERED, and run them):\n" + "\n".join(unknown)
    stale = [c for c in COVERED if c not in readme_commands()]
    assert stale == [], f"COVERED lists commands the README no longer shows: {stale}"


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


RUNS = [c for c, how in COVERED.items() if how == RUN]


@pytest.mark.parametrize("command", RUNS)
def test_readme_command_runs_as_printed(command, tmp_root):
    """In README order, so `aggregate` finds the runs the commands before it made (/tmp/... -> a temp dir)."""
    argv = [a.replace("/tmp/", f"{tmp_root}/") for a in shlex.split(command)]
    r = subprocess.run([sys.executable, *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    if command == "python -m fedrepro":  # no command: the usage, exit status 2, no traceback
        assert r.returncode == 2 and "usage:" in r.stderr and "Traceback" not in r.stderr
        return
    assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, how in COVERED.items() if how == DRY])
def test_readme_snakemake_command_plans(command):
    args = shlex.split(command)[1:]
    if "-n" not in args:
        args = ["-n", *args]
    r = subprocess.run([SNAKEMAKE, "--nolock", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-3000:])


def test_plan_runs():
    r = subprocess.run(
        [sys.executable, "-m", "fedrepro", "plan", "--cores", "2"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "available here" in r.stdout, r.stderr[-2000:]
