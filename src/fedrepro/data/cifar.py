"""CIFAR-10 and CIFAR-100, the *binary versions* (never the pickled "python versions", which would need pickle).

Upstream format (https://www.cs.toronto.edu/~kriz/cifar.html, "Binary version"):

* ``cifar-10-binary.tar.gz`` holds ``cifar-10-batches-bin/data_batch_1.bin`` .. ``data_batch_5.bin`` (train, 10,000
  records each), ``test_batch.bin`` (10,000) and ``batches.meta.txt`` (the 10 class names, one a line). A record is
  ``<1 x label byte><3072 x pixel byte>``.
* ``cifar-100-binary.tar.gz`` holds ``cifar-100-binary/train.bin`` (50,000 records), ``test.bin`` (10,000),
  ``coarse_label_names.txt`` (20 superclasses) and ``fine_label_names.txt`` (100 classes). A record is
  ``<1 x coarse label byte><1 x fine label byte><3072 x pixel byte>``.

The 3072 pixel bytes are the red, then green, then blue 32x32 channel, each row-major, so the parsers return images
``uint8`` of shape (n, 3, 32, 32) (channels first, the upstream layout; ``images.transpose(0, 2, 3, 1)`` gives
HWC), labels ``int64``. For CIFAR-100 :class:`CifarSplit` carries both the fine labels (``labels``, 0..99) and the
coarse superclass labels (``coarse_labels``, 0..19): AdaPeD partitions CIFAR-100 by superclass.

Archives are opened with :func:`fedrepro.data.archive.extract_members`, the guarded extraction every archive
source shares: every member is checked first (an absolute name, a ``..`` component, a symlink, a hardlink, a device
or anything resolving outside the target directory is refused with a DataError naming it), and only the expected
members are streamed out, never through ``TarFile.extract``.

sha256 of both archives: tensorflow/datasets ``tensorflow_datasets/url_checksums/cifar10.txt`` and
``cifar100.txt`` (commit 333639b37af6), which list exactly these URLs (sizes 170052171 and 168513733 bytes).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.data.archive import extract_members
from fedrepro.data.catalog import Dataset, RemoteFile, register
from fedrepro.errors import DataError

PIXELS = 3 * 32 * 32
CIFAR10_ARCHIVE = "cifar-10-binary.tar.gz"
CIFAR100_ARCHIVE = "cifar-100-binary.tar.gz"
CIFAR10_DIR = "cifar-10-batches-bin"
CIFAR100_DIR = "cifar-100-binary"
CIFAR10_TRAIN = tuple(f"{CIFAR10_DIR}/data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST = f"{CIFAR10_DIR}/test_batch.bin"
CIFAR10_META = f"{CIFAR10_DIR}/batches.meta.txt"
CIFAR100_TRAIN = f"{CIFAR100_DIR}/train.bin"
CIFAR100_TEST = f"{CIFAR100_DIR}/test.bin"
CIFAR100_COARSE_NAMES = f"{CIFAR100_DIR}/coarse_label_names.txt"
CIFAR100_FINE_NAMES = f"{CIFAR100_DIR}/fine_label_names.txt"


@dataclass(frozen=True)
class CifarSplit:
    """``images`` uint8 (n, 3, 32, 32); ``labels`` int64 (CIFAR-100: fine); ``coarse_labels`` int64 or None."""

    images: np.ndarray
    labels: np.ndarray
    coarse_labels: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class CifarData:
    train: CifarSplit
    test: CifarSplit
    label_names: tuple[str, ...]
    coarse_label_names: tuple[str, ...] = ()


def _records(path: Path, n_labels: int) -> np.ndarray:
    rec = n_labels + PIXELS
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    if data.size == 0 or data.size % rec:
        raise DataError(
            f"{path}: {data.size} bytes is not a whole number of {rec}-byte CIFAR records "
            f"({n_labels} label byte(s) + {PIXELS} pixels)"
        )
    return data.reshape(-1, rec)


def _check_range(path: Path, labels: np.ndarray, n: int, what: str) -> np.ndarray:
    if labels.max() >= n:
        raise DataError(f"{path}: {what} label {int(labels.max())} outside 0..{n - 1}; wrong file or version")
    return labels.astype(np.int64)


def read_cifar10_bin(path: str | Path) -> CifarSplit:
    """One CIFAR-10 batch file (1 label byte + 3072 pixel bytes per record)."""
    path = Path(path)
    rec = _records(path, 1)
    return CifarSplit(rec[:, 1:].reshape(-1, 3, 32, 32).copy(), _check_range(path, rec[:, 0], 10, "class"))


def read_cifar100_bin(path: str | Path) -> CifarSplit:
    """One CIFAR-100 file (1 coarse + 1 fine label byte + 3072 pixel bytes per record)."""
    path = Path(path)
    rec = _records(path, 2)
    return CifarSplit(
        rec[:, 2:].reshape(-1, 3, 32, 32).copy(),
        _check_range(path, rec[:, 1], 100, "fine"),
        _check_range(path, rec[:, 0], 20, "coarse"),
    )


def _names(path: Path, n: int) -> tuple[str, ...]:
    names = tuple(
        line.strip() for line in path.read_text(encoding="ascii", errors="replace").splitlines() if line.strip()
    )
    if len(names) != n:
        raise DataError(f"{path}: {len(names)} label names, expected {n}")
    return names


def _concat(splits: list[CifarSplit]) -> CifarSplit:
    return CifarSplit(np.concatenate([s.images for s in splits]), np.concatenate([s.labels for s in splits]))


def _workdir(extract_to: str | Path | None):
    if extract_to is None:
        return tempfile.TemporaryDirectory(prefix="fedrepro-cifar-")
    return contextlib.nullcontext(str(extract_to))


def load_cifar10(archive: str | Path, extract_to: str | Path | None = None) -> CifarData:
    """Parse ``cifar-10-binary.tar.gz``: train = data_batch_1..5 in order (50,000), test = test_batch (10,000).

    Members are extracted (guarded) into ``extract_to``, or a temporary directory removed afterwards.
    """
    with _workdir(extract_to) as tmp:
        got = extract_members(archive, tmp, [*CIFAR10_TRAIN, CIFAR10_TEST, CIFAR10_META])
        train = _concat([read_cifar10_bin(got[n]) for n in CIFAR10_TRAIN])
        return CifarData(train, read_cifar10_bin(got[CIFAR10_TEST]), _names(got[CIFAR10_META], 10))


def load_cifar100(archive: str | Path, extract_to: str | Path | None = None) -> CifarData:
    """Parse ``cifar-100-binary.tar.gz``: train.bin (50,000) and test.bin (10,000), fine and coarse labels."""
    with _workdir(extract_to) as tmp:
        got = extract_members(archive, tmp, [CIFAR100_TRAIN, CIFAR100_TEST, CIFAR100_COARSE_NAMES, CIFAR100_FINE_NAMES])
        return CifarData(
            read_cifar100_bin(got[CIFAR100_TRAIN]),
            read_cifar100_bin(got[CIFAR100_TEST]),
            _names(got[CIFAR100_FINE_NAMES], 100),
            _names(got[CIFAR100_COARSE_NAMES], 20),
        )


# --------------------------------------------------------------------------------------------------------------------
# catalog

_TORONTO = "https://www.cs.toronto.edu/~kriz/"
_CITATION = (
    "A. Krizhevsky, Learning Multiple Layers of Features from Tiny Images, tech. report, University of "
    "Toronto, 2009; https://www.cs.toronto.edu/~kriz/cifar.html"
)

CIFAR10 = register(
    Dataset(
        id="cifar10",
        title="CIFAR-10, binary version (50,000 train / 10,000 test, 10 classes)",
        files=(
            # sha256: tensorflow/datasets tensorflow_datasets/url_checksums/cifar10.txt (same URL)
            RemoteFile(
                CIFAR10_ARCHIVE,
                _TORONTO + CIFAR10_ARCHIVE,
                "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
            ),
        ),
        citation=_CITATION,
        licence="no licence stated; distributed by the authors for research",
    )
)

CIFAR100 = register(
    Dataset(
        id="cifar100",
        title="CIFAR-100, binary version (50,000 train / 10,000 test, 100 classes in 20 superclasses)",
        files=(
            # sha256: tensorflow/datasets tensorflow_datasets/url_checksums/cifar100.txt (same URL)
            RemoteFile(
                CIFAR100_ARCHIVE,
                _TORONTO + CIFAR100_ARCHIVE,
                "58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec",
            ),
        ),
        citation=_CITATION,
        licence="no licence stated; distributed by the authors for research",
    )
)
