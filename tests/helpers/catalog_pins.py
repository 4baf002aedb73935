"""Test-only catalog pins: a fixture in a dataset's exact upstream layout is verified like the real file, against
the sha256 of the fixture (the real values are upstream's and stay in the catalog); and the minimal global config
the data tests fetch with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fedrepro.config import validate_global
from fedrepro.data import catalog
from fedrepro.data.stamps import sha256_of


def pin(monkeypatch, ds_id: str, mirror_dir: Path) -> None:
    """Pin the catalog entry's sha256 values to the fixture files in the mirror (the real values are upstream's).
    A content check goes with the pin: it checks the publisher's real sizes, which a small fixture never has (each
    check is tested on its own)."""
    ds = catalog.get_dataset(ds_id)
    files = tuple(dataclasses.replace(f, sha256=sha256_of(mirror_dir / f.name), content_check=None) for f in ds.files)
    monkeypatch.setitem(catalog.DATASETS, ds_id, dataclasses.replace(ds, files=files))


def data_cfg(tmp_path: Path, mirror: Path | None = None) -> dict:
    """A validated global config whose outputs and data dir lie under ``tmp_path``, with ``mirror`` as data.mirror."""
    return validate_global(
        {
            "scale": "quick",
            "seeds": {"quick": [0], "paper": [0]},
            "results_dir": str(tmp_path / "results"),
            "figures_dir": str(tmp_path / "figures"),
            "logs_dir": str(tmp_path / "logs"),
            "data": {"dir": str(tmp_path / "data"), "mirror": str(mirror) if mirror else None},
            "papers": {"adaped": "config/adaped.yaml"},
        }
    )
