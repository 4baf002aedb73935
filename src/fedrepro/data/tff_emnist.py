"""TFF federated EMNIST (writer-partitioned EMNIST from LEAF, as shipped by TensorFlow Federated), without TF.

Catalog ids:
  * ``tff_emnist_digits``: ``fed_emnist_digitsonly.tar.bz2`` -> ``fed_emnist_digitsonly_train.h5`` /
    ``fed_emnist_digitsonly_test.h5``: 3,383 writers, labels 0-9, 341,873 train / 40,832 test examples
    (``tff.simulation.datasets.emnist.load_data(only_digits=True)``; PPSGD Sec. 6, FedHDP "FMNIST" Table 4).
  * ``tff_emnist``: ``fed_emnist.tar.bz2`` -> ``fed_emnist_train.h5`` / ``fed_emnist_test.h5``: 3,400 writers,
    62 labels (0-9 digits, 10-35 upper case, 36-61 lower case), 671,585 train / 77,483 test (FedHDP FEMNIST).

Format (TFF ``emnist.py`` docstring and ``hdf5_client_data.py``): group ``examples/<writer id>/`` with datasets
``pixels`` (float32, N x 28 x 28, values in [0, 1], **1.0 = background, 0.0 = ink**: the inverse of MNIST's
convention; kept as shipped, see :func:`invert`) and ``label`` (int32, N). Every writer is in both files (each
writer's examples were split into train and test). Clients are listed sorted, as TFF lists them.

Checksums: the sha256 values below are the ``file_hash=..., hash_algorithm='sha256'`` that TFF's
``tensorflow_federated/python/simulation/datasets/emnist.py`` (the h5-based releases, before TFF moved to sqlite files) passes to
``tf.keras.utils.get_file`` for these archives; the same values appear in third-party loaders of the same URLs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from fedrepro.data.archive import extract_members
from fedrepro.data.catalog import Dataset, RemoteFile, register
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

_CITATION = ("Caldas et al., LEAF: A Benchmark for Federated Settings, arXiv:1812.01097 (2018); Cohen et al., "
             "EMNIST: an extension of MNIST to handwritten letters (2017); TensorFlow Federated, "
             "tff.simulation.datasets.emnist")

register(Dataset(
    id=DIGITS_ID,
    title="TFF federated EMNIST, digits only (3,383 writers)",
    files=(RemoteFile(
        name="fed_emnist_digitsonly.tar.bz2",
        url=BASE_URL + "fed_emnist_digitsonly.tar.bz2",
        # TFF simulation/datasets/emnist.py, load_data(only_digits=True): file_hash (sha256, 64 hex digits)
        sha256="55333deb8546765427c385710ca5e7301e16f4ed8b60c1dc5ae224b42bd5b14b",
    ),),
    citation=_CITATION,
    licence="EMNIST: public (NIST SD 19); TFF code Apache-2.0",
))

register(Dataset(
    id=FULL_ID,
    title="TFF federated EMNIST, 62 classes (3,400 writers)",
    files=(RemoteFile(
        name="fed_emnist.tar.bz2",
        url=BASE_URL + "fed_emnist.tar.bz2",
        # TFF simulation/datasets/emnist.py, load_data(only_digits=False): file_hash (sha256, 64 hex digits)
        sha256="fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
    ),),
    citation=_CITATION,
    licence="EMNIST: public (NIST SD 19); TFF code Apache-2.0",
))


def member_names(dataset_id: str) -> dict[str, str]:
    """{'train': '<prefix>_train.h5', 'test': '<prefix>_test.h5'} for a catalog id."""
    if dataset_id not in PREFIX:
        raise KeyError(f"not a TFF EMNIST dataset id: {dataset_id!r} (known: {', '.join(PREFIX)})")
    return {s: f"{PREFIX[dataset_id]}_{s}.h5" for s in SPLITS}


def _dataset_id_of(name: str) -> str:
    for ds_id, prefix in PREFIX.items():
        if name in (f"{prefix}.tar.bz2", f"{prefix}_train.h5", f"{prefix}_test.h5"):
            return ds_id
    raise DataError(f"{name}: not a TFF federated EMNIST file (expected one of "
                    f"{', '.join(p + '.tar.bz2' for p in PREFIX.values())} or their _train/_test.h5)")


def h5_paths(source: str | Path | Iterable[str | Path]) -> tuple[str, dict[str, Path]]:
    """(catalog id, {'train': path, 'test': path}) for an archive, an extracted h5 file, or a list of them.

    An archive (``fed_emnist*.tar.bz2``, e.g. from ``sources.dataset_files``) is extracted beside itself with the
    guarded extractor (only the two h5 members; skipped when already extracted from the same archive). Given one
    h5 file, its sibling of the other split is expected in the same directory.
    """
    paths = [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]
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
            raise DataError(f"TFF EMNIST {s} file {p} not found (extract {PREFIX[ds_id]}.tar.bz2 there, or fetch "
                            f"dataset {ds_id})")
    return ds_id, found


@dataclass(frozen=True)
class EmnistClient:
    client_id: str
    pixels: np.ndarray  # float32 (n, 28, 28), 1.0 = background
    labels: np.ndarray  # int32 (n,)

    def __len__(self) -> int:
        return int(self.labels.shape[0])


class EmnistH5(TffH5):
    """One split (train or test) of TFF federated EMNIST; clients read one at a time."""

    FEATURES = {"pixels": "f", "label": "iu"}

    def __init__(self, path: str | Path, num_classes: int | None = None):
        super().__init__(path)
        self.num_classes = num_classes

    def client(self, client_id: str) -> EmnistClient:
        d = self.raw(client_id, ("label", "pixels"))
        pixels, label = d["pixels"], d["label"]
        if pixels.ndim != 3 or pixels.shape[1:] != (28, 28):
            raise DataError(f"{self.path}: client {client_id!r}: pixels have shape {pixels.shape}, "
                            "expected (n, 28, 28)")
        label = label.reshape(label.shape[0], -1)
        if label.shape[1] != 1:
            raise DataError(f"{self.path}: client {client_id!r}: label has shape {d['label'].shape}, expected (n,)")
        label = label[:, 0].astype(np.int32, copy=False)
        if self.num_classes is not None and label.size and (label.min() < 0 or label.max() >= self.num_classes):
            raise DataError(f"{self.path}: client {client_id!r}: labels outside [0, {self.num_classes})")
        return EmnistClient(client_id, pixels.astype(np.float32, copy=False), label)


def open_split(source: str | Path | Iterable[str | Path], split: str = "train") -> EmnistH5:
    """Open the train or test split from the archive / h5 path(s) (see :func:`h5_paths`)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    ds_id, paths = h5_paths(source)
    return EmnistH5(paths[split], num_classes=NUM_CLASSES[ds_id])


def load_data(source: str | Path | Iterable[str | Path]) -> tuple[EmnistH5, EmnistH5]:
    """(train, test), like ``tff.simulation.datasets.emnist.load_data``; close both when done."""
    train = open_split(source, "train")
    try:
        test = open_split(source, "test")
    except Exception:
        train.close()
        raise
    return train, test


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


def client_arrays(train: EmnistH5, test: EmnistH5, client_ids: Sequence[str]) -> list[ClientArrays]:
    """Flattened pixels (as shipped, no inversion or scaling) and labels for the given clients, in order."""
    out = []
    for cid in client_ids:
        tr, te = train.client(cid), test.client(cid)
        out.append(ClientArrays(cid, tr.pixels.reshape(len(tr), 784), tr.labels.astype(np.int64),
                                te.pixels.reshape(len(te), 784), te.labels.astype(np.int64)))
    return out


def ppsgd_clients(train: EmnistH5, test: EmnistH5, num_clients: int = 1000) -> list[ClientArrays]:
    """PPSGD Sec. 6 / [code] ``main_real.py::EMNIST``: the first ``num_clients`` of the sorted train client ids
    (digits-only file), each with its train and test examples; x = the 784 raw pixels (1.0 = background, not
    inverted, no bias column), y = the digit label. ``num_clients`` larger than the file's count is an error."""
    ids = train.client_ids
    if num_clients > len(ids):
        raise DataError(f"{train.path}: asked for {num_clients} clients, the file has {len(ids)}")
    return client_arrays(train, test, ids[:num_clients])
