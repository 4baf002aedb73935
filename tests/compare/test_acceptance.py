"""The README's command end to end on the offline stand-in of AdaPeD's Table 4 (LEAF FEMNIST sample, quick scale, one
seed to keep it near a minute): the table has the paper's eight method rows and a FedProx row, each with numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fedrepro.cli import main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
METHODS = ["fedavg", "fedavg_ft", "adaped", "pfedme", "perfedavg", "quped", "fml", "local"]


def test_fedprox_under_table4_femnist_sample(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    cfg = ["--config-set", f"data.dir={tmp_path}/data", "--config-set", f"results_dir={tmp_path}/results"]
    if main(["data", "fetch", "leaf_femnist_sf005", "--offline", *cfg]) != 0:
        pytest.skip("the LEAF FEMNIST sample is not in data/ or the mirror here")
    part = tmp_path / "results" / "data" / "femnist_sample_digits_m30"
    assert main(["data", "partition", "femnist_sample_digits_m30", "--out", str(part), *cfg]) == 0
    out = tmp_path / "D"
    argv = ["compare", "examples/fedprox.py:FedProx", "--experiment", "adaped.table4_femnist_sample"]
    assert main([*argv, "--scale", "quick", "--seeds", "0", "--out", str(out), *cfg]) == 0
    assert "failed" not in capsys.readouterr().err
    table = pd.read_csv(out / "table.csv")
    assert list(table["method"]) == [*METHODS, "fedprox"]
    assert table["mean"].between(0, 100).all() and (table["n"] == 1).all()
    md = (out / "table.md").read_text()
    for name in [*METHODS, "fedprox"]:
        assert any(line.startswith(f"| {name} |") and "(n=1)" in line for line in md.splitlines())
    assert (out / "figure.png").stat().st_size > 0  # the experiment has a figure (x_curves_femnist_sample)
    record = json.loads((out / "compare.json").read_text())
    assert record["experiment"] == "adaped.table4_femnist_sample" and record["baselines"] == "rebuilt"
    assert record["inputs"]["partitions"] and record["method"]["spec"] == "examples/fedprox.py:FedProx"
    diffs = pd.read_csv(out / "differences.csv")
    assert list(diffs["baseline"]) == METHODS and not diffs["resolved"].any()  # one seed resolves nothing
