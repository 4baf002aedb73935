"""TFF federated EMNIST (writer-partitioned EMNIST from LEAF, as shipped by TensorFlow Federated), without TF.

Two releases of the same data. TFF reads the sqlite one since Feb 2021 (TFF commit 7bb20162f, "Remove
dependencies on HDF5ClientData"); the h5 archives it read before, pinned here by TFF's own hashes, are the
alternative. A partition chooses one by its ``dataset`` (config/partitions.yaml).

Catalog ids, sqlite release (TFF tensorflow_federated/python/simulation/datasets/emnist.py, ``load_data``):
  * ``tff_emnist_sqlite``: ``emnist_all.sqlite.lzma`` -> ``emnist_all.sqlite``, one file holding both label sets
    as four splits: ``digits_only_train`` / ``digits_only_test`` (``only_digits=True``) and ``all_train`` /
    ``all_test`` (``only_digits=False``). Rows are ``tf.train.Example`` protos parsed by TFF with
    ``pixels: FixedLenFeature((28, 28), float32)`` and ``label: FixedLenFeature((), int64)``, cast to int32.
    TFF passes no hash (``download.get_compressed_file``) and none is published: the file is checked by content
    (:func:`check_sqlite_release`: TFF's schema, the writers and examples listed below for each split, the first
    example of each split decodes).

Catalog ids, h5 release (TFF's emnist.py before that commit):
  * ``tff_emnist_digits``: ``fed_emnist_digitsonly.tar.bz2`` -> ``fed_emnist_digitsonly_train.h5`` /
    ``fed_emnist_digitsonly_test.h5``: 3,383 writers, labels 0-9, 341,873 train / 40,832 test examples
    (``tff.simulation.datasets.emnist.load_data(only_digits=True)``; PPSGD Sec. 6, FedHDP "FMNIST" Table 4).
  * ``tff_emnist``: ``fed_emnist.tar.bz2`` -> ``fed_emnist_train.h5`` / ``fed_emnist_test.h5``: 3,400 writers,
    62 labels (0-9 digits, 10-35 upper case, 36-61 lower case), 671,585 train / 77,483 test (FedHDP FEMNIST).

Sizes: TFF's ``emnist.load_data`` docstring (unchanged by the move to sqlite); the client counts are also what
TFF's ``emnist_test.py`` (``test_load_from_gcs``) asserts of the sqlite release.

h5 format (TFF ``emnist.py`` docstring and ``hdf5_client_data.py``): group ``examples/<writer id>/`` with datasets
``pixels`` (float32, N x 28 x 28, values in [0, 1], **1.0 = background, 0.0 = ink**: the inverse of MNIST's
convention; kept as shipped, see :func:`invert`) and ``label`` (int32, N). Every writer is in both files (each
writer's examples were split into train and test). Clients are listed sorted, as TFF lists them.

Both readers (:class:`EmnistH5`, :class:`EmnistSqlite`) return the same :class:`EmnistClient` arrays: pixels float32
(n, 28, 28), labels int32 (n,), clients sorted, a client's examples in stored order (h5: dataset order; sqlite:
rowid order, the order TFF's query returns them, see :mod:`fedrepro.data.tff_sqlite`). That the two published
releases store each writer's examples in the same order has not been checked here (no network);
:func:`compare_releases` reports it on a machine with both.

Checksums: the h5 archives' sha256 values below are the ``file_hash=..., hash_algorithm='sha256'`` that TFF's
``tensorflow_federated/python/simulation/datasets/emnist.py`` (before the move to sqlite) passes to
``tf.keras.utils.get_file`` for these archives; the same values appear in third-party loaders of the same URLs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.data import tff_sqlite
from fedrepro.data.archive import extract_members
from fedrepro.data.catalog import Dataset, RemoteFile, register
from fedrepro.data.tf_example import TfExampleError, parse_tf_example
from fedrepro.data.tff_h5 import TffH5
from fedrepro.errors import DataError

BASE_URL = "https://storage.googleapis.com/tff-datasets-public/"
DIGITS_ID = "tff_emnist_digits"
FULL_ID = "tff_emnist"
PREFIX = {DIGITS_ID: "fed_emnist_digitsonly", FULL_ID: "fed_emnist"}
NUM_CLASSES = {DIGITS_ID: 10, FULL_ID: 62}
#: upstream sizes (TFF emnist.load_data docstring): writers, train examples, test examples
UPSTREAM_SIZES = {DIGITS_ID: (3383, 341_873, 40_832), FULL_ID: (3400, 671_585, 77_483)}
SPLITS = ("train", "test")

SQLITE_ID = "tff_emnist_sqlite"
SQLITE_ARCHIVE, SQLITE_FILE = "emnist_all.sqlite.lzma", "emnist_all.sqlite"
#: TFF emnist.load_data: (only_digits, split) -> split_name in the sqlite release
SQL_SPLIT = {
    (True, "train"): "digits_only_train",
    (True, "test"): "digits_only_test",
    (False, "train"): "all_train",
    (False, "test"): "all_test",
}
#: a bound far above the decompressed file's real size (1,131,773 examples of ~3.2 kB), against a decompression bomb
SQLITE_MAX_BYTES = 32 << 30

_CITATION = (
    "Caldas et al., LEAF: A Benchmark for Federated Settings, arXiv:1812.01097 (2018); Cohen et al., "
    "EMNIST: an extension of MNIST to handwritten letters (2017); TensorFlow Federated, "
    "tff.simulation.datasets.emnist"
)

register(
    Dataset(
        id=DIGITS_ID,
        title="TFF federated EMNIST, digits only (3,383 writers)",
        files=(
            RemoteFile(
                name="fed_emnist_digitsonly.tar.bz2",
                url=BASE_URL + "fed_emnist_digitsonly.tar.bz2",
                # TFF simulation/datasets/emnist.py, load_data(only_digits=True): file_hash (sha256, 64 hex digits)
                sha256="55333deb8546765427c385710ca5e7301e16f4ed8b60c1dc5ae224b42bd5b14b",
            ),
        ),
        citation=_CITATION,
        licence="EMNIST: public (NIST SD 19); TFF code Apache-2.0",
    )
)

register(
    Dataset(
        id=FULL_ID,
        title="TFF federated EMNIST, 62 classes (3,400 writers)",
        files=(
            RemoteFile(
                name="fed_emnist.tar.bz2",
                url=BASE_URL + "fed_emnist.tar.bz2",
                # TFF simulation/datasets/emnist.py, load_data(only_digits=False): file_hash (sha256, 64 hex digits)
                sha256="fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
            ),
        ),
        citation=_CITATION,
        licence="EMNIST: public (NIST SD 19); TFF code Apache-2.0",
    )
)

# ----------------------------------------------------------------------------------------------------------------
# sqlite release: decoding and the content check
# ----------------------------------------------------------------------------------------------------------------


def sqlite_expected() -> dict[str, tuple[int, int]]:
    """{split_name: (clients, examples)} of ``emnist_all.sqlite`` as TFF states them (:data:`UPSTREAM_SIZES`)."""
    out = {}
    for (only_digits, split), name in SQL_SPLIT.items():
        writers, n_train, n_test = UPSTREAM_SIZES[DIGITS_ID if only_digits else FULL_ID]
        out[name] = (writers, n_train if split == "train" else n_test)
    return out


def decode_example(buf: bytes) -> tuple[np.ndarray, int]:
    """(pixels float32 (28, 28), label) of one row, with TFF's parse spec (emnist.py ``_add_proto_parsing``):
    ``pixels`` exactly 784 floats, ``label`` exactly one int64; TfExampleError otherwise."""
    ex = parse_tf_example(buf)
    pixels, label = ex.get("pixels"), ex.get("label")
    if pixels is None or len(pixels) != 784 or not all(isinstance(v, float) for v in pixels[:1]):
        raise TfExampleError(
            "feature 'pixels': expected a float_list of 784 values, got "
            f"{'none' if pixels is None else f'{len(pixels)} values'}"
        )
    if label is None or len(label) != 1 or not isinstance(label[0], int):
        raise TfExampleError(
            f"feature 'label': expected an int64_list of one value, got {'none' if label is None else label[:3]}"
        )
    return np.asarray(pixels, dtype=np.float32).reshape(28, 28), int(label[0])


def check_sqlite_release(path: str | Path) -> None:
    """Content check of ``emnist_all.sqlite.lzma`` (or the decompressed ``emnist_all.sqlite``): TFF's schema, every
    split's clients and examples as TFF states them, and the first example of each split decodes with TFF's parse
    spec. The ``.lzma`` file is decompressed beside itself first (once; the readers reuse it). One DataError line
    naming the file otherwise."""
    path = Path(path)
    db = path
    if path.name.endswith(".lzma"):
        db = tff_sqlite.decompress(path, SQLITE_FILE, dataset_id=SQLITE_ID, max_bytes=SQLITE_MAX_BYTES)
    tff_sqlite.check_release(
        db,
        sqlite_expected(),
        label=str(path),
        dataset_id=SQLITE_ID,
        decode=decode_example,
        source="TFF simulation/datasets/emnist.py, load_data docstring",
    )


register(
    Dataset(
        id=SQLITE_ID,
        title="TFF federated EMNIST, sqlite release (digits-only: 3,383 writers; 62 classes: 3,400 writers)",
        files=(
            RemoteFile(
                name=SQLITE_ARCHIVE,
                url=BASE_URL + SQLITE_ARCHIVE,
                # TFF simulation/datasets/emnist.py load_data: download.get_compressed_file takes no hash and none is
                # published; verified by content instead
                sha256=None,
                content_check=check_sqlite_release,
            ),
        ),
        citation=_CITATION,
        licence="EMNIST: public (NIST SD 19); TFF code Apache-2.0",
    )
)


# ----------------------------------------------------------------------------------------------------------------
# h5 release: locating the files
# ----------------------------------------------------------------------------------------------------------------


def member_names(dataset_id: str) -> dict[str, str]:
    """{'train': '<prefix>_train.h5', 'test': '<prefix>_test.h5'} for a catalog id."""
    if dataset_id not in PREFIX:
        raise KeyError(f"not a TFF EMNIST dataset id: {dataset_id!r} (known: {', '.join(PREFIX)})")
    return {s: f"{PREFIX[dataset_id]}_{s}.h5" for s in SPLITS}


def _dataset_id_of(name: str) -> str:
    for ds_id, prefix in PREFIX.items():
        if name in (f"{prefix}.tar.bz2", f"{prefix}_train.h5", f"{prefix}_test.h5"):
            return ds_id
    raise DataError(
        f"{name}: not a TFF federated EMNIST file (expected {SQLITE_ARCHIVE}, {SQLITE_FILE}, "
        f"{', '.join(p + '.tar.bz2' for p in PREFIX.values())} or their _train/_test.h5)"
    )


def h5_paths(source: str | Path | Iterable[str | Path]) -> tuple[str, dict[str, Path]]:
    """(catalog id, {'train': path, 'test': path}) for an archive, an extracted h5 file, or a list of them.

    An archive (``fed_emnist*.tar.bz2``, e.g. from ``sources.dataset_files``) is extracted beside itself with the
    guarded extractor (only the two h5 members; skipped when already extracted from the same archive). Given one
    h5 file, its sibling of the other split is expected in the same directory.
    """
    paths = _as_paths(source)
    if not paths:
        raise DataError("no TFF EMNIST file given")
    ds_id = _dataset_id_of(paths[0].name)
    names = member_names(ds_id)
    archive = next((p for p in paths if p.name.endswith(".tar.bz2")), None)
    if archive is not None:
        out = extract_members(archive, archive.parent, names.values())
        return ds_id, {s: out[names[s]] for s in SPLITS}
    folder = paths[0].parent
    found = {s: next((p for p in paths if p.name == names[s]), folder / names[s]) for s in SPLITS}
    for s, p in found.items():
        if not p.is_file():
            raise DataError(
                f"TFF EMNIST {s} file {p} not found (extract {PREFIX[ds_id]}.tar.bz2 there, or fetch "
                f"it: `{tff_sqlite.fetch_hint(ds_id)}`)"
            )
    return ds_id, found


def _as_paths(source: str | Path | Iterable[str | Path]) -> list[Path]:
    return [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]


# ----------------------------------------------------------------------------------------------------------------
# readers
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmnistClient:
    client_id: str
    pixels: np.ndarray  # float32 (n, 28, 28), 1.0 = background
    labels: np.ndarray  # int32 (n,)

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _check_labels(where: Path, client_id: str, labels: np.ndarray, num_classes: int | None) -> None:
    if num_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"{where}: client {client_id!r}: labels outside [0, {num_classes})")


class EmnistH5(TffH5):
    """One split (train or test) of TFF federated EMNIST's h5 release; clients read one at a time."""

    FEATURES = {"pixels": "f", "label": "iu"}

    def __init__(self, path: str | Path, num_classes: int | None = None):
        super().__init__(path)
        self.num_classes = num_classes

    def client(self, client_id: str) -> EmnistClient:
        d = self.raw(client_id, ("label", "pixels"))
        pixels, label = d["pixels"], d["label"]
        if pixels.ndim != 3 or pixels.shape[1:] != (28, 28):
            raise DataError(
                f"{self.path}: client {client_id!r}: pixels have shape {pixels.shape}, expected (n, 28, 28)"
            )
        label = label.reshape(label.shape[0], -1)
        if label.shape[1] != 1:
            raise DataError(f"{self.path}: client {client_id!r}: label has shape {d['label'].shape}, expected (n,)")
        label = label[:, 0].astype(np.int32, copy=False)
        _check_labels(self.path, client_id, label, self.num_classes)
        return EmnistClient(client_id, pixels.astype(np.float32, copy=False), label)


class EmnistSqlite(tff_sqlite.SqliteSplit):
    """One split of ``emnist_all.sqlite`` (``digits_only_train``, ``all_test``, ...); same ``client`` API and arrays
    as :class:`EmnistH5`."""

    def __init__(self, path: str | Path, split_name: str, num_classes: int | None = None):
        if split_name not in SQL_SPLIT.values():
            raise ValueError(f"split_name must be one of {tuple(SQL_SPLIT.values())}, got {split_name!r}")
        super().__init__(path, split_name, f"delete it and fetch it again (`{tff_sqlite.fetch_hint(SQLITE_ID)}`)")
        self.num_classes = num_classes

    def client(self, client_id: str) -> EmnistClient:
        pixels, labels = [], []
        for buf in self.records(client_id):
            try:
                p, lab = decode_example(buf)
            except TfExampleError as exc:
                raise DataError(
                    f"{self.path}: split {self.split_name!r}, client {client_id!r}: bad "
                    f"tf.train.Example: {exc}; {self.todo}"
                ) from None
            pixels.append(p)
            labels.append(lab)
        px = np.stack(pixels) if pixels else np.zeros((0, 28, 28), np.float32)
        lab_arr = np.asarray(labels, dtype=np.int64)
        if lab_arr.size and (lab_arr.min() < np.iinfo(np.int32).min or lab_arr.max() > np.iinfo(np.int32).max):
            raise DataError(f"{self.path}: client {client_id!r}: a label does not fit int32")
        lab32 = lab_arr.astype(np.int32)  # TFF: tf.cast(label, tf.int32)
        _check_labels(self.path, client_id, lab32, self.num_classes)
        return EmnistClient(client_id, px, lab32)


EmnistSplit = EmnistH5 | EmnistSqlite


def open_split(
    source: str | Path | Iterable[str | Path], split: str = "train", only_digits: bool | None = None
) -> EmnistSplit:
    """Open the train or test split from the files of a catalog entry.

    ``tff_emnist_sqlite`` (``emnist_all.sqlite.lzma``, decompressed beside itself once, or ``emnist_all.sqlite``):
    ``only_digits`` chooses the label set, as in TFF's ``emnist.load_data`` (required: the file holds both). h5
    release (``tff_emnist_digits`` / ``tff_emnist``, see :func:`h5_paths`): the archive decides; ``only_digits``,
    when given, must agree with it.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    paths = _as_paths(source)
    by_name = {p.name: p for p in paths}
    if SQLITE_ARCHIVE in by_name or SQLITE_FILE in by_name:
        if only_digits is None:
            raise DataError(
                f"{SQLITE_FILE} holds both label sets: say which (only_digits true: 10 digit classes, "
                "false: 62 classes; a partition's `load: {only_digits: ...}`)"
            )
        if SQLITE_ARCHIVE in by_name:
            db = tff_sqlite.decompress(
                by_name[SQLITE_ARCHIVE], SQLITE_FILE, dataset_id=SQLITE_ID, max_bytes=SQLITE_MAX_BYTES
            )
        else:
            db = by_name[SQLITE_FILE]
        return EmnistSqlite(db, SQL_SPLIT[(bool(only_digits), split)], num_classes=10 if only_digits else 62)
    if not paths:
        raise DataError(f"no TFF EMNIST file given: fetch it with `{tff_sqlite.fetch_hint(SQLITE_ID)}`")
    ds_id, h5 = h5_paths(paths)
    if only_digits is not None and bool(only_digits) != (ds_id == DIGITS_ID):
        raise DataError(
            f"{h5[split]}: the {ds_id} release {'is' if ds_id == DIGITS_ID else 'is not'} digits only, "
            f"but only_digits={only_digits} was asked; name the other release's dataset"
        )
    return EmnistH5(h5[split], num_classes=NUM_CLASSES[ds_id])


def load_data(
    source: str | Path | Iterable[str | Path], only_digits: bool | None = None
) -> tuple[EmnistSplit, EmnistSplit]:
    """(train, test), like ``tff.simulation.datasets.emnist.load_data`` (see :func:`open_split`); close both when
    done."""
    train = open_split(source, "train", only_digits)
    try:
        test = open_split(source, "test", only_digits)
    except Exception:
        train.close()
        raise
    return train, test


def compare_releases(a: EmnistSplit, b: EmnistSplit, client_ids: Sequence[str] | None = None) -> dict[str, list]:
    """How one split of two releases compares, client by client (all clients of either, or ``client_ids``):
    ``{'equal': [...], 'reordered': [...], 'different': [...], 'only_in_a': [...], 'only_in_b': [...]}``.
    'reordered': the same examples (pixels and label, as a multiset) in another order within the client."""
    out: dict[str, list] = {k: [] for k in ("equal", "reordered", "different", "only_in_a", "only_in_b")}
    ids = list(client_ids) if client_ids is not None else sorted(set(a.client_ids) | set(b.client_ids))
    for cid in ids:
        if cid not in b:
            out["only_in_a" if cid in a else "different"].append(cid)
            continue
        if cid not in a:
            out["only_in_b"].append(cid)
            continue
        ca, cb = a.client(cid), b.client(cid)
        if (
            ca.pixels.shape == cb.pixels.shape
            and np.array_equal(ca.pixels, cb.pixels)
            and np.array_equal(ca.labels, cb.labels)
        ):
            out["equal"].append(cid)
        elif len(ca) == len(cb) and _multiset(ca) == _multiset(cb):
            out["reordered"].append(cid)
        else:
            out["different"].append(cid)
    return out


def _multiset(c: EmnistClient) -> list[tuple[int, bytes]]:
    return sorted((int(lab), px.tobytes()) for lab, px in zip(c.labels, c.pixels))


def invert(pixels: np.ndarray) -> np.ndarray:
    """1 - pixels: TFF's convention (1.0 = background) to MNIST's (0.0 = background)."""
    return (1.0 - np.asarray(pixels, dtype=np.float32)).astype(np.float32)


@dataclass(frozen=True)
class ClientArrays:
    """One client's flattened train and test data."""

    client_id: str
    x_train: np.ndarray  # float32 (n_train, 784)
    y_train: np.ndarray  # int64 (n_train,)
    x_test: np.ndarray
    y_test: np.ndarray


def client_arrays(train: EmnistSplit, test: EmnistSplit, client_ids: Sequence[str]) -> list[ClientArrays]:
    """Flattened pixels (as shipped, no inversion or scaling) and labels for the given clients, in order."""
    out = []
    for cid in client_ids:
        tr, te = train.client(cid), test.client(cid)
        out.append(
            ClientArrays(
                cid,
                tr.pixels.reshape(len(tr), 784),
                tr.labels.astype(np.int64),
                te.pixels.reshape(len(te), 784),
                te.labels.astype(np.int64),
            )
        )
    return out


def first_clients(train: EmnistSplit, test: EmnistSplit, num_clients: int = 1000) -> list[ClientArrays]:
    """PPSGD Sec. 6 / [code] ``main_real.py::EMNIST``: the first ``num_clients`` of the sorted train client ids
    (digits-only file), each with its train and test examples; x = the 784 raw pixels (1.0 = background, not
    inverted, no bias column), y = the digit label. ``num_clients`` larger than the file's count is an error."""
    ids = train.client_ids
    if num_clients > len(ids):
        raise DataError(f"{train.path}: asked for {num_clients} clients, the file has {len(ids)}")
    return client_arrays(train, test, ids[:num_clients])
