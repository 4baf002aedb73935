"""TFF's two releases of federated EMNIST and Stack Overflow (h5 ``.tar.bz2``, pinned; sqlite ``.sqlite.lzma``, what
TFF reads today): the same arrays from both, the sqlite files' content checks, and guarded decompression.

Both releases are written by tests/helpers/tff_fixtures.py from the same small synthetic arrays, in TFF's layouts,
and fetched through the real mirror path (``sources.fetch`` with a temp ``data.mirror`` and a monkeypatched
sha256: the sqlite files have no published hash).
"""

from __future__ import annotations

import lzma
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("h5py")

from tff_fixtures import (  # noqa: E402
    COLS,
    EMNIST_ALL_CLIENTS,
    EMNIST_CLIENTS,
    SO_DATA,
    TFF_SQLITE_SCHEMA,
    emnist_release_arrays,
    emnist_sqlite_rows,
    encode_example,
    pin,
    so_sqlite_rows,
    write_tff_sqlite,
)

from fedrepro.data import catalog, tff_sqlite  # noqa: E402
from fedrepro.data import tff_emnist as em  # noqa: E402
from fedrepro.data import tff_stackoverflow as so  # noqa: E402
from fedrepro.data.prepare import load_arrays  # noqa: E402
from fedrepro.data.sources import dataset_files, fetch  # noqa: E402
from fedrepro.errors import ConfigError, DataError  # noqa: E402


def _fetched(cfg, mirror_root: Path, monkeypatch, ds_id: str) -> list[Path]:
    pin(monkeypatch, ds_id, mirror_root / ds_id)
    fetch(cfg, ds_id, offline=True)
    return dataset_files(cfg, ds_id)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ---------------------------------------------------------------------------------------------------------------
# the same arrays from both releases
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("only_digits, h5_id", [(True, em.DIGITS_ID), (False, em.FULL_ID)])
def test_emnist_h5_and_sqlite_releases_give_identical_arrays(emnist_mirror, monkeypatch, only_digits, h5_id):
    cfg, digits_dir, _ = emnist_mirror
    root = digits_dir.parent
    h5_files = _fetched(cfg, root, monkeypatch, h5_id)
    sql_files = _fetched(cfg, root, monkeypatch, em.SQLITE_ID)
    arrays = emnist_release_arrays()[only_digits]
    writers = EMNIST_CLIENTS if only_digits else EMNIST_ALL_CLIENTS
    h5_train, h5_test = em.load_data(h5_files, only_digits)
    sql_train, sql_test = em.load_data(sql_files, only_digits)
    with h5_train, h5_test, sql_train, sql_test:
        assert isinstance(h5_train, em.EmnistH5) and isinstance(sql_train, em.EmnistSqlite)
        assert sql_train.split_name == ("digits_only_train" if only_digits else "all_train")
        assert sql_train.num_classes == h5_train.num_classes == (10 if only_digits else 62)
        for split, h5, sql in (("train", h5_train, sql_train), ("test", h5_test, sql_test)):
            assert sql.client_ids == h5.client_ids == sorted(writers)
            for cid in sql.client_ids:
                a, b = h5.client(cid), sql.client(cid)
                assert (a.pixels.dtype, a.labels.dtype) == (b.pixels.dtype, b.labels.dtype) == (np.float32, np.int32)
                assert a.pixels.shape == b.pixels.shape == (writers[cid][split == "test"], 28, 28)
                np.testing.assert_array_equal(a.pixels, b.pixels)
                np.testing.assert_array_equal(a.labels, b.labels)
                np.testing.assert_array_equal(b.pixels, arrays[cid][split][0])  # and what was written
                np.testing.assert_array_equal(b.labels, arrays[cid][split][1])
                assert h5.num_examples(cid) == sql.num_examples(cid) == len(b)
            assert em.compare_releases(h5, sql) == {
                "equal": sorted(writers),
                "reordered": [],
                "different": [],
                "only_in_a": [],
                "only_in_b": [],
            }
        # PPSGD's client arrays are the same too
        for x, y in zip(em.first_clients(h5_train, h5_test, 2), em.first_clients(sql_train, sql_test, 2)):
            assert x.client_id == y.client_id
            for f in ("x_train", "y_train", "x_test", "y_test"):
                np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
                assert getattr(x, f).dtype == getattr(y, f).dtype
    # the partition loader: same arrays, labels, writer groups and class count
    a = load_arrays(h5_id, h5_files)
    b = load_arrays(em.SQLITE_ID, sql_files, {"only_digits": only_digits})
    assert a.n_classes == b.n_classes
    for xa, xb in ((a.train_x, b.train_x), (a.test_x, b.test_x)):
        assert xa.dtype == xb.dtype and xa.shape == xb.shape
        np.testing.assert_array_equal(xa, xb)
    for la, lb in ((a.train, b.train), (a.test, b.test)):
        np.testing.assert_array_equal(la.labels, lb.labels)
        np.testing.assert_array_equal(la.groups, lb.groups)


def test_stackoverflow_h5_and_sqlite_releases_give_identical_clients(so_mirror, monkeypatch):
    cfg, mirror = so_mirror
    for ds_id in (so.H5_ID, so.SQLITE_ID):
        pin(monkeypatch, ds_id, mirror)
        fetch(cfg, ds_id, offline=True)
    h5s = so.load_data(dataset_files(cfg, so.H5_ID))
    sqls = so.load_data(dataset_files(cfg, so.SQLITE_ID))
    try:
        for split, h5, sql in zip(("train", "held_out", "test"), h5s, sqls):
            assert isinstance(h5, so.StackOverflowH5) and isinstance(sql, so.StackOverflowSqlite)
            assert h5.client_ids == sql.client_ids == sorted(SO_DATA[split])
            for cid in sql.client_ids:
                a, b = h5.client(cid), sql.client(cid)
                for f in ("tokens", "title", "tags", "type", "creation_date"):
                    assert getattr(a, f) == getattr(b, f), (split, cid, f)
                assert a.score.dtype == b.score.dtype == np.int64
                np.testing.assert_array_equal(a.score, b.score)
                assert b.tokens == [r[COLS.index("tokens")] for r in SO_DATA[split][cid]]
                assert h5.client(cid, limit=1) == sql.client(cid, limit=1)
    finally:
        for o in (*h5s, *sqls):
            o.close()


def test_sqlite_order_is_rowid_order_with_or_without_tffs_indexes(tmp_path):
    """TFF's query has no ORDER BY; SQLite returns a client's rows in rowid order by a scan and through the index
    on (split_name, client_id): the reader's ORDER BY rowid is that order, and the rows are interleaved on disk."""
    rows = emnist_sqlite_rows(emnist_release_arrays())
    with_idx = write_tff_sqlite(tmp_path / "a.sqlite", rows)
    without = write_tff_sqlite(tmp_path / "b.sqlite", rows, schema=[q for q in TFF_SQLITE_SCHEMA if "INDEX" not in q])
    for path in (with_idx, without):
        con = sqlite3.connect(path)
        for cid in EMNIST_CLIENTS:
            # what TFF's SqlClientData query returns, in the order SQLite returns it
            tff = [
                r[0]
                for r in con.execute(
                    "SELECT serialized_example_proto FROM examples WHERE client_id = '"
                    + cid
                    + "' and split_name ='all_train'"
                )
            ]
            with em.EmnistSqlite(path, "all_train") as s:
                assert s.records(cid) == tff
            rowids = [r[0] for r in con.execute("SELECT rowid FROM examples WHERE client_id = ?", (cid,))]
            assert rowids != list(range(rowids[0], rowids[0] + len(rowids)))  # not contiguous: interleaved
        con.close()


def test_compare_releases_tells_reordered_from_different(tmp_path):
    arrays = emnist_release_arrays()
    rows = emnist_sqlite_rows(arrays)
    a = write_tff_sqlite(tmp_path / "a.sqlite", rows)
    cid_r, cid_d = sorted(EMNIST_CLIENTS)[:2]
    rows["digits_only_train"][cid_r] = rows["digits_only_train"][cid_r][::-1]
    changed = dict(rows["digits_only_train"][cid_d][0])
    changed["pixels"] = changed["pixels"].copy()
    changed["pixels"][14, 14] = 0.25
    rows["digits_only_train"][cid_d] = [changed] + rows["digits_only_train"][cid_d][1:]
    rows["digits_only_train"]["zz_new"] = rows["digits_only_train"][cid_d]
    b = write_tff_sqlite(tmp_path / "b.sqlite", rows)
    with em.EmnistSqlite(a, "digits_only_train") as x, em.EmnistSqlite(b, "digits_only_train") as y:
        got = em.compare_releases(x, y)
    assert got == {
        "equal": sorted(set(EMNIST_CLIENTS) - {cid_r, cid_d}),
        "reordered": [cid_r],
        "different": [cid_d],
        "only_in_a": [],
        "only_in_b": ["zz_new"],
    }


# ---------------------------------------------------------------------------------------------------------------
# choosing the release, and what a missing choice or file says
# ---------------------------------------------------------------------------------------------------------------


def test_emnist_sqlite_needs_only_digits_and_h5_must_agree(emnist_mirror, monkeypatch):
    cfg, digits_dir, _ = emnist_mirror
    sql_files = _fetched(cfg, digits_dir.parent, monkeypatch, em.SQLITE_ID)
    h5_files = _fetched(cfg, digits_dir.parent, monkeypatch, em.DIGITS_ID)
    with pytest.raises(DataError, match="holds both label sets") as err:
        em.open_split(sql_files, "train")
    _one_line(err)
    with pytest.raises(ConfigError, match="only_digits: true"):
        load_arrays(em.SQLITE_ID, sql_files)
    with pytest.raises(ConfigError, match="true or false"):
        load_arrays(em.SQLITE_ID, sql_files, {"only_digits": "yes"})
    with pytest.raises(ConfigError, match="takes no option only_digits"):
        load_arrays("mnist", [], {"only_digits": True})
    with pytest.raises(DataError, match="is digits only, but only_digits=False"):
        em.open_split(h5_files, "train", only_digits=False)
    with em.open_split(h5_files, "test", only_digits=True) as t:
        assert t.num_classes == 10


def test_missing_release_files_name_the_fetch_command(tmp_path):
    with pytest.raises(DataError) as err:
        so.open_split([tmp_path / "other.txt"], "train")
    assert "python -m fedrepro data fetch tff_stackoverflow_sqlite" in _one_line(err)
    with pytest.raises(DataError) as err:
        em.open_split([], "train")
    assert "python -m fedrepro data fetch tff_emnist_sqlite" in _one_line(err)
    with pytest.raises(DataError) as err:
        em.open_split([tmp_path / em.SQLITE_ARCHIVE], "train", only_digits=True)
    msg = _one_line(err)
    assert str(tmp_path / em.SQLITE_ARCHIVE) in msg and "python -m fedrepro data fetch tff_emnist_sqlite" in msg
    (tmp_path / "fed_emnist_train.h5").write_bytes(b"")
    with pytest.raises(DataError) as err:
        em.open_split([tmp_path / "fed_emnist_train.h5"], "test")
    assert "fed_emnist_test.h5" in _one_line(err) and "python -m fedrepro data fetch tff_emnist" in str(err.value)


def test_sqlite_is_opened_read_only_even_under_an_odd_path(tmp_path):
    folder = tmp_path / "a dir?with#odd%chars"
    folder.mkdir()
    db = write_tff_sqlite(folder / "so.sqlite", so_sqlite_rows())
    before = db.read_bytes()
    with so.StackOverflowSqlite(db, "test") as s:
        assert s.client_ids == sorted(SO_DATA["test"])
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            s._con.execute("DELETE FROM examples")
    assert db.read_bytes() == before


# ---------------------------------------------------------------------------------------------------------------
# content checks
# ---------------------------------------------------------------------------------------------------------------


def _emnist_fixture_sizes(monkeypatch) -> None:
    """TFF's stated sizes replaced by the fixture's (3 digit writers; 4 writers with 62 classes)."""

    def size(clients):
        return (len(clients), sum(n for n, _ in clients.values()), sum(n for _, n in clients.values()))

    monkeypatch.setattr(
        em, "UPSTREAM_SIZES", {em.DIGITS_ID: size(EMNIST_CLIENTS), em.FULL_ID: size(EMNIST_ALL_CLIENTS)}
    )


def _so_fixture_sizes(monkeypatch) -> None:
    monkeypatch.setattr(
        so,
        "UPSTREAM_SIZES",
        {s: (len(clients), sum(len(r) for r in clients.values())) for s, clients in SO_DATA.items()},
    )


def test_catalog_sqlite_entries_are_checked_by_content():
    ds = catalog.all_datasets()
    for ds_id, name, check in (
        (em.SQLITE_ID, "emnist_all.sqlite.lzma", em.check_sqlite_release),
        (so.SQLITE_ID, "stackoverflow.sqlite.lzma", so.check_sqlite_release),
    ):
        (f,) = ds[ds_id].files
        assert (f.name, f.sha256, f.content_check) == (name, None, check)
        assert f.url == "https://storage.googleapis.com/tff-datasets-public/" + name
    for ds_id in (em.DIGITS_ID, em.FULL_ID, so.H5_ID, so.COUNTS_ID):  # pinned by TFF's own hashes
        assert all(f.sha256 and f.content_check is None for f in ds[ds_id].files)
    # TFF's numbers (emnist.py / stackoverflow.py load_data docstrings; client counts as their *_test.py assert)
    assert em.sqlite_expected() == {
        "digits_only_train": (3383, 341_873),
        "digits_only_test": (3383, 40_832),
        "all_train": (3400, 671_585),
        "all_test": (3400, 77_483),
    }
    assert so.UPSTREAM_SIZES == {
        "train": (342_477, 135_818_730),
        "held_out": (38_758, 16_491_230),
        "test": (204_088, 16_586_035),
    }


def test_emnist_content_check_passes_on_the_release_and_fails_on_tffs_numbers(emnist_mirror, monkeypatch):
    cfg, digits_dir, _ = emnist_mirror
    (lz,) = _fetched(cfg, digits_dir.parent, monkeypatch, em.SQLITE_ID)
    check = (
        em.check_sqlite_release
    )  # the catalog's (test_catalog_sqlite_entries_are_checked_by_content); pin() drops it
    with pytest.raises(DataError) as err:  # the fixture is not TFF's file: 3 writers, not 3,383
        check(lz)
    msg = _one_line(err)
    for part in (
        str(lz),
        "split 'digits_only_train': 3 clients, expected 3,383",
        "'all_test': 4 clients, expected 3,400",
        "emnist.py, load_data docstring",
        "python -m fedrepro data fetch tff_emnist_sqlite",
    ):
        assert part in msg
    _emnist_fixture_sizes(monkeypatch)
    check(lz)  # decompresses beside the file once; the reader reuses it
    db = lz.parent / em.SQLITE_FILE
    stamp = db.stat().st_mtime_ns
    check(db)  # the decompressed file is accepted as well
    with em.open_split([lz], "train", only_digits=False) as t:
        assert len(t) == len(EMNIST_ALL_CLIENTS)
    assert db.stat().st_mtime_ns == stamp
    assert not list(lz.parent.glob("*.part"))


def test_so_content_check_passes_on_the_release_and_fails_on_tffs_numbers(so_mirror, monkeypatch):
    cfg, mirror = so_mirror
    pin(monkeypatch, so.SQLITE_ID, mirror)
    fetch(cfg, so.SQLITE_ID, offline=True)
    (lz,) = dataset_files(cfg, so.SQLITE_ID)
    check = so.check_sqlite_release
    with pytest.raises(DataError) as err:
        check(lz)
    msg = _one_line(err)
    for part in (
        str(lz),
        "split 'train': 2 clients, expected 342,477",
        "'heldout': 1 examples in client_metadata, expected 16,491,230",
        "stackoverflow.py, load_data docstring",
    ):
        assert part in msg
    _so_fixture_sizes(monkeypatch)
    check(lz)


def _db(tmp_path: Path, kind: str) -> Path:
    """An EMNIST or Stack Overflow sqlite fixture, ``kind`` '<emnist|so>'."""
    if kind == "emnist":
        return write_tff_sqlite(tmp_path / em.SQLITE_FILE, emnist_sqlite_rows(emnist_release_arrays()))
    return write_tff_sqlite(tmp_path / so.SQLITE_FILE, so_sqlite_rows())


# the example the content check decodes: the first (by rowid) of the split's first client (sorted)
_FIRST_EXAMPLE_OF_FIRST_CLIENT = (
    "UPDATE examples SET serialized_example_proto = ? WHERE rowid = (SELECT MIN(rowid) FROM examples WHERE "
    "split_name = ? AND client_id = (SELECT MIN(client_id) FROM client_metadata WHERE split_name = ?))"
)


@pytest.mark.parametrize("kind", ["emnist", "so"])
@pytest.mark.parametrize(
    "fault, match",
    [
        ("metadata_count", "examples in client_metadata, expected"),
        ("missing_row", "rows in examples, expected"),
        ("extra_client", "clients, expected"),
        ("missing_split", "absent"),
        ("no_metadata_table", "missing table\\(s\\) client_metadata"),
        ("no_examples_column", "table examples lacks column\\(s\\) serialized_example_proto"),
        ("no_num_examples_column", "table client_metadata lacks column\\(s\\) num_examples"),
        ("bad_first_example", "first example is not the release's tf.train.Example"),
        ("not_sqlite", "cannot (open|read) as sqlite"),
    ],
)
def test_content_check_failures(tmp_path, monkeypatch, kind, fault, match):
    (_emnist_fixture_sizes if kind == "emnist" else _so_fixture_sizes)(monkeypatch)
    check = em.check_sqlite_release if kind == "emnist" else so.check_sqlite_release
    db = _db(tmp_path, kind)
    check(db)  # the intact fixture passes
    split = "digits_only_test" if kind == "emnist" else "test"
    con = sqlite3.connect(db)
    if fault == "metadata_count":
        con.execute(
            "UPDATE client_metadata SET num_examples = num_examples + 1 WHERE rowid = "
            "(SELECT MIN(rowid) FROM client_metadata WHERE split_name = ?)",
            (split,),
        )
    elif fault == "missing_row":
        con.execute(
            "DELETE FROM examples WHERE rowid = (SELECT MAX(rowid) FROM examples WHERE split_name = ?)", (split,)
        )
    elif fault == "extra_client":
        con.execute("INSERT INTO client_metadata VALUES ('zz', ?, 0)", (split,))
    elif fault == "missing_split":
        con.execute("DELETE FROM client_metadata WHERE split_name = ?", (split,))
        con.execute("DELETE FROM examples WHERE split_name = ?", (split,))
    elif fault == "no_metadata_table":
        con.execute("DROP TABLE client_metadata")
    elif fault == "no_examples_column":
        con.execute("ALTER TABLE examples RENAME COLUMN serialized_example_proto TO proto")
    elif fault == "no_num_examples_column":
        con.execute("ALTER TABLE client_metadata RENAME COLUMN num_examples TO n")
    elif fault == "bad_first_example":
        bad = encode_example({"label": 3}) if kind == "emnist" else encode_example({"tokens": b"x"})
        con.execute(_FIRST_EXAMPLE_OF_FIRST_CLIENT, (bad, split, split))
    con.commit()
    con.close()
    if fault == "not_sqlite":
        db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(DataError, match=match) as err:
        check(db)
    assert str(db) in _one_line(err)


def test_emnist_content_check_refuses_pixels_outside_tffs_parse_spec(tmp_path, monkeypatch):
    _emnist_fixture_sizes(monkeypatch)
    db = _db(tmp_path, "emnist")
    con = sqlite3.connect(db)
    short = encode_example({"label": 3, "pixels": np.ones(783, np.float32)})
    con.execute(_FIRST_EXAMPLE_OF_FIRST_CLIENT, (short, "all_train", "all_train"))
    con.commit()
    con.close()
    with pytest.raises(DataError, match="'pixels': expected a float_list of 784 values, got 783 values"):
        em.check_sqlite_release(db)
    with em.EmnistSqlite(db, "all_train") as s:  # the reader refuses it too, naming the client
        bad = next(c for c in s.client_ids if s.records(c)[0] == short)
        with pytest.raises(DataError, match=f"client '{bad}': bad tf.train.Example"):
            s.client(bad)


# ---------------------------------------------------------------------------------------------------------------
# decompression
# ---------------------------------------------------------------------------------------------------------------

PAYLOAD = b"SQLite format 3\x00" + bytes(range(256)) * 4000


def _lz(tmp_path: Path, data: bytes = PAYLOAD, fmt=lzma.FORMAT_ALONE, name="x.sqlite.lzma") -> Path:
    p = tmp_path / name
    p.write_bytes(lzma.compress(data, format=fmt))
    return p


def _decompress(src: Path, **kw) -> Path:
    return tff_sqlite.decompress(src, "x.sqlite", dataset_id="tff_x", max_bytes=kw.pop("max_bytes", 1 << 30), **kw)


@pytest.mark.parametrize("fmt", [lzma.FORMAT_ALONE, lzma.FORMAT_XZ])
def test_decompress_once_atomically(tmp_path, fmt):
    src = _lz(tmp_path, fmt=fmt)
    out = _decompress(src)
    assert out == tmp_path / "x.sqlite" and out.read_bytes() == PAYLOAD
    stamp = out.stat().st_mtime_ns
    assert _decompress(src).stat().st_mtime_ns == stamp  # up to date: not decompressed again
    src.write_bytes(lzma.compress(PAYLOAD[:-10], format=fmt))  # a new download
    assert _decompress(src).read_bytes() == PAYLOAD[:-10]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".decompressed-x.sqlite",
        ".decompressed-x.sqlite.lock",
        "x.sqlite",
        "x.sqlite.lzma",
    ]


def test_concurrent_decompressions_take_turns(tmp_path, monkeypatch):
    """Two partitions of one file built at once: one decompresses, the other waits and finds it done."""
    src = _lz(tmp_path, data=PAYLOAD * 20)
    calls = []
    real = tff_sqlite._decompress
    monkeypatch.setattr(tff_sqlite, "_decompress", lambda *a: (calls.append(1), real(*a)))
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: _decompress(src).read_bytes(), range(4)))
    assert outs == [PAYLOAD * 20] * 4 and calls == [1]


@pytest.mark.parametrize(
    "fault, match",
    [
        ("truncated", "ends before its end-of-stream marker .*a cut download"),
        ("corrupt", "corrupt lzma data"),
        ("trailing", "bytes after the end of its lzma stream"),
        ("too_big", "decompresses to more than 1,000 bytes"),
        ("disk_full", "would leave less than .* bytes free"),
        ("not_lzma", "corrupt lzma data"),
    ],
)
def test_decompress_refuses_a_bad_file_in_one_line_naming_it(tmp_path, fault, match):
    src = _lz(tmp_path)
    data = src.read_bytes()
    kw = {}
    if fault == "truncated":
        src.write_bytes(data[: len(data) // 2])
    elif fault == "corrupt":
        b = bytearray(data)
        b[len(b) // 2] ^= 0xFF
        src.write_bytes(bytes(b))
    elif fault == "trailing":
        src.write_bytes(data + b"<html>")
    elif fault == "too_big":
        kw["max_bytes"] = 1000
    elif fault == "disk_full":
        kw["min_free_bytes"] = 1 << 62
    elif fault == "not_lzma":
        src.write_bytes(b"<html><body>Google Drive can't scan this file</body></html>")
    with pytest.raises(DataError, match=match) as err:
        _decompress(src, **kw)
    msg = _one_line(err)
    assert msg.startswith(f"{src}: ")
    if fault != "disk_full":
        assert "delete it and fetch it again (`python -m fedrepro data fetch tff_x`)" in msg
    # no output, no .part, no marker
    assert sorted(p.name for p in tmp_path.iterdir()) == [".decompressed-x.sqlite.lock", "x.sqlite.lzma"]


def test_truncated_release_through_the_loaders_is_one_line(so_mirror, monkeypatch):
    cfg, mirror = so_mirror
    lz = mirror / so.SQLITE_ARCHIVE
    lz.write_bytes(lz.read_bytes()[:-200])
    pin(monkeypatch, so.SQLITE_ID, mirror)  # pinned to the cut file: only the stream shows the cut
    fetch(cfg, so.SQLITE_ID, offline=True)
    files = dataset_files(cfg, so.SQLITE_ID)
    for call in (lambda: so.open_split(files, "train"), lambda: so.check_sqlite_release(files[0])):
        with pytest.raises(DataError, match="end-of-stream marker") as err:
            call()
        assert str(files[0]) in _one_line(err) and "tff_stackoverflow_sqlite" in str(err.value)


def test_decompress_replaces_a_planted_link_never_writing_through_it(tmp_path):
    src = _lz(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    (tmp_path / "x.sqlite.part").symlink_to(outside)
    (tmp_path / "x.sqlite").symlink_to(outside)
    out = _decompress(src)
    assert not out.is_symlink() and out.read_bytes() == PAYLOAD and outside.read_bytes() == b"keep"


def test_emnist_fixture_arrays_are_what_the_sqlite_release_holds(tmp_path):
    """The fixture's sqlite rows decode back to the arrays they were written from (the encoder is independent)."""
    arrays = emnist_release_arrays()
    db = write_tff_sqlite(tmp_path / "e.sqlite", emnist_sqlite_rows(arrays))
    with em.EmnistSqlite(db, "all_test", num_classes=62) as s:
        for cid in s.client_ids:
            c = s.client(cid)
            np.testing.assert_array_equal(c.pixels, arrays[False][cid]["test"][0])
            np.testing.assert_array_equal(c.labels, arrays[False][cid]["test"][1])
