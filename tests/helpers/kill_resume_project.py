"""The small training project of the kill-and-resume tests (tests/workflow/test_kill_resume.py, test_faults.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from learning_helpers import write_quadrant_partition

from fedrepro.config import REPO_ROOT


def write_project(tmp: Path) -> Path:
    """A one-experiment project in ``tmp`` (its config.yaml is returned): an adaped_fl_training run of two methods
    over many short rounds with frequent checkpoints, on a synthetic quadrant-image partition written here."""
    cfg = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    (tmp / "partitions.yaml").write_text(
        yaml.safe_dump(
            {
                "partitions": {
                    "synthetic_quadrants": {
                        "dataset": "digits",
                        "scheme": "natural",
                        "params": {},
                        "seed": 0,
                        "description": "test stand-in: synthetic 8x8 quadrant images written by the test (the "
                        "dataset field only satisfies the schema; the partition is never built from it)",
                    }
                }
            }
        )
    )
    (tmp / "paper.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "killtest",
                "title": "kill-and-resume test",
                "experiments": {
                    "train": {
                        "kind": "adaped_fl_training",
                        "description": "two methods, many short rounds",
                        "partitions": ["synthetic_quadrants"],
                        "params": {
                            "partition": "synthetic_quadrants",
                            "model": {"name": "mlp", "in_features": 64, "hidden": [32]},
                            "epochs": 60,
                            "iters_per_epoch": 4,
                            "batch_size": "auto",
                            "tau": 2,
                            "eval_every": 5,
                            "checkpoint_every": 3,
                            "threads": 1,
                            "methods": {
                                "fedavg": {"algorithm": "fedavg", "lr": 0.1},
                                "adaped": {"algorithm": "adaped", "lr": 0.1, "options": {"psi0": 3.0, "psi_min": 0.5}},
                            },
                        },
                    }
                },
            }
        )
    )
    cfg.update(
        {
            "results_dir": str(tmp / "results"),
            "figures_dir": str(tmp / "figures"),
            "logs_dir": str(tmp / "logs"),
            "partitions": str(tmp / "partitions.yaml"),
            "papers": {"killtest": str(tmp / "paper.yaml")},
            "targets": {},
        }
    )
    cfg.pop("only_papers", None)
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    write_quadrant_partition(tmp / "results" / "data" / "synthetic_quadrants", n_clients=8, noise=60, bright=120)
    return tmp / "config.yaml"


def run_cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    """The command that runs the project's experiment (seed 0, paper scale) into ``out``."""
    return [
        sys.executable,
        "-m",
        "fedrepro",
        "run",
        "killtest.train",
        "--config",
        str(cfg),
        "--scale",
        "paper",
        "--seed",
        "0",
        "--out",
        str(out),
        *extra,
    ]
