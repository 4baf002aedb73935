"""FedHDP's global columns re-evaluated from a run's kept final models under other readings of the local test sets
(fedrepro.papers.fedhdp.test_readings): the partition's reading gives the trained run's numbers (a check that fails
on another run's models), the other readings give each client the test images they say."""

from __future__ import annotations

import json
import shutil

import numpy as np
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
    # the personal columns under the partition's reading are the trained run's own (compared in the loop above)
    assert "acc_l_np" in doc["metrics"]["lam0.05"]["nonprivate_ditto"]


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


def test_the_personal_columns_are_read_from_the_accuracies_the_run_kept(made):
    """A trained run keeps its personal models' accuracies under the digit readings (λ x client); a re-evaluation
    under such a reading reports the personal columns from them."""
    base, sets = made
    with np.load(base / "results/fedhdp/tiny/paper/seed0" / ARRAYS) as arrays:
        kept = {k: arrays[k] for k in arrays.files if k.startswith("local_acc.")}
    assert sorted(kept) == [
        f"local_acc.{r}.{m}" for r in ("digit_all", "digit_sample") for m in ("fedhdp_r_0_1", "nonprivate_ditto")
    ]
    assert all(v.shape == (1, 2000) and np.all((v >= 0) & (v <= 1)) for v in kept.values())
    every = reevaluate(base, sets, "digit_all")["metrics"]["lam0.05"]["nonprivate_ditto"]
    assert every["acc_l_np"] == pytest.approx(100 * kept["local_acc.digit_all.nonprivate_ditto"][0].mean())
    assert every["acc_l_np_var"] == pytest.approx(100 * kept["local_acc.digit_all.nonprivate_ditto"][0].var())
    fedhdp = reevaluate(base, sets, "digit_sample")["metrics"]["lam0.05"]["fedhdp_r_0_1"]
    assert fedhdp["d_l"] == pytest.approx(fedhdp["acc_l_np"] - fedhdp["acc_l_p"])


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


class _Rows:
    """A partition of 4 clients (digits 0, 0, 1, 1), 300 test images of each digit, and a "model" per client that is
    right on a test row exactly when the row's index is not a multiple of the client's modulus: every accuracy on a
    set of rows is known in closed form."""

    n_clients = 4
    labels = np.repeat([0, 1, 0, 1], 150)

    def offsets(self, split):
        return np.array([0, 150, 300, 450, 600])

    def client_meta(self, key):
        return np.array([0, 1, 0, 1])


class _Data:
    device = "cpu"

    def gather(self, rows):
        import torch

        return torch.from_numpy(np.stack([rows, _Rows.labels[rows]], 1)), torch.from_numpy(_Rows.labels[rows])


class _Net:
    def logits(self, p, x):
        import torch

        label = x[:, 1] if x[:, 0] % p["m"] != 0 else (x[:, 1] + 1) % 10
        return torch.nn.functional.one_hot(label, 10).float()

    def map(self, fn, params, xs, ys):
        import torch

        rows = [
            [fn({"m": params["m"][c]}, xs[c, i : i + 1], ys[c, i : i + 1])[0] for i in range(xs.shape[1])]
            for c in range(xs.shape[0])
        ]
        return torch.tensor(rows)


def test_a_run_evaluates_its_personal_models_on_each_readings_images():
    """local_accuracies: each client's personal model on exactly the rows each reading gives it (checked against
    the models' closed form), kept per λ and client."""
    import torch

    from fedrepro.papers.fedhdp.test_readings import LOCAL_READINGS, _per_client_sets, local_accuracies, local_key

    ds = _Rows()
    moduli = [torch.tensor([2, 3, 5, 7]), torch.tensor([4, 4, 9, 11])]  # two λ
    got = local_accuracies(_Net(), [{"m": m} for m in moduli], ds, _Data(), "fedhdp_r_0_1", chunk_clients=1)
    assert sorted(got) == sorted(local_key(r, "fedhdp_r_0_1") for r in LOCAL_READINGS)
    for reading in LOCAL_READINGS:
        sets, _ = _per_client_sets(ds, reading)
        want = [[float(np.mean(sets[c] % int(m[c]) != 0)) for c in range(4)] for m in moduli]
        assert np.allclose(got[local_key(reading, "fedhdp_r_0_1")], want)
    assert (
        local_accuracies(_Net(), [], type("NoDigits", (_Rows,), {"client_meta": lambda s, k: {}[k]})(), None, "x") == {}
    )


def test_a_run_that_kept_no_personal_accuracies_leaves_those_columns_undefined(tmp_path, made):
    """A run made with ``local_readings: false`` (the quick wiring runs) kept no personal-model accuracies: under a
    digit reading its personal columns are undefined (null), never the partition's numbers passed off as the
    reading's; under the partition's reading they are the run's own."""
    from tiny_fedhdp import made_runs

    paper = write_paper(tmp_path / "fedhdp.yaml", local_readings=False)
    sets = ["--config-set", f"results_dir={tmp_path / 'results'}", "--config-set", f"papers.fedhdp={paper}"]
    made_runs(tmp_path, sets)
    sample = reevaluate(tmp_path, sets, "digit_sample")["metrics"]["lam0.05"]["fedhdp_r_0_1"]
    assert sample["acc_g_np"] is not None and sample["acc_l_np"] is None and sample["d_l"] is None
    part = reevaluate(tmp_path, sets, "partition")["metrics"]["lam0.05"]["fedhdp_r_0_1"]
    trained = json.loads((tmp_path / "results/fedhdp/tiny/paper/seed0/metrics.json").read_text())["metrics"]
    assert part["acc_l_np"] == trained["lam0.05"]["fedhdp_r_0_1"]["acc_l_np"] is not None
