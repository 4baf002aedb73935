"""FedHDP's global columns re-evaluated from a run's kept final models under other readings of the local test sets
(fedrepro.papers.fedhdp.test_readings): the partition's reading gives the trained run's numbers (a check that fails
on another run's models), the other readings give each client the test images they say."""

from __future__ import annotations

import json
import shutil

import pytest
from tiny_fedhdp import EXP, made_runs, write_paper

from fedrepro.cli import main
from fedrepro.runio import ARRAYS


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("readings")
    paper = write_paper(base / "fedhdp.yaml")
    sets = ["--config-set", f"results_dir={base / 'results'}", "--config-set", f"papers.fedhdp={paper}"]
    made_runs(base, sets)
    return base, sets


def reevaluate(base, sets, reading: str, seed: int = 0) -> dict:
    out = base / f"re_{reading}_{seed}"
    flag = f"reevaluate={{test_reading: {reading}}}"
    assert main(["run", EXP, "--scale", "paper", "--seed", str(seed), "--set", flag, "--out", str(out), *sets]) == 0
    return json.loads((out / "metrics.json").read_text())


def test_the_partition_reading_gives_the_trained_runs_columns(made):
    base, sets = made
    doc = reevaluate(base, sets, "partition")
    assert doc["checks"]["reevaluation_matches_run"]["passed"]
    trained = json.loads((base / "results/fedhdp/tiny/paper/seed0/metrics.json").read_text())["metrics"]
    for method, cols in doc["metrics"]["lam0.05"].items():
        for key, value in cols.items():
            assert value == pytest.approx(trained["lam0.05"][method][key], abs=1e-6), (method, key)
    assert "acc_l_np" not in doc["metrics"]["lam0.05"]["nonprivate_ditto"]  # no personal models: not evaluated


def test_other_readings_give_each_client_its_digits_images(made):
    base, sets = made
    sample = reevaluate(base, sets, "digit_sample")
    assert sample["metrics"]["test_per_client"] == {"min": 195.0, "mean": 195.0, "max": 195.0}
    every = reevaluate(base, sets, "digit_all")["metrics"]["test_per_client"]
    assert 850 <= every["min"] < every["max"] <= 1200  # MNIST has 892 (digit 5) to 1,135 (digit 1) test images
    part = reevaluate(base, sets, "partition")
    assert (
        sample["metrics"]["lam0.05"]["nonprivate_ditto"]["acc_g"]
        == part["metrics"]["lam0.05"]["nonprivate_ditto"]["acc_g"]
    )


def test_the_check_fails_on_another_runs_models(made, tmp_path):
    """Seed 1's final models under seed 0's run: the partition reading no longer gives its numbers."""
    base, sets = made
    fake = tmp_path / "results"
    shutil.copytree(base / "results", fake)
    run0, run1 = (fake / "fedhdp/tiny/paper" / f"seed{s}" for s in (0, 1))
    shutil.copy(run1 / ARRAYS, run0 / ARRAYS)
    doc = reevaluate(tmp_path, ["--config-set", f"results_dir={fake}", *sets[2:]], "partition")
    check = doc["checks"]["reevaluation_matches_run"]
    assert not check["passed"] and "in " in check["detail"]


def test_no_training_run_is_one_line_saying_what_to_build(tmp_path, made, capsys):
    base, sets = made
    shutil.copytree(base / "results" / "data", tmp_path / "none" / "data")  # the partition, no runs
    empty = ["--config-set", f"results_dir={tmp_path / 'none'}", *sets[2:]]
    flag = "reevaluate={test_reading: digit_all}"
    assert main(["run", EXP, "--scale", "paper", "--set", flag, "--out", str(tmp_path / "o"), *empty]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "re-evaluating seed 0 (its final models) needs a run of fedhdp.tiny seed 0" in err


def test_a_training_run_made_from_other_data_is_not_read(tmp_path, made, capsys):
    """A kept run whose recorded partition manifest is not the partition built here (data rebuilt since) is refused,
    naming the input that changed, instead of being re-evaluated against data it never saw."""
    base, sets = made
    fake = tmp_path / "results"
    shutil.copytree(base / "results", fake)
    metrics = fake / "fedhdp/tiny/paper/seed0/metrics.json"
    doc = json.loads(metrics.read_text())
    (name,) = doc["inputs"]["partitions"]
    doc["inputs"]["partitions"][name] = "0" * 64
    metrics.write_text(json.dumps(doc))
    flag = "reevaluate={test_reading: partition}"
    args = ["--config-set", f"results_dir={fake}", *sets[2:]]
    assert main(["run", EXP, "--scale", "paper", "--set", flag, "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"made from other input data than is here now (partition {name} (the run read" in err
    )
