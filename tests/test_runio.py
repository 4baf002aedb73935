"""What a run directory records beside its metrics: when and where it ran, and its small arrays."""

from __future__ import annotations

import json

import numpy as np

from fedrepro.config import load_global, resolve_experiment
from fedrepro.experiments import RunOutput
from fedrepro.provenance import machine
from fedrepro.runio import ARCHIVED, ARRAYS, METRICS, RunClock, write_run


def test_machine_names_cpu_cores_threads_and_load():
    m = machine()
    assert m["cpu"] and m["logical_cpus"] >= 1 and 1 <= m["cpus_allowed"] <= m["logical_cpus"]
    assert isinstance(m["gpus"], list) and len(m["load_avg"]) == 3


def test_a_run_records_its_start_machine_and_arrays(tmp_path):
    exp = resolve_experiment(load_global(), "ppsgd.theorems", "paper")
    weights = {"m.w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    write_run(tmp_path, exp, 0, RunOutput(metrics={"x": 1.0}, arrays=weights), 1.5, clock=RunClock())
    doc = json.loads((tmp_path / METRICS).read_text())
    assert doc["started_at"].endswith("+00:00") and doc["machine"]["cpu"]
    assert len(doc["machine"]["load_avg_at_start"]) == 3
    with np.load(tmp_path / ARRAYS, allow_pickle=False) as back:
        assert back.files == ["m.w"] and np.array_equal(back["m.w"], weights["m.w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrays.npz", "config.yaml", "history.parquet", METRICS]


def test_a_run_without_arrays_writes_no_arrays_file(tmp_path):
    exp = resolve_experiment(load_global(), "ppsgd.theorems", "paper")
    write_run(tmp_path, exp, 0, RunOutput(metrics={"x": 1.0}), 0.0)
    assert not (tmp_path / ARRAYS).exists() and "machine" not in json.loads((tmp_path / METRICS).read_text())


def test_a_run_made_over_a_restored_one_leaves_none_of_its_files(tmp_path):
    """The workflow reran a forensic sweep whose archived run had gone stale into the directory it was restored to:
    the old archived.json stayed, calling the new run archived (and arrays.npz would have too)."""
    exp = resolve_experiment(load_global(), "ppsgd.theorems", "paper")
    (tmp_path / ARCHIVED).write_text('{"archived": "archive/x"}')
    (tmp_path / ARRAYS).write_bytes(b"old")
    write_run(tmp_path, exp, 0, RunOutput(metrics={"x": 1.0}), 0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "history.parquet", METRICS]


def test_a_runs_config_yaml_keeps_infinite_parameters():
    """PPSGD's alpha Q = inf: config.yaml wrote it as null before (JSON's rule), so the file no longer digested to the
    run's params_digest; YAML has .inf."""
    import tempfile
    from pathlib import Path

    import yaml

    from fedrepro.provenance import params_digest

    exp = resolve_experiment(load_global(), "ppsgd.fig1a_synthetic", "quick")
    assert any(isinstance(a, str) and "inf" in a or a == float("inf") for a in exp.params["alphas"])
    with tempfile.TemporaryDirectory() as d:
        write_run(Path(d), exp, 0, RunOutput(metrics={"x": 1.0}), 0.0)
        doc = yaml.safe_load((Path(d) / "config.yaml").read_text())
        metrics = json.loads((Path(d) / METRICS).read_text())
    assert params_digest(doc["params"]) == metrics["params_digest"]
