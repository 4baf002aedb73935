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


def _compared(tmp_path: Path, out: Path, method_body: str | None = None) -> Path:
    """A real `compare` output (table.csv, differences.csv, compare.json, table.md) of FedProx, or of the method
    ``method_body``, under a two-seed test protocol on the quadrants partition."""
    import textwrap

    from learning_helpers import write_quadrant_partition

    from fedrepro.compare.method_file import load_method
    from fedrepro.compare.protocol import compare
    from fedrepro.compare.table import write_comparison, write_record
    from fedrepro.config import Experiment, resolve_params
    from fedrepro.experiments import RunContext, get_kind

    part = write_quadrant_partition(tmp_path / f"p_{out.name}")
    params = {
        "partition": "p",
        "model": {"name": "mlp", "in_features": 64, "hidden": [16]},
        "epochs": 2,
        "iters_per_epoch": 4,
        "batch_size": "auto",
        "tau": 2,
        "eval_every": 2,
        "threads": 1,
        "methods": {"fedavg": {"algorithm": "fedavg", "lr": 0.1}},
    }
    params = resolve_params(params, get_kind("adaped_fl_training").schema)
    exp = Experiment("adaped", "table4_femnist_sample", "adaped_fl_training", "test", params, params, "quick", ())
    method = REPO_ROOT / "examples" / "fedprox.py"
    cls = "FedProx"
    if method_body is not None:
        method = tmp_path / "m.py"
        method.write_text(textwrap.dedent(method_body))
        cls = "Broken"
    comp = compare(exp, load_method(f"{method}:{cls}"), method, [0, 1],
                   lambda seed: RunContext(exp.id, seed, partitions={"p": part}))  # fmt: skip
    write_comparison(comp, out, figure=False)
    write_record(comp, out, f"{method}:{cls}", None, 1.0)
    return out


def test_report_lists_extra_tables_apart_and_nothing_without_them(tmp_path):
    """From the structured compare outputs: the table, the method's failures with their reasons, the paired
    differences; the workflow's results/extra/ (config extra_methods) and `report --compared DIR` alike."""
    dirs = {"results_dir": str(tmp_path / "results"), "figures_dir": str(tmp_path / "f"), "data": {"dir": "data"}}
    cfg = {**dirs, "extra_methods": {"fedprox": "examples/fedprox.py:FedProx"}}
    table_dir = tmp_path / "results" / "extra" / "fedprox" / "adaped" / "table4_femnist_sample" / "quick"
    _compared(tmp_path, table_dir)
    extra = extra_methods(cfg)
    assert [t["experiment"] for t in extra[0]["tables"]] == ["adaped.table4_femnist_sample"]
    text = "\n".join(extra_markdown(extra, tmp_path / "results" / "report"))
    assert "## Methods from outside the papers (extra rows; never judged)" in text
    link = "../extra/fedprox/adaped/table4_femnist_sample/quick/table.md"
    assert f"**adaped.table4_femnist_sample** (quick; [table]({link}))" in text
    assert "| fedprox | yours: not in the paper, never judged | " in text and "(n=2) |" in text
    assert "fedprox minus each baseline:" in text and "| fedavg | acc | " in text and "resolved (Holm)" in text
    assert extra_methods(dirs) == [] and extra_markdown([], tmp_path) == []
    # a compare output directory given to the report (`report --compared DIR`), its failed row with the reason
    broken = _compared(
        tmp_path,
        tmp_path / "broken",
        """
        from fedrepro.learning.fedavg import FedAvg

        class Broken(FedAvg):
            name = "broken"

            def local_step(self, state, x, y, selected, lr):
                raise RuntimeError("not yet")
        """,
    )
    extra = extra_methods(dirs, [broken])
    text = "\n".join(extra_markdown(extra, tmp_path))
    assert "### broken (" in text and "| broken | yours: not in the paper, never judged | failed |" in text
    assert "broken failed: seed 0: " in text and "RuntimeError: not yet" in text
