"""An archived run is replayed with the CNN arithmetic it was made with (fedrepro.archive.replay): the PyTorch
formulation for a run whose machine record does not name the compiled kernel, the kernel for one that does, and where
that kernel cannot be built here the per-loss bound is not applied, saying why."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedrepro.archive import replay
from fedrepro.learning import native_cnn


@pytest.fixture
def seen(monkeypatch):
    """What the replay's training sees: whether the kernel is switched off in this process and for its workers."""
    state: dict = {}

    def train(cfg, entry, rounds):
        state.update(off=bool(native_cnn._off), env=os.environ.get("FEDREPRO_NATIVE"))
        return {(): np.array([2.0, 1.5])}

    monkeypatch.setattr(replay, "traces", lambda history: {(): np.array([2.0, 1.5])})
    monkeypatch.setattr(replay, "read_history", lambda d: None)
    monkeypatch.setattr(replay, "replayed_traces", train)
    monkeypatch.delenv("FEDREPRO_NATIVE", raising=False)
    return state


def entry(machine: dict) -> SimpleNamespace:
    return SimpleNamespace(
        dir=Path("archive/adaped/x/paper/seed0"), experiment="adaped.x", manifest={"made": {"machine": machine}}
    )


def test_a_run_made_before_the_kernel_is_replayed_with_the_pytorch_formulation(seen):
    from fedrepro.provenance import machine

    cpu = machine()["cpu"]
    result = replay.replay({}, entry({"cpu": cpu}), 2)
    assert seen == {"off": True, "env": "0"} and result.other_cpu is None and not result.problems
    assert "FEDREPRO_NATIVE" not in os.environ and not native_cnn._off  # as before, after it

    replay.replay({}, entry({"cpu": cpu, "cnn_kernel": "torch (FEDREPRO_NATIVE=0)"}), 2)
    assert seen == {"off": True, "env": "0"}


def test_a_run_made_with_the_kernel_is_replayed_with_it_or_judged_by_the_median(seen, monkeypatch):
    from fedrepro.provenance import machine

    cpu = machine()["cpu"]
    monkeypatch.setattr(native_cnn, "kernel", lambda: "native (native_cnn.c 0123, cc, -O3 -march=native)")
    result = replay.replay({}, entry({"cpu": cpu, "cnn_kernel": "native (native_cnn.c abcd, cc, -O3)"}), 2)
    assert seen == {"off": False, "env": None} and result.other_cpu is None

    monkeypatch.setattr(native_cnn, "kernel", lambda: "torch (no C compiler: cc not found)")
    result = replay.replay({}, entry({"cpu": cpu, "cnn_kernel": "native (native_cnn.c abcd, cc, -O3)"}), 2)
    assert "without the compiled CNN kernel (torch (no C compiler" in result.other_cpu
