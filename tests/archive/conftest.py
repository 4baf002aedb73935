"""The archive tests' world: two paper-scale seeds of the tiny FedHDP protocol (tests/helpers/tiny_fedhdp.py)."""

from __future__ import annotations

import shutil

import pytest
from tiny_fedhdp import made_runs, settings, write_paper


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("archive")
    paper = write_paper(base / "fedhdp.yaml")
    made_runs(base, settings(base, paper))
    return base, paper


@pytest.fixture
def world(made, tmp_path):
    """A copy of the made runs (and their partition) with an empty archive, for one test to change."""
    base, _ = made
    shutil.copytree(base / "results", tmp_path / "results")
    paper = write_paper(tmp_path / "fedhdp.yaml")
    return tmp_path, settings(tmp_path, paper)
