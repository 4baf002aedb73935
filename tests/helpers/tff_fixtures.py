"""Fixtures in the exact upstream formats of TFF federated EMNIST and Stack Overflow (h5 / sqlite with serialized
tf.train.Example protos, wrapped in tar.bz2 / lzma as published), and a mirror config to fetch them through.

The data are small synthetic arrays (random pixels, made-up posts), test-only; each dataset is written in both
releases from the same arrays, so the two readers can be compared. Written with h5py / sqlite3 from the layouts in
TFF's hdf5_client_data.py and sql_client_data.py (the tables exactly as sql_client_data_utils.py creates them, the
indexes as sql_client_data_test.py builds them); shared by the data-layer tests (tests/data/test_tff*.py,
test_tf_example.py), PPSGD's featurisation tests and the end-to-end experiment tests on these formats. The
tf.train.Example encoder below is written from the protobuf encoding spec, independently of the reader it tests
(fedrepro.data.tf_example, the protobuf runtime).
"""

from __future__ import annotations

import io
import json
import lzma
import sqlite3
import tarfile
from pathlib import Path

import h5py
import numpy as np
from catalog_pins import data_cfg as mirror_cfg
from catalog_pins import pin  # noqa: F401  (the TFF tests import it from here)

from fedrepro.data import tff_emnist as em
from fedrepro.data import tff_stackoverflow as so

# ---------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------


def tar_bz2(path: Path, members: dict[str, Path | bytes]) -> Path:
    with tarfile.open(path, "w:bz2") as tar:
        for name, src in members.items():
            if isinstance(src, Path):
                tar.add(src, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(src)
                tar.addfile(info, io.BytesIO(src))
    return path


# --- TFF federated EMNIST fixture ---------------------------------------------------------------------------------

EMNIST_CLIENTS = {"f0007_12": (4, 2), "f0002_45": (3, 1), "f3100_30": (5, 2)}  # id -> (n_train, n_test)
# the 62-class release: one writer more (in TFF's, 3,400 writers against the digits' 3,383)
EMNIST_ALL_CLIENTS = {**EMNIST_CLIENTS, "f0150_08": (2, 1)}


def _emnist_arrays(seed: int, n_classes: int = 10, clients: dict | None = None):
    rng = np.random.default_rng(seed)
    out = {}
    for cid, (ntr, nte) in (clients or EMNIST_CLIENTS).items():
        split = {}
        for s, n in (("train", ntr), ("test", nte)):
            pix = np.ones((n, 28, 28), dtype=np.float32)  # 1.0 = background, as TFF ships it
            pix[:, 8:20, 10:18] = rng.random((n, 12, 8), dtype=np.float32)
            split[s] = (pix, rng.integers(0, n_classes, size=n).astype(np.int32))
        out[cid] = split
    return out


def _write_emnist_h5(path: Path, arrays, split: str) -> Path:
    with h5py.File(path, "w") as f:
        ex = f.create_group("examples")
        for cid, splits in arrays.items():
            g = ex.create_group(cid)
            pix, lab = splits[split]
            g.create_dataset("pixels", data=pix)  # float32 (n, 28, 28)
            g.create_dataset("label", data=lab)  # int32 (n,)
    return path


def emnist_release_arrays() -> dict[bool, dict]:
    """{only_digits: {client: {split: (pixels, labels)}}}: the synthetic arrays both EMNIST releases are written
    from (digits: 3 writers, labels 0-9; all: 4 writers, labels 0-61)."""
    return {True: _emnist_arrays(0), False: _emnist_arrays(1, 62, EMNIST_ALL_CLIENTS)}


def emnist_sqlite_rows(arrays: dict[bool, dict]) -> dict[str, dict[str, list[dict]]]:
    """{split_name: {client: [tf.train.Example features]}} of emnist_all.sqlite, as TFF's serializer writes them
    (sql_client_data_utils._float_feature / _int64_feature: pixels flattened to 784 floats, label an int64)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for (only_digits, split), name in em.SQL_SPLIT.items():
        out[name] = {
            cid: [{"label": int(lab), "pixels": pix} for pix, lab in zip(*splits[split])]
            for cid, splits in arrays[only_digits].items()
        }
    return out


def make_emnist_mirror(tmp_path):
    """A mirror with both EMNIST releases written from :func:`emnist_release_arrays`: ``tff_emnist_digits/``
    (digits h5 archive), ``tff_emnist/`` (62-class h5 archive) and ``tff_emnist_sqlite/`` (emnist_all.sqlite.lzma).
    Returns (config, the digits h5 directory, the digits arrays)."""
    arrays = emnist_release_arrays()
    src = tmp_path / "src"
    src.mkdir()
    mirror = tmp_path / "mirror"
    for ds_id, only_digits in ((em.DIGITS_ID, True), (em.FULL_ID, False)):
        prefix = em.PREFIX[ds_id]
        h5s = {s: _write_emnist_h5(src / f"{prefix}_{s}.h5", arrays[only_digits], s) for s in ("train", "test")}
        (mirror / ds_id).mkdir(parents=True)
        tar_bz2(
            mirror / ds_id / f"{prefix}.tar.bz2",
            {f"{prefix}_train.h5": h5s["train"], f"./{prefix}_test.h5": h5s["test"]},
        )
    (mirror / em.SQLITE_ID).mkdir()
    db = write_tff_sqlite(src / em.SQLITE_FILE, emnist_sqlite_rows(arrays))
    (mirror / em.SQLITE_ID / em.SQLITE_ARCHIVE).write_bytes(lzma.compress(db.read_bytes(), format=lzma.FORMAT_XZ))
    return mirror_cfg(tmp_path, mirror), mirror / em.DIGITS_ID, arrays[True]


# client -> list of (tokens, title, tags, type, creation_date, score); split by file
SO_DATA = {
    "train": {
        "00000017": [
            ("the list to the python .", "python list", "python|java|sql", "question", "2010-01-08 09:34:05 UTC", 3),
            ("  to\tto  ", "", "c++", "answer", "2011-02-01 10:00:00.1 UTC", -1),
            ("", "", "", "answer", "2012-03-04 05:06:07 UTC", 0),
            ("java", "Python", "java|java", "question", "2013-01-01 00:00:00 UTC", 12),
            ("to the", "t", "sql", "answer", "2014-01-01 00:00:00 UTC", 1),
        ],
        "00000003": [
            ("python python", "x", "java", "question", "2015-01-01 00:00:00 UTC", 5),
            ("é to", "ü", "python", "answer", "2016-01-01 00:00:00 UTC", 7),
        ],
    },
    "held_out": {"00000010": [("the", "the", "sql", "question", "2009-01-01 00:00:00 UTC", 2)]},
    "test": {
        "00000017": [("python to", "", "python", "answer", "2018-02-01 00:00:00 UTC", 0)],
        "00000003": [("the the", "list", "java|python", "question", "2018-03-01 00:00:00 UTC", 4)],
        "00000099": [("to", "to", "sql", "answer", "2018-04-01 00:00:00 UTC", 1)],
    },
}
COLS = ("tokens", "title", "tags", "type", "creation_date", "score")
WORD_COUNT = "the 10\npython 8\nto 7\nlist 5\n. 4\n"
TAG_COUNT = {"java": 3, "python": 5, "c++": 3, "sql": 1}


def _write_so_h5(path: Path, clients: dict, fixed_length: bool = False) -> Path:
    with h5py.File(path, "w") as f:
        ex = f.create_group("examples")
        for cid, rows in clients.items():
            g = ex.create_group(cid)
            for j, col in enumerate(COLS):
                vals = [r[j] for r in rows]
                if col == "score":
                    g.create_dataset(col, data=np.asarray(vals, dtype=np.int64))
                elif fixed_length:
                    g.create_dataset(col, data=np.array([v.encode() for v in vals], dtype="S"))
                else:
                    g.create_dataset(col, data=[v.encode() for v in vals], dtype=h5py.string_dtype("utf-8"))
    return path


# --- an independent tf.train.Example encoder (protobuf wire format) ------------------------------------------------


def _pb_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_ld(field: int, payload: bytes) -> bytes:
    return _pb_varint(field << 3 | 2) + _pb_varint(len(payload)) + payload


def encode_example(features: dict) -> bytes:
    """int -> Int64List (packed), numpy float array -> FloatList (packed little-endian float32, flattened), bytes
    -> BytesList."""
    entries = b""
    for key, v in features.items():
        if isinstance(v, (int, np.integer)):
            feat = _pb_ld(3, _pb_ld(1, _pb_varint(int(v))))  # Int64List, packed
        elif isinstance(v, np.ndarray):
            feat = _pb_ld(2, _pb_ld(1, np.ascontiguousarray(v, dtype="<f4").tobytes()))  # FloatList, packed
        else:
            feat = _pb_ld(1, _pb_ld(1, v))  # BytesList
        entries += _pb_ld(1, _pb_ld(1, key.encode()) + _pb_ld(2, feat))
    return _pb_ld(1, entries)


# TFF sql_client_data_utils.py, save_to_sql_client_data: the two tables exactly; sql_client_data_test.py: the indexes
TFF_SQLITE_SCHEMA = (
    """CREATE TABLE examples (
           split_name TEXT NOT NULL,
           client_id TEXT NOT NULL,
           serialized_example_proto BLOB NOT NULL);""",
    """CREATE INDEX idx_client_id_split
           ON examples (split_name, client_id);""",
    """CREATE TABLE client_metadata (
           client_id TEXT NOT NULL,
           split_name TEXT NOT NULL,
           num_examples INTEGER NOT NULL);""",
    """CREATE INDEX idx_metadata_client_id
           ON client_metadata (client_id);""",
)


def write_tff_sqlite(path: Path, splits: dict[str, dict[str, list[dict]]], schema=TFF_SQLITE_SCHEMA) -> Path:
    """A TFF sqlite release: {split_name: {client: [features]}}. Clients go in reverse order (the reader sorts)
    and the examples of a split's clients are interleaved row by row, so a client's rowids are not contiguous and
    only their order (TFF's) keeps each client's examples in order."""
    con = sqlite3.connect(path)
    for q in schema:
        con.execute(q)
    for split, clients in splits.items():
        items = list(reversed(list(clients.items())))
        for cid, rows in items:
            con.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (cid, split, len(rows)))
        for j in range(max((len(rows) for _, rows in items), default=0)):
            for cid, rows in items:
                if j < len(rows):
                    con.execute("INSERT INTO examples VALUES (?, ?, ?)", (split, cid, encode_example(rows[j])))
    con.commit()
    con.close()
    return path


def so_sqlite_rows() -> dict[str, dict[str, list[dict]]]:
    return {
        so.SQL_SPLIT[split]: {
            cid: [{c: (v if c == "score" else v.encode()) for c, v in zip(COLS, r)} for r in rows]
            for cid, rows in clients.items()
        }
        for split, clients in SO_DATA.items()
    }


def _write_so_sqlite(path: Path) -> Path:
    return write_tff_sqlite(path, so_sqlite_rows())


def make_so_mirror(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    tar_bz2(mirror / so.ARCHIVE, {so.H5_MEMBERS[s]: _write_so_h5(src / so.H5_MEMBERS[s], SO_DATA[s]) for s in SO_DATA})
    tar_bz2(mirror / so.WORD_COUNT_ARCHIVE, {so.WORD_COUNT_FILE: WORD_COUNT.encode()})
    tar_bz2(mirror / so.TAG_COUNT_ARCHIVE, {so.TAG_COUNT_FILE: json.dumps(TAG_COUNT).encode()})
    (mirror / so.SQLITE_ARCHIVE).write_bytes(
        lzma.compress(_write_so_sqlite(src / "so.sqlite").read_bytes(), format=lzma.FORMAT_ALONE)
    )
    return mirror_cfg(tmp_path, mirror), mirror
