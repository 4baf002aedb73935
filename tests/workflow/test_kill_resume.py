"""Kill-and-resume of a long training run for real: `python -m fedrepro run` of an fl_training experiment is SIGKILLed
after it wrote a round checkpoint, started again, and must end with exactly the metrics and history of an
uninterrupted run; the checkpoints are removed once the run completed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from learning_helpers import write_quadrant_partition

from fedrepro.config import REPO_ROOT

ROOT = REPO_ROOT
pytestmark = pytest.mark.slow     # three training subprocesses (~1 min on 2 busy cores)


def _setup(tmp: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    (tmp / "partitions.yaml").write_text(yaml.safe_dump({"partitions": {"synthetic_quadrants": {
        "dataset": "digits", "scheme": "natural", "params": {}, "seed": 0,
        "description": "test stand-in: synthetic 8x8 quadrant images written by the test (the dataset field only "
                       "satisfies the schema; the partition is never built from it)"}}}))
    (tmp / "paper.yaml").write_text(yaml.safe_dump({"paper": "killtest", "title": "kill-and-resume test", "experiments": {
        "train": {"kind": "fl_training", "description": "two methods, many short rounds",
                  "partitions": ["synthetic_quadrants"],
                  "params": {"partition": "synthetic_quadrants", "model": {"name": "mlp", "in_features": 64,
                                                                           "hidden": [32]},
                             "epochs": 60, "iters_per_epoch": 4, "batch_size": "auto", "tau": 2, "eval_every": 5,
                             "checkpoint_every": 3, "threads": 1,
                             "methods": {"fedavg": {"algorithm": "fedavg", "lr": 0.1},
                                         "adaped": {"algorithm": "adaped", "lr": 0.1,
                                                    "options": {"psi0": 3.0, "psi_min": 0.5}}}}}}}))
    cfg.update({"results_dir": str(tmp / "results"), "figures_dir": str(tmp / "figures"), "logs_dir": str(tmp / "logs"),
                "partitions": str(tmp / "partitions.yaml"), "papers": {"killtest": str(tmp / "paper.yaml")},
                "targets": {}})
    cfg.pop("only_papers", None)
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    write_quadrant_partition(tmp / "results" / "data" / "synthetic_quadrants", n_clients=8, noise=60, bright=120)
    return tmp / "config.yaml"


def _cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fedrepro", "run", "killtest.train", "--config", str(cfg), "--scale", "paper",
            "--seed", "0", "--out", str(out), *extra]


def _result(out: Path):
    m = json.loads((out / "metrics.json").read_text())
    return m["metrics"], pd.read_parquet(out / "history.parquet")


def test_sigkilled_training_resumes_from_its_checkpoint(tmp_path):
    cfg = _setup(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FEDREPRO_PROGRESS": "0"}
    ref = tmp_path / "ref"
    r = subprocess.run(_cmd(cfg, ref, "--no-checkpoint"), cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (ref / ".checkpoints").exists()

    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(cfg, out), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, ckpts = time.time() + 120, []
    while time.time() < deadline and proc.poll() is None:
        ckpts = list((out / ".checkpoints").glob("*.pt")) if (out / ".checkpoints").is_dir() else []
        if len(ckpts) >= 2:                      # the first training finished, the second one is under way
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed: make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists() and ckpts
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")], "a half-written file survived the kill"

    r = subprocess.run(_cmd(cfg, out), cwd=ROOT, env={**env, "FEDREPRO_PROGRESS": "1"}, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    progress = [line.split() for line in r.stderr.splitlines() if line.startswith("[progress]")]
    assert progress and len({p[1] for p in progress}) == 1          # the finished method was not trained again
    assert int(progress[0][4].split("/")[0]) > 1                     # the other continued after its last checkpoint
    got, want = _result(out), _result(ref)
    assert got[0] == want[0]
    pd.testing.assert_frame_equal(got[1], want[1])
    assert not (out / ".checkpoints").exists()        # removed once the run completed
