"""On-disk federated dataset format: round trip, memmap, manifest, no pickle, atomic writes; the data plot."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fedrepro.data import fedformat as ff
from fedrepro.data.partition import LabelSet, partition
from fedrepro.errors import DataError


@pytest.fixture(scope="module")
def small():
    """MNIST-shaped synthetic data: 3,000 train / 600 test images, 10 classes."""
    rng = np.random.default_rng(0)
    ytr, yte = rng.integers(0, 10, 3000), rng.integers(0, 10, 600)
    xtr = rng.integers(0, 256, (3000, 28, 28), dtype=np.uint8)
    xte = rng.integers(0, 256, (600, 28, 28), dtype=np.uint8)
    return xtr, ytr, xte, yte


@pytest.fixture(scope="module")
def natural():
    """Writer-labelled float32 features with coarse labels and string writer ids."""
    rng = np.random.default_rng(1)
    ids = np.array([f"w{i:03d}" for i in range(40)])
    gtr, gte = np.repeat(ids, rng.integers(5, 30, 40)), np.repeat(ids, rng.integers(1, 6, 40))
    ytr, yte = rng.integers(0, 20, len(gtr)), rng.integers(0, 20, len(gte))
    tr = LabelSet(ytr, groups=gtr, coarse=ytr // 5)
    te = LabelSet(yte, groups=gte, coarse=yte // 5)
    xtr = rng.standard_normal((len(gtr), 7)).astype(np.float32)
    xte = rng.standard_normal((len(gte), 7)).astype(np.float32)
    return xtr, tr, xte, te


def write_patho(small, path, **kw):
    xtr, ytr, xte, yte = small
    p = partition("pathological", ytr, yte, seed=0, n_clients=12, classes_per_client=3)
    src = {"dataset": "synthetic", "files": {"train.bin": "0" * 64}}
    return p, ff.write(path, p, xtr, ytr, xte, yte, source=src, **kw)


def test_round_trip_views_and_manifest(small, tmp_path):
    xtr, ytr, xte, yte = small
    p, out = write_patho(small, tmp_path / "ds")
    assert sorted(f.name for f in out.iterdir()) == [".verified.json", "features.npy", "index.parquet", "manifest.json"]
    ds = ff.load(out, verify=True)
    assert isinstance(ds.features, np.memmap) and not ds.features.flags.writeable
    for c in range(p.n_clients):
        for split, x, y in (("train", xtr, ytr), ("test", xte, yte)):
            fx, fy = ds.client_arrays(c, split)
            idx = p.indices(c, split)
            assert np.array_equal(fx, x[idx]) and np.array_equal(fy, y[idx])
            assert np.shares_memory(fx, ds.features)  # a view into the memmap, not a copy
            assert np.array_equal(ds.source_index[ds.client_rows(c, split)], idx)
    # train and test rows of a client never overlap, and come from their own split
    rows_tr, rows_te = ds.client_rows(0, "train"), ds.client_rows(0, "test")
    assert rows_tr.stop <= ds.offsets("test")[0] <= rows_te.start
    assert (ds.split[rows_tr] == 0).all() and (ds.split[rows_te] == 1).all()
    assert np.array_equal(ds.class_counts("train"), p.class_counts(ytr))

    m = json.loads((out / "manifest.json").read_text())
    for key in (
        "format",
        "format_version",
        "fedrepro_version",
        "source",
        "partition",
        "n_clients",
        "n_classes",
        "features",
        "index",
        "splits",
        "clients",
    ):
        assert key in m
    assert m["source"] == {"dataset": "synthetic", "files": {"train.bin": "0" * 64}}
    assert m["partition"]["scheme"] == "pathological" and m["partition"]["seed"] == 0
    assert m["partition"]["params"]["classes_per_client"] == 3
    c0 = m["clients"][0]
    assert c0["train"] == len(p.indices(0)) and c0["test"] == len(p.indices(0, "test"))
    assert len(c0["train_classes"]) == 3 and c0["classes"] == c0["train_classes"]
    assert m["features"]["sha256"] == hashlib.sha256((out / "features.npy").read_bytes()).hexdigest()
    # never pickled: plain np.load without pickle succeeds
    arr = np.load(out / "features.npy", allow_pickle=False)
    assert arr.dtype == np.uint8 and arr.shape == (3600, 28, 28)


def test_index_columns_coarse_and_writer(natural, tmp_path):
    import pyarrow.parquet as pq

    xtr, tr, xte, te = natural
    p = partition("natural", tr, te, n_clients=30, select="random", seed=3)
    out = ff.write(tmp_path / "nat", p, xtr, tr, xte, te)
    t = pq.read_table(out / "index.parquet")
    assert t.column_names == ["row", "client_id", "split", "label", "source_index", "coarse_label", "writer"]
    ds = ff.load(out)
    assert ds.features.dtype == np.float32 and ds.n_clients == 30
    assert len(ds.features) == (p.train_client >= 0).sum() + (p.test_client >= 0).sum()  # unused users dropped
    for c in (0, 29):
        w = ds.client_meta("writer")[c]
        rows = ds.client_rows(c, "test")
        assert (ds.writer[rows] == w).all() and np.array_equal(ds.coarse_labels[rows], te.coarse[te.groups == w])
        assert np.array_equal(ds.client_arrays(c, "train")[0], xtr[tr.groups == w])
    assert ds.class_counts("train", coarse=True).shape == (30, 4)
    kept = ff.load(ff.write(tmp_path / "all", p, xtr, tr, xte, te, keep_unassigned=True))
    assert len(kept.features) == len(tr) + len(te) and (kept.client_id == -1).sum() > 0
    assert np.array_equal(kept.client_arrays(5, "test")[0], ds.client_arrays(5, "test")[0])


def test_batched_access(small, tmp_path):
    _, out = write_patho(small, tmp_path / "ds")
    ds = ff.load(out)
    rows, mask = ds.padded_rows("train")
    assert rows.shape == (12, ds.counts().max()) and mask.sum() == ds.counts().sum()
    assert (ds.client_id[rows[mask]] == np.repeat(np.arange(12), ds.counts())).all()
    rng = np.random.default_rng(0)
    clients = np.array([3, 0, 11])
    for replace in (True, False):
        r = ds.sample_rows(clients, 20, rng, replace=replace)
        assert r.shape == (3, 20) and (ds.client_id[r] == clients[:, None]).all()
        if not replace:
            assert all(len(np.unique(row)) == 20 for row in r)
    xb = ds.features[r]
    assert xb.shape == (3, 20, 28, 28)
    x, y = ds.split_arrays("test")
    assert len(x) == 600 and len(y) == 600


def test_writes_are_deterministic(small, tmp_path):
    _, a = write_patho(small, tmp_path / "a")
    _, b = write_patho(small, tmp_path / "b")
    for name in ("features.npy", "index.parquet", "manifest.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_chunked_feature_gather_writes_the_same_bytes(small, tmp_path, monkeypatch):
    _, whole = write_patho(small, tmp_path / "whole")
    monkeypatch.setattr(ff, "CHUNK_BYTES", 1000)  # one 784-byte row per chunk
    _, chunked = write_patho(small, tmp_path / "chunked")
    for name in ("features.npy", "index.parquet", "manifest.json"):
        assert (whole / name).read_bytes() == (chunked / name).read_bytes()


def test_interrupted_write_leaves_nothing_that_looks_complete(small, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(ff, "_classes_of", boom)  # after features and index, before the manifest
    with pytest.raises(RuntimeError, match="killed"):
        write_patho(small, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []  # no target and no temporary directory left
    assert not ff.is_complete(tmp_path / "ds")
    monkeypatch.undo()

    # an interrupted overwrite keeps the old, complete dataset
    _, out = write_patho(small, tmp_path / "ds")
    before = (out / "manifest.json").read_bytes()
    monkeypatch.setattr(ff, "_classes_of", boom)
    with pytest.raises(RuntimeError):
        write_patho(small, out, overwrite=True)
    monkeypatch.undo()
    assert (out / "manifest.json").read_bytes() == before and ff.is_complete(out)
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    with pytest.raises(FileExistsError):
        write_patho(small, out)
    write_patho(small, out, overwrite=True)
    assert ff.is_complete(out) and [p.name for p in tmp_path.iterdir()] == ["ds"]


KILLED_WRITER = """
import os, signal, sys
import numpy as np
from fedrepro.data import fedformat as ff
from fedrepro.data.partition import partition
rng = np.random.default_rng(0)
y = rng.integers(0, 10, 300)
p = partition("pathological", y, None, seed=0, n_clients=5, classes_per_client=3)
ff._write_index = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed after features.npy, before the manifest
ff.write(sys.argv[1], p, rng.integers(0, 256, (300, 8, 8), dtype=np.uint8), y)
"""


def test_a_killed_writers_temporary_directory_is_removed_by_the_next_write(small, tmp_path):
    """kill -9 leaves a hidden temporary directory no cleanup could remove; the next write of the same target
    removes it (and those of earlier code, without a process id), but never one of a writer still running."""
    out = tmp_path / "ds"
    r = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(out)], capture_output=True)
    assert r.returncode == -9
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".ds.tmp-") and left.name.split("-")[1].isdigit()  # the writer's process id
    assert (left / "features.npy").is_file()
    legacy = tmp_path / ".ds.tmp-k2j_x9ab"  # made by a writer before ids were in the names
    running = tmp_path / f".ds.tmp-{os.getpid()}-live"  # this process: running
    legacy.mkdir()
    running.mkdir()
    write_patho(small, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ds", running.name])
    assert ff.is_complete(out)


def _flip_last_byte(path):
    with open(path, "r+b") as fh:
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))


def test_a_full_check_leaves_the_partition_directory_as_it_was(small, tmp_path):
    """A run checks its partition in full before it starts; with every file as recorded the check writes nothing, so
    the directory's mtime (which Snakemake dates a directory() output by when it lacks .snakemake_timestamp, as a
    partition built by `fedrepro run` or the archive's replay does) does not move past the runs built on it. A file
    whose mtime changed is recorded again: the state is rewritten then."""
    _, out = write_patho(small, tmp_path / "ds")
    os.utime(out, ns=(1_000_000_000, 1_000_000_000))
    state = (out / ".verified.json").read_text()
    ff.check(out, verify=True)
    ff.load(out, verify=True)
    assert out.stat().st_mtime_ns == 1_000_000_000 and (out / ".verified.json").read_text() == state
    st = (out / "index.parquet").stat()
    os.utime(out / "index.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same bytes
    ff.check(out, verify=True)
    assert (out / ".verified.json").read_text() != state and out.stat().st_mtime_ns != 1_000_000_000


def test_use_verifies_the_data_files_cheaply(small, tmp_path, monkeypatch):
    """Each load checks the files against the manifest's sha256, hashing only a file whose size or mtime changed
    since it last matched; a partition written without the state (by earlier code) is hashed once and recorded."""
    _, out = write_patho(small, tmp_path / "ds")
    hashed = []
    real = ff.sha256_of
    monkeypatch.setattr(ff, "sha256_of", lambda p: hashed.append(p.name) or real(p))
    ff.load(out)
    ff.check(out)
    assert hashed == []  # recorded by the write: nothing to hash
    (out / ".verified.json").unlink()  # as a partition written before the state existed
    ff.load(out)
    assert sorted(hashed) == ["features.npy", "index.parquet"] and (out / ".verified.json").is_file()
    ff.load(out)
    assert len(hashed) == 2  # recorded on that first use
    _flip_last_byte(out / "index.parquet")
    with pytest.raises(DataError, match=r"index.parquet: checksum mismatch"):
        ff.check(out)
    assert hashed[2:] == ["index.parquet"]  # only the changed file


def test_load_refuses_incomplete_or_corrupt(small, tmp_path):
    _, out = write_patho(small, tmp_path / "ds")
    _flip_last_byte(out / "features.npy")  # same size, different bytes
    with pytest.raises(DataError, match="features.npy: checksum mismatch: changed after the partition was written"):
        ff.load(out)  # same size, but a newer mtime than when it matched: hashed again
    assert ff.is_complete(out)  # sizes only
    with pytest.raises(DataError, match="checksum"):
        ff.load(out, verify=True)
    with open(out / "features.npy", "ab") as fh:
        fh.write(b"x")
    with pytest.raises(DataError, match="wrong size"):
        ff.load(out)
    (out / "manifest.json").unlink()
    with pytest.raises(DataError, match="interrupted"):
        ff.load(out)
    assert not ff.is_complete(out)


def test_write_rejects_mismatched_inputs(small, tmp_path):
    xtr, ytr, xte, yte = small
    p = partition("pathological", ytr, yte, seed=0, n_clients=12, classes_per_client=3)
    with pytest.raises(ValueError, match="differ"):
        ff.write(tmp_path / "x", p, xtr, ytr, xte.astype(np.float32), yte)
    with pytest.raises(ValueError, match="feature rows"):
        ff.write(tmp_path / "x", p, xtr[:-1], ytr, xte, yte)
    assert list(tmp_path.iterdir()) == []


def test_plot_is_written_and_reproducible(small, tmp_path):
    from fedrepro.data import plots

    _, out = write_patho(small, tmp_path / "ds")
    a = plots.plot_dataset(out, tmp_path / "a.png")
    b = plots.plot_dataset(ff.load(out), tmp_path / "b.png")
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and a.read_bytes() == b.read_bytes()
    p = partition("fedhdp_noniid", small[1], small[3], seed=0, n_clients=100)
    c = plots.plot_partition(p, small[1], tmp_path / "c.png", test_labels=small[3])
    assert c.stat().st_size > 1000


def test_modules_are_import_light():
    code = (
        "import sys, fedrepro.data.fedformat, fedrepro.data.plots, fedrepro.data.partition as P; "
        "[P.get_partitioner(s) for s in P.partitioners()]; "
        "bad = [m for m in ('matplotlib', 'pyarrow', 'pandas') if m in sys.modules]; "
        "assert not bad, bad; "
        "from fedrepro.data.catalog import all_datasets; all_datasets()"
    )  # the catalog imports them all
    subprocess.run([sys.executable, "-c", code], check=True)
