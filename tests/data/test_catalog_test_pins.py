"""FEDREPRO_TEST_PINS: test-only pins that reach the `python -m fedrepro` processes Snakemake starts, honoured only
for a file that says it pins synthetic data, and recorded by every run that used them."""

import json
import os
import subprocess
import sys

import pytest

from fedrepro.data import catalog
from fedrepro.errors import ConfigError
from fedrepro.provenance import input_digests

DS = "election_county_returns"
NAME = "countypres_2000-2020.csv"


@pytest.fixture
def fresh_catalog(monkeypatch):
    """A catalog loaded again under this test's environment (restored afterwards)."""
    catalog.all_datasets()
    monkeypatch.setattr(catalog, "DATASETS", dict(catalog.DATASETS))
    monkeypatch.setattr(catalog, "_loaded", False)
    monkeypatch.setattr(catalog, "_TEST_PINNED", set())


def _pins(tmp_path, doc) -> str:
    p = tmp_path / "pins.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_synthetic_pins_replace_sha256_drop_the_check_and_are_recorded(tmp_path, monkeypatch, fresh_catalog, capsys):
    path = _pins(tmp_path, {"synthetic": True, "datasets": {DS: {NAME: "ab" * 32}}})
    monkeypatch.setenv(catalog.TEST_PINS_ENV, path)
    (f,) = catalog.get_dataset(DS).files
    assert f.sha256 == "ab" * 32 and f.content_check is None
    assert catalog.get_dataset("cifar10").files[0].sha256 != "ab" * 32  # datasets not listed keep their pins
    assert "[fedrepro] TEST PINS in use: synthetic data, never a result" in capsys.readouterr().err
    assert input_digests({}, {})["test_pins"] == path


def test_a_test_pinned_dataset_has_no_local_provider(tmp_path, monkeypatch, fresh_catalog):
    """A provider writes the real files, which never match synthetic pins: the mirror serves them instead."""
    names = {f.name: "ab" * 32 for f in catalog.get_dataset("mnist").files}
    monkeypatch.setattr(catalog, "_loaded", False)
    monkeypatch.setenv(catalog.TEST_PINS_ENV, _pins(tmp_path, {"synthetic": True, "datasets": {"mnist": names}}))
    assert catalog.get_provider("mnist") is None and catalog.get_provider("fashion_mnist") is not None


@pytest.mark.parametrize(
    "doc, says",
    [
        ({"datasets": {DS: {NAME: "ab" * 32}}}, '"synthetic": true'),
        ({"synthetic": "yes", "datasets": {}}, '"synthetic": true'),
        ({"synthetic": True, "datasets": {DS: {"other.csv": "ab" * 32}}}, f"datasets.{DS}: unknown"),
        ({"synthetic": True, "datasets": {"nope": {}}}, "datasets.nope: unknown"),
    ],
)
def test_pins_not_synthetic_or_unknown_are_refused_in_one_line(tmp_path, monkeypatch, fresh_catalog, doc, says):
    monkeypatch.setenv(catalog.TEST_PINS_ENV, _pins(tmp_path, doc))
    with pytest.raises(ConfigError) as e:
        catalog.get_dataset(DS)
    assert says in str(e.value) and catalog.TEST_PINS_ENV in str(e.value) and "\n" not in str(e.value)


def test_without_the_variable_nothing_changes_and_nothing_is_recorded(monkeypatch, fresh_catalog):
    monkeypatch.delenv(catalog.TEST_PINS_ENV, raising=False)
    assert catalog.get_dataset(DS).files[0].content_check is not None
    assert "test_pins" not in input_digests({}, {})


def test_cli_refuses_pins_not_marked_synthetic_with_one_line(tmp_path):
    env = {**os.environ, catalog.TEST_PINS_ENV: _pins(tmp_path, {"datasets": {}})}
    r = subprocess.run(
        [sys.executable, "-m", "fedrepro", "data", "status", DS], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and '"synthetic": true' in lines[0], r.stderr
