"""Kill-and-resume of a long training run for real: `python -m fedrepro run` of an adaped_fl_training experiment is
SIGKILLed after it wrote a round checkpoint, started again, and must end with exactly the metrics and history of an
uninterrupted run; the checkpoints are removed once the run completed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from kill_resume_project import run_cmd as _cmd
from kill_resume_project import write_project as _setup

from fedrepro.config import REPO_ROOT

ROOT = REPO_ROOT
pytestmark = pytest.mark.slow  # three training subprocesses (~1 min on 2 busy cores)


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
        if len(ckpts) >= 2:  # the first training finished, the second one is under way
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed: make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists() and ckpts
    # a SIGKILL during a checkpoint write can leave that write's temporary file (nothing can catch the signal); it
    # never has a checkpoint's name, so it is never read as one, and the resumed run leaves none behind (below)
    assert all(
        p.name.endswith(".tmp") or p.suffix == ".pt" or p.name == "inputs.json"
        for p in (out / ".checkpoints").iterdir()
    )

    r = subprocess.run(_cmd(cfg, out), cwd=ROOT, env={**env, "FEDREPRO_PROGRESS": "1"}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    progress = [line.split() for line in r.stderr.splitlines() if line.startswith("[progress]")]
    # the finished method was not trained again (what the resumed run said, if it was)
    assert progress and len({p[1] for p in progress}) == 1, r.stdout[-2000:] + r.stderr[:1000]
    assert int(progress[0][4].split("/")[0]) > 1  # the other continued after its last checkpoint
    got, want = _result(out), _result(ref)
    assert got[0] == want[0]
    pd.testing.assert_frame_equal(got[1], want[1])
    assert not (out / ".checkpoints").exists()  # removed once the run completed
    made = json.loads((out / "metrics.json").read_text())
    assert [a["code_version"] for a in made["earlier_attempts"]] == [made["code_version"]]  # the killed attempt
    assert "earlier_attempts" not in json.loads((ref / "metrics.json").read_text())
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")], "a half-written file outlived the resumed run"
