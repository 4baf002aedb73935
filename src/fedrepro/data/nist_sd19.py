"""LEAF FEMNIST built from NIST Special Database 19 (``by_class.zip``, ``by_write.zip``), LEAF's pipeline step by step.

LEAF (https://github.com/TalwalkarLab/leaf, ``data/femnist/preprocess/`` and ``data/utils/``) builds FEMNIST in
these steps; each has one function here, whose docstring names the LEAF file it follows:

=====================================================  ===============================================================
LEAF                                                   here
=====================================================  ===============================================================
``femnist/preprocess/get_file_dirs.py``                :func:`class_file_dirs`, :func:`write_file_dirs`
``femnist/preprocess/get_hashes.py`` (by_class half)   :func:`class_file_hashes` (cached: ``intermediate/``)
``femnist/preprocess/match_hashes.py``                 :class:`ClassHashes` (built by :func:`class_file_hashes`),
                                                       :func:`write_with_class` (with the by_write half of
                                                       ``get_hashes.py``)
``femnist/preprocess/group_by_writer.py``              :func:`group_by_writer`
``femnist/preprocess/data_to_json.py``                 :func:`relabel_class`, :func:`image_vector`,
                                                       :func:`data_to_json` (cached: ``all_data/all_data_<k>.json``)
``utils/sample.py``                                    :func:`sample_niid`, :func:`sample_iid`
``utils/remove_users.py``                              :func:`remove_users`
``utils/split_data.py``                                :func:`split_by_sample`, :func:`split_by_user`
``utils/preprocess.sh`` (the order of the steps)       :func:`preprocess`
=====================================================  ===============================================================

:func:`build_all_data` runs the NIST steps, :func:`preprocess` the sampling steps of :class:`LeafOptions`, and
:func:`load_splits` both, returning LEAF's train/test splits as :class:`fedrepro.data.leaf.FederatedSplit` (what
``fedrepro.data.prepare`` turns into arrays for dataset ``leaf_femnist``).

Reading. The zips are read in place with :mod:`zipfile`, one member at a time; nothing is extracted to disk. Member
names are checked first (:func:`check_member_names`): an absolute name, a ``..`` component, a backslash or NUL, or a
symlink member refuses the archive, as :mod:`fedrepro.data.archive` does for tar archives. The layout read is the one
LEAF's ``get_file_dirs.py`` walks after ``unzip``: ``by_class/<class>/<subdir>/<image>`` (``<class>`` two hex digits,
the ASCII code of the character; only subdirectories whose name contains ``hsf`` and not ``mit``, so the
``train_<class>`` copies are skipped) and ``by_write/<partition>/<writer>/<type>/<image>`` (e.g.
``by_write/hsf_0/f0000_14/d0000_14/d0000_14_00000.png``; the writer is the ``f<form>_<template>`` directory name).

Memory. by_class is hashed in one pass keeping only a 16-byte MD5 digest and a class byte per image (~17 bytes x
814k images, plus zipfile's list of the archive's members, ~0.6 KB each); by_write is then read writer by writer:
a writer's images are hashed, labelled, converted and kept as 28x28 uint8 until their shard of :data:`MAX_WRITERS`
writers is written. The sampling steps hold one shard at a time (its json parse peaks at ~14 KB per image, ~0.3 GB
for 100 writers), ``split_by_user`` too (each shard read once per output set). The final arrays are float32, built
from uint8 at the end of each split (at the peak ~5 bytes per pixel of the split being read: its uint8
concatenation and the float32 result; ~3 GB for the full data set's train split).

Order. LEAF lists files with ``os.listdir`` (an order that depends on the file system), and that order decides which
writer opens each shard, the shards' contents and, through the shared random generators of ``sample.py`` and
``split_data.py``, which samples are drawn. Here every list is sorted (member names; shards in index order), so
the output is determined by the zips and the options, but it is not byte-identical to any one LEAF run.

Caching. ``<data dir>/intermediate/class_file_hashes.npz`` (read with ``allow_pickle=False``) and
``<data dir>/all_data/all_data_<k>.json`` (LEAF's own shard format, readable by
:func:`fedrepro.data.leaf.read_leaf_json`) are reused while the zips' size and mtime and the build options are as
recorded in ``all_data/.complete.json``; the sampled train/test shards likewise under
``<data dir>/leaf/<options tag>/{train,test}/`` with their own ``.complete.json``. Every file is written under a
temporary name and renamed, the marker last, so a killed build leaves no shard that is taken as complete. A lock
file serialises two builds in the same data dir.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import random
import re
import stat
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from fedrepro.data.leaf import FEMNIST_CLASSES, FEMNIST_PIXELS, FederatedSplit, collect_writers
from fedrepro.errors import DataError
from fedrepro.files import atomic_write

BY_CLASS = "by_class.zip"
BY_WRITE = "by_write.zip"
MAX_WRITERS = 100  # data_to_json.py: max number of writers per json file
MAX_USERS_PER_SPLIT_FILE = 50  # split_data.py: femnist's max users per json file in the by-user split
IMAGE_SIDE = 128  # data_to_json.py: "original image size is 128, 128"
THUMB = (28, 28)
MAX_MEMBER_BYTES = 1 << 20  # a 128x128 PNG is a few KB; a larger member is not a NIST image
MARKER = ".complete.json"
FORMAT = 1  # bump when the cached files' content changes for the same inputs and options

# The text json.dump writes for LEAF's pixel values vec / 255 (numpy float64 k / 255, written with float repr), and
# the value each such text parses back to: the uint8 k.
PIXEL_TEXT = tuple(repr(k / 255) for k in range(256))
_PIXEL_OF_TEXT = {t: k for k, t in enumerate(PIXEL_TEXT)}
_PIXEL_TEXT_ARR = np.array(PIXEL_TEXT, dtype=object)
_FLOAT32_OF_PIXEL = (np.arange(256) / 255).astype(np.float32)


def _log_default(msg: str) -> None:
    if os.environ.get("FEDREPRO_PROGRESS", "1") != "0":
        print(f"[fedrepro] leaf_femnist: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------------------
# zip access


def open_zip(path: Path) -> zipfile.ZipFile:
    """The archive opened for reading; DataError naming it when it is missing or not a readable zip."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: missing; fetch it with `python -m fedrepro data fetch leaf_femnist`")
    try:
        return zipfile.ZipFile(path)
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise DataError(
            f"{path}: not a readable zip archive ({exc}): cut short or not NIST SD19's {path.name}; delete "
            "it and fetch it again"
        ) from None


def _unsafe(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if not name or "\\" in name or "\x00" in name:
        return "has a backslash or NUL in its name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "has a '..' component"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "is a symlink"
    return None


def check_member_names(zf: zipfile.ZipFile, archive: Path) -> list[zipfile.ZipInfo]:
    """Every member of ``zf``, after refusing the archive (DataError naming the member) if any name is absolute, has a
    ``..`` component, a backslash or NUL, or is a symlink: the rules of :mod:`fedrepro.data.archive`. Nothing is
    extracted, but member names become writer and class ids, so no upstream archive should carry such a name."""
    infos = zf.infolist()
    for info in infos:
        why = _unsafe(info)
        if why:
            raise DataError(
                f"{archive}: refusing archive: member {info.filename!r} {why}; not NIST SD19's "
                f"{archive.name}? delete it and fetch it again"
            )
    return infos


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, archive: Path) -> bytes:
    """The bytes of one member; DataError naming archive and member when it is oversized, corrupt or cut short."""
    if info.file_size > MAX_MEMBER_BYTES:
        raise DataError(
            f"{archive}: member {info.filename} is {info.file_size} bytes, too large for a 128x128 NIST "
            "image; not NIST SD19's archive? delete it and fetch it again"
        )
    try:
        return zf.read(info)
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as exc:
        raise DataError(
            f"{archive}: cannot read member {info.filename} ({exc}): corrupt or truncated archive; delete "
            "it and fetch it again"
        ) from None


# --------------------------------------------------------------------------------------------------------------------
# get_file_dirs.py


def class_file_dirs(infos: Iterable[zipfile.ZipInfo]) -> list[tuple[str, zipfile.ZipInfo]]:
    """(class, member) of every by_class image LEAF uses, sorted by member name.

    LEAF ``data/femnist/preprocess/get_file_dirs.py``: under ``by_class/``, the class directories whose name has two
    characters; in each, the subdirectories whose name contains ``hsf`` and not ``mit``; every file in them.
    """
    out = []
    for info in infos:
        parts = info.filename.split("/")
        if info.is_dir() or len(parts) != 4 or parts[0] != "by_class" or not parts[3]:
            continue
        cl, sub = parts[1], parts[2]
        if len(cl) == 2 and "hsf" in sub and "mit" not in sub:
            out.append((cl, info))
    out.sort(key=lambda t: t[1].filename)
    return out


def write_file_dirs(infos: Iterable[zipfile.ZipInfo]) -> list[tuple[str, zipfile.ZipInfo]]:
    """(writer, member) of every by_write image, sorted by member name (so each writer's images are contiguous).

    LEAF ``data/femnist/preprocess/get_file_dirs.py``: ``by_write/<partition>/<writer>/<type>/<image>``, the writer
    being the name of the writer directory.
    """
    out = []
    for info in infos:
        parts = info.filename.split("/")
        if info.is_dir() or len(parts) != 5 or parts[0] != "by_write" or not parts[4]:
            continue
        out.append((parts[2], info))
    out.sort(key=lambda t: t[1].filename)
    return out


# --------------------------------------------------------------------------------------------------------------------
# data_to_json.py: the class label


_CLASS_CODES = frozenset(
    [f"{c:x}" for c in range(0x30, 0x3A)]
    + [f"{c:x}" for c in range(0x41, 0x5B)]
    + [f"{c:x}" for c in range(0x61, 0x7B)]
)


def relabel_class(c: str) -> int:
    """LEAF ``data/femnist/preprocess/data_to_json.py`` ``relabel_class``: the by_class directory name (the
    character's ASCII code in hex) -> 0-9 for digits, 10-35 for upper-case, 36-61 for lower-case letters.

    A name that is not the code of a digit or letter is a DataError (LEAF would compute a label outside 0..61)."""
    if c.lower() not in _CLASS_CODES:
        raise DataError(
            f"by_class directory {c!r} is not the hex ASCII code of a digit or letter (30-39, 41-5a, "
            "61-7a); not NIST SD19's by_class.zip?"
        )
    if c.isdigit() and int(c) < 40:
        return int(c) - 30
    if int(c, 16) <= 90:
        return int(c, 16) - 55
    return int(c, 16) - 61


# --------------------------------------------------------------------------------------------------------------------
# get_hashes.py + match_hashes.py


@dataclass(frozen=True)
class ClassHashes:
    """by_class MD5 digest -> class label, as LEAF's ``match_hashes.py`` ``class_hash_dict`` (built from the end of
    the list backwards, so when two by_class images have the same bytes the first one in list order gives the
    class). ``digests`` sorted unique ``S16``, ``labels`` uint8 0..61 alongside; ``n_images`` the by_class images
    hashed."""

    digests: np.ndarray
    labels: np.ndarray
    n_images: int

    @classmethod
    def from_lists(cls, digests: bytes, labels: np.ndarray) -> ClassHashes:
        keys = np.frombuffer(digests, dtype="S16")
        order = np.argsort(keys, kind="stable")  # equal digests keep list order: the first is kept below
        keys, labs = keys[order], np.asarray(labels, dtype=np.uint8)[order]
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        return cls(keys[first].copy(), labs[first].copy(), len(order))

    def lookup(self, digests: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(labels, found) for 16-byte digests: position-wise label (0 where not found) and whether found."""
        q = np.array(digests, dtype="S16")
        pos = np.searchsorted(self.digests, q)
        pos = np.minimum(pos, max(len(self.digests) - 1, 0))
        found = (self.digests[pos] == q) if len(self.digests) else np.zeros(len(q), dtype=bool)
        return np.where(found, self.labels[pos] if len(self.digests) else 0, 0).astype(np.int64), found


def _archive_stamp(path: Path) -> dict:
    if not Path(path).is_file():
        raise DataError(f"{path}: missing; fetch it with `python -m fedrepro data fetch leaf_femnist`")
    st = Path(path).stat()
    return {"name": Path(path).name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def class_file_hashes(
    by_class: Path, cache: Path | None = None, log: Callable[[str], None] = _log_default
) -> ClassHashes:
    """Hash every by_class image LEAF uses (:func:`class_file_dirs`) in one pass and build the digest -> class table.

    LEAF ``data/femnist/preprocess/get_hashes.py`` (its by_class half: ``hashlib.md5`` of each file's bytes) and the
    ``class_hash_dict`` of ``match_hashes.py``. ``cache`` (an ``.npz``, LEAF's ``intermediate/class_file_hashes``)
    is reused while by_class.zip's size and mtime are as recorded in it, and written atomically otherwise.
    """
    by_class = Path(by_class)
    stamp = json.dumps(_archive_stamp(by_class), sort_keys=True)
    if cache is not None and cache.is_file():
        try:
            with np.load(cache, allow_pickle=False) as z:
                if str(z["stamp"]) == stamp and int(z["format"]) == FORMAT:
                    return ClassHashes(z["digests"], z["labels"], int(z["n_images"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
            pass  # unreadable or stale cache: hash again
    with open_zip(by_class) as zf:
        members = class_file_dirs(check_member_names(zf, by_class))
        if not members:
            raise DataError(
                f"{by_class}: no by_class/<class>/hsf_*/ images in it: not NIST SD19's by_class.zip? "
                "delete it and fetch it again"
            )
        log(f"hashing {len(members)} by_class images of {by_class.name}")
        label_of = {}
        digests = bytearray()
        labels = np.empty(len(members), dtype=np.uint8)
        for i, (cl, info) in enumerate(members):
            if cl not in label_of:
                try:
                    label_of[cl] = relabel_class(cl)
                except DataError as exc:
                    raise DataError(f"{by_class}: member {info.filename}: {exc}") from None
            digests += hashlib.md5(read_member(zf, info, by_class)).digest()
            labels[i] = label_of[cl]
            if (i + 1) % 100_000 == 0:
                log(f"hashed {i + 1} by_class images")
    table = ClassHashes.from_lists(bytes(digests), labels)
    if cache is not None:

        def write(p: Path) -> None:
            with open(p, "wb") as fh:
                np.savez(
                    fh, digests=table.digests, labels=table.labels, n_images=table.n_images, stamp=stamp, format=FORMAT
                )

        atomic_write(cache, write)
    return table


@dataclass
class MatchStats:
    """Counts of one by_write pass: images matched, writers, and by_class digests no by_write image matched."""

    write_images: int = 0
    writers: int = 0
    used: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def unmatched_class_images(self) -> int:
        return int((~self.used).sum())


def write_with_class(
    zf: zipfile.ZipFile,
    archive: Path,
    members: list[tuple[str, zipfile.ZipInfo]],
    table: ClassHashes,
    stats: MatchStats | None = None,
    log: Callable[[str], None] = _log_default,
) -> Iterator[tuple[str, tuple[str, bytes], int]]:
    """(writer, (member name, bytes), class label) of every by_write image, in ``members`` order.

    LEAF ``data/femnist/preprocess/get_hashes.py`` (its by_write half) and ``match_hashes.py``: the class of a
    by_write image is that of the by_class image with the same MD5. An image with no by_class twin is a DataError
    naming it (LEAF's ``class_hash_dict[h]`` raises KeyError there). A by_class image no by_write image matches is
    not used, as in LEAF; ``stats`` counts them.
    """
    if stats is not None and len(stats.used) != len(table.digests):
        stats.used = np.zeros(len(table.digests), dtype=bool)
    i = 0
    while i < len(members):
        j = i
        while j < len(members) and members[j][0] == members[i][0]:
            j += 1
        block = members[i:j]  # one writer's images: hashed and labelled together
        datas = [read_member(zf, info, archive) for _, info in block]
        digests = [hashlib.md5(d).digest() for d in datas]
        labels, found = table.lookup(digests)
        if not found.all():
            k = int(np.flatnonzero(~found)[0])
            raise DataError(
                f"{archive}: member {block[k][1].filename} (MD5 {digests[k].hex()}) has no image with the "
                f"same bytes in {BY_CLASS}, so its class is unknown (LEAF's match_hashes.py fails here "
                "too): the two archives are not NIST SD19's pair; delete both and fetch them again"
            )
        if stats is not None:
            stats.write_images += len(block)
            stats.writers += 1
            if len(table.digests):
                stats.used[np.searchsorted(table.digests, np.array(digests, dtype="S16"))] = True
        for (w, info), d, c in zip(block, datas, labels.tolist()):
            yield w, (info.filename, d), c
        if stats is not None and stats.writers % 500 == 0:
            log(f"read {stats.writers} writers ({stats.write_images} by_write images)")
        i = j


# --------------------------------------------------------------------------------------------------------------------
# group_by_writer.py


def group_by_writer(
    write_classes: Iterable[tuple[str, object, int]], duplicate_first: bool = True
) -> Iterator[tuple[str, list[tuple[object, int]]]]:
    """Runs of consecutive equal writers -> (writer, [(file, class), ...]), lazily.

    LEAF ``data/femnist/preprocess/group_by_writer.py``. With ``duplicate_first`` (LEAF's published code), the list
    of every writer after the first starts with its first image twice: the loop starts a new writer's list with that
    image and then appends it again. NIST SD19 has 814,255 images; LEAF issue #49 reports 817,851 images for 3,597
    writers from the full-size command, 3,596 = 3,597 - 1 more. ``duplicate_first=False`` lists every image once.
    """
    cw: str | None = None
    cimages: list[tuple[object, int]] = []
    started = False
    for w, f, c in write_classes:
        if not started:
            cw, started = w, True
        if w != cw:
            yield cw, cimages
            cw = w
            cimages = [(f, c)] if duplicate_first else []
        cimages.append((f, c))
    if started:
        yield cw, cimages


# --------------------------------------------------------------------------------------------------------------------
# data_to_json.py: image conversion and shards


def image_vector(data: bytes, label: str, reducing_gap: float | None = None) -> np.ndarray:
    """One NIST PNG -> its 784 pixels as uint8 k, the value LEAF writes being k / 255.

    LEAF ``data/femnist/preprocess/data_to_json.py``: ``Image.open`` -> ``convert('L')`` ->
    ``thumbnail((28, 28), Image.ANTIALIAS)`` (ANTIALIAS is LANCZOS) -> ``np.asarray(...).flatten() / 255``.
    ``reducing_gap``: Pillow >= 7.0 gives ``thumbnail`` a default ``reducing_gap=2.0`` (first a 2x box reduction of
    the 128x128 image, then Lanczos); earlier Pillow (LEAF's script dates from 2018) resized directly, which ``None``
    reproduces. (Pillow >= 10 has no ``Image.ANTIALIAS``: LEAF's script no longer runs there.)
    An image that is not 128x128 or cannot be decoded is a DataError naming ``label``.
    """
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.size != (IMAGE_SIDE, IMAGE_SIDE):
                raise DataError(
                    f"{label}: image is {img.size[0]}x{img.size[1]}, NIST SD19 images are 128x128; not "
                    "NIST SD19's archive? delete it and fetch it again"
                )
            gray = img.convert("L")
    except DataError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise DataError(f"{label}: not a readable PNG image ({exc}); delete the archive and fetch it again") from None
    gray.thumbnail(THUMB, Image.Resampling.LANCZOS, reducing_gap=reducing_gap)
    arr = np.asarray(gray, dtype=np.uint8)
    return arr.reshape(FEMNIST_PIXELS).copy()


@dataclass
class Shard:
    """One LEAF json shard held as arrays: per user ``x`` uint8 (n, 784) (pixel k stands for k / 255) and ``y``
    int64 (n,); ``num_samples`` is ``len(y)`` (LEAF's FEMNIST shards always agree)."""

    users: list[str]
    x: list[np.ndarray]
    y: list[np.ndarray]

    @property
    def num_samples(self) -> list[int]:
        return [len(y) for y in self.y]

    def subset(self, keep: list[int]) -> Shard:
        return Shard([self.users[i] for i in keep], [self.x[i] for i in keep], [self.y[i] for i in keep])


def _rows_text(x: np.ndarray) -> str:
    if len(x) == 0:
        return "[]"
    txt = _PIXEL_TEXT_ARR[x]
    return "[" + ", ".join("[" + ", ".join(row) + "]" for row in txt.tolist()) + "]"


def write_shard(path: Path, shard: Shard) -> Path:
    """Write ``shard`` as LEAF json, atomically: exactly the text of LEAF's ``json.dump`` of ``{"users": ...,
    "num_samples": ..., "user_data": {u: {"x": [[k / 255, ...], ...], "y": [...]}}}`` (keys in that order, user_data
    in users order, default separators)."""

    def write(p: Path) -> None:
        with open(p, "w", encoding="utf-8") as fh:
            fh.write(
                '{"users": '
                + json.dumps(shard.users)
                + ', "num_samples": '
                + json.dumps(shard.num_samples)
                + ', "user_data": {'
            )
            for i, (u, x, y) in enumerate(zip(shard.users, shard.x, shard.y)):
                fh.write(
                    (", " if i else "")
                    + json.dumps(u)
                    + ': {"x": '
                    + _rows_text(x)
                    + ', "y": '
                    + json.dumps([int(v) for v in y])
                    + "}"
                )
            fh.write("}}")

    atomic_write(Path(path), write)
    return Path(path)


class _NotAPixel(ValueError):
    pass


def _pixel(text: str) -> int:
    try:
        return _PIXEL_OF_TEXT[text]
    except KeyError:
        raise _NotAPixel(text) from None


def read_shard(path: Path) -> Shard:
    """One FEMNIST shard written by :func:`write_shard` (or LEAF) -> :class:`Shard`; the schema checks of
    :func:`fedrepro.data.leaf.read_femnist_shard`, and every pixel must be one of the 256 values k / 255 as LEAF
    writes them (parsed straight to uint8, so a shard costs ~8 bytes per pixel while parsed, not ~32)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=_pixel)
    except _NotAPixel as exc:
        raise DataError(
            f"{path}: pixel value {exc} is not k/255 as LEAF writes it; delete the file to rebuild it"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read as a LEAF json shard ({exc}); delete it to rebuild it") from None
    if not isinstance(doc, dict) or not all(k in doc for k in ("users", "num_samples", "user_data")):
        raise DataError(f"{path}: not a LEAF json shard (needs users, num_samples, user_data); delete it to rebuild it")
    users, counts, data = doc["users"], doc["num_samples"], doc["user_data"]
    if (
        not isinstance(users, list)
        or not isinstance(counts, list)
        or not isinstance(data, dict)
        or len(users) != len(counts)
        or len(set(users)) != len(users)
    ):
        raise DataError(f"{path}: users / num_samples / user_data are inconsistent; delete it to rebuild it")
    xs, ys = [], []
    for u, n in zip(users, counts):
        ud = data.get(u)
        if not isinstance(ud, dict) or not isinstance(ud.get("x"), list) or not isinstance(ud.get("y"), list):
            raise DataError(f"{path}: user {u!r} has no user_data with lists 'x' and 'y'; delete it to rebuild it")
        x, y = ud["x"], ud["y"]
        if len(x) != len(y) or len(y) != n or not all(isinstance(r, list) and len(r) == FEMNIST_PIXELS for r in x):
            raise DataError(f"{path}: user {u!r}: x, y and num_samples disagree or an image is not 784 values")
        if not all(type(v) is int and 0 <= v < FEMNIST_CLASSES for v in y):
            raise DataError(f"{path}: user {u!r}: labels y are not integers in 0..{FEMNIST_CLASSES - 1}")
        try:
            xs.append(np.asarray(x, dtype=np.uint8).reshape(len(x), FEMNIST_PIXELS))
        except (TypeError, ValueError):
            raise DataError(f"{path}: user {u!r}: pixel values are not k/255") from None
        ys.append(np.asarray(y, dtype=np.int64))
    return Shard(list(users), xs, ys)


def data_to_json(
    groups: Iterable[tuple[str, list[tuple[tuple[str, bytes], int]]]],
    out_dir: Path,
    label: str,
    reducing_gap: float | None = None,
    last_partial_shard: bool = True,
    log: Callable[[str], None] = _log_default,
) -> list[Path]:
    """Convert writer groups to ``out_dir/all_data_<k>.json``, :data:`MAX_WRITERS` writers per shard.

    LEAF ``data/femnist/preprocess/data_to_json.py``: per writer, every (file, class) in list order becomes
    (:func:`image_vector`, :func:`relabel_class`); shards hold 100 writers, the last one the rest. LEAF wrote that
    last, partial shard only from commit 0d30b4d (2021-01-12) on; before, the writers after the last full hundred
    were left out, which ``last_partial_shard=False`` reproduces. ``label`` names the archive in errors. A writer name
    seen twice (LEAF would list it twice in a shard) is a DataError.
    """
    out_dir = Path(out_dir)
    written: list[Path] = []
    seen: set[str] = set()
    cur = Shard([], [], [])

    def flush() -> None:
        path = write_shard(out_dir / f"all_data_{len(written)}.json", cur)
        written.append(path)
        log(f"wrote {path.name} ({len(cur.users)} writers, {sum(cur.num_samples)} images)")

    for w, images in groups:
        if w in seen:
            raise DataError(f"{label}: writer directory {w!r} appears in two places; not NIST SD19's by_write.zip?")
        seen.add(w)
        converted: dict[str, np.ndarray] = {}
        rows = []
        for (name, data), _ in images:
            if name not in converted:
                converted[name] = image_vector(data, f"{label}: member {name}", reducing_gap)
            rows.append(converted[name])
        cur.users.append(w)
        cur.x.append(np.stack(rows) if rows else np.zeros((0, FEMNIST_PIXELS), np.uint8))
        cur.y.append(np.array([c for _, c in images], dtype=np.int64))
        if len(cur.users) == MAX_WRITERS:
            flush()
            cur = Shard([], [], [])
    if cur.users and last_partial_shard:
        flush()
    return written


# --------------------------------------------------------------------------------------------------------------------
# markers and locking


def _read_marker(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _write_marker(path: Path, doc: dict) -> None:
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def _files_intact(root: Path, files: dict) -> bool:
    return (
        isinstance(files, dict)
        and bool(files)
        and all((root / n).is_file() and (root / n).stat().st_size == s for n, s in files.items())
    )


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fh = open(path, "a")
    except OSError as exc:
        raise DataError(
            f"{path.parent}: cannot write the FEMNIST build there ({exc}); make the data dir writable"
        ) from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------------------------
# the NIST steps, cached


@dataclass(frozen=True)
class BuildOptions:
    """Options of LEAF's NIST steps that change ``all_data``: see :func:`group_by_writer` (``duplicate_first``),
    :func:`image_vector` (``reducing_gap``) and :func:`data_to_json` (``last_partial_shard``)."""

    duplicate_first: bool = True
    reducing_gap: float | None = None
    last_partial_shard: bool = True


def _remove_stale(out_dir: Path, keep: set[str]) -> None:
    for p in out_dir.glob("all_data_*.json"):
        if p.name not in keep:
            p.unlink()


def build_all_data(
    by_class: Path,
    by_write: Path,
    out_dir: Path,
    options: BuildOptions = BuildOptions(),
    intermediate: Path | None = None,
    log: Callable[[str], None] = _log_default,
) -> list[Path]:
    """LEAF's ``data/femnist/preprocess/data_to_json.sh`` (get_file_dirs -> get_hashes -> match_hashes ->
    group_by_writer -> data_to_json) from the two zips to ``out_dir/all_data_<k>.json``; returns the shards.

    Reused as they are while ``out_dir/.complete.json`` records the same zips (size, mtime), options and shard
    sizes; otherwise rebuilt (old shards removed). ``intermediate``: where ``class_file_hashes.npz`` is cached
    (default ``out_dir``'s sibling ``intermediate``).
    """
    by_class, by_write, out_dir = Path(by_class), Path(by_write), Path(out_dir)
    intermediate = Path(intermediate) if intermediate is not None else out_dir.parent / "intermediate"
    key = {
        "format": FORMAT,
        "by_class": _archive_stamp(by_class),
        "by_write": _archive_stamp(by_write),
        "options": asdict(options),
    }
    marker = out_dir / MARKER
    with _locked(out_dir.parent / ".leaf_femnist.lock"):
        old = _read_marker(marker)
        if old is not None and {k: old.get(k) for k in key} == key and _files_intact(out_dir, old.get("shards")):
            return [out_dir / n for n in sorted(old["shards"], key=_shard_index)]
        marker.unlink(missing_ok=True)
        table = class_file_hashes(by_class, intermediate / "class_file_hashes.npz", log)
        stats = MatchStats()
        with open_zip(by_write) as zf:
            members = write_file_dirs(check_member_names(zf, by_write))
            if not members:
                raise DataError(
                    f"{by_write}: no by_write/<partition>/<writer>/<type>/ images in it: not NIST SD19's "
                    "by_write.zip? delete it and fetch it again"
                )
            log(f"matching and converting {len(members)} by_write images of {by_write.name}")
            out_dir.mkdir(parents=True, exist_ok=True)
            triples = write_with_class(zf, by_write, members, table, stats, log)
            shards = data_to_json(
                group_by_writer(triples, options.duplicate_first),
                out_dir,
                str(by_write),
                options.reducing_gap,
                options.last_partial_shard,
                log,
            )
        _remove_stale(out_dir, {p.name for p in shards})
        _write_marker(
            marker,
            {
                **key,
                "shards": {p.name: p.stat().st_size for p in shards},
                "counts": {
                    "by_class_images": table.n_images,
                    "by_write_images": stats.write_images,
                    "writers": stats.writers,
                    "by_class_digests_without_by_write_twin": stats.unmatched_class_images(),
                },
            },
        )
        log(
            f"all_data: {len(shards)} shards, {stats.writers} writers, {stats.write_images} by_write images; "
            f"{stats.unmatched_class_images()} by_class digests unused"
        )
        return shards


def _shard_index(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# --------------------------------------------------------------------------------------------------------------------
# utils/sample.py, remove_users.py, split_data.py


def _label_of(fraction: float) -> str:
    """LEAF's file-name label of a fraction: ``str(fraction)[2:]`` (0.05 -> '05', 0.9 -> '9', 1.0 -> '0')."""
    return str(float(fraction))[2:]


def sample_niid(shard: Shard, rng: random.Random, fraction: float) -> Shard:
    """LEAF ``data/utils/sample.py``, non-iid branch, on one shard: shuffle the users with ``rng``, then take whole
    users in that order until ``int(fraction * total)`` samples are reached; the user that crosses the target keeps
    only as many samples as are missing: its first ones, in the order ``rng.sample`` permutes them."""
    users = list(range(len(shard.users)))
    rng.shuffle(users)
    target = int(fraction * sum(shard.num_samples))
    total, out = 0, Shard([], [], [])
    i = 0
    while total < target:
        u = users[i]
        x, y = shard.x[u], shard.y[u]
        n = len(y)
        if total + n > target:
            n = target - total
            idx = rng.sample(range(n), n)
            x, y = x[idx], y[idx]
        out.users.append(shard.users[u])
        out.x.append(x)
        out.y.append(y)
        total += n
        i += 1
    return out


def iid_divide(n: int, g: int) -> list[tuple[int, int]]:
    """LEAF ``data/utils/util.py`` ``iid_divide``: (start, stop) of ``g`` groups of ``n`` items, the first groups
    of ``n // g`` items and the last ``n - g * (n // g)`` groups one larger."""
    size = n // g
    big = n - g * size
    small = g - big
    out = [(size * i, size * (i + 1)) for i in range(small)]
    base = size * small
    out += [(base + (size + 1) * i, base + (size + 1) * (i + 1)) for i in range(big)]
    return out


def sample_iid(
    shard: Shard, rng: random.Random, fraction: float, users_fraction: float, new_user_count: int
) -> tuple[Shard, int]:
    """LEAF ``data/utils/sample.py``, iid branch, on one shard: pool all samples (users in order),
    ``rng.sample`` ``int(fraction * total)`` of them and deal them with :func:`iid_divide` to
    ``round(users_fraction * n_users)`` (at least 1) new users named ``str(new_user_count + i)``. Returns the shard
    and the updated count. The new users are not writers: each holds samples of many."""
    n_users = len(shard.users)
    total = sum(shard.num_samples)
    n_new = int(fraction * total)
    n_new_users = int(round(users_fraction * n_users)) or 1
    idx = rng.sample(range(total), n_new)
    x_all = np.concatenate(shard.x) if shard.x else np.zeros((0, FEMNIST_PIXELS), np.uint8)
    y_all = np.concatenate(shard.y) if shard.y else np.zeros(0, np.int64)
    x_s, y_s = x_all[idx], y_all[idx]
    names = [str(i + new_user_count) for i in range(n_new_users)]
    groups = iid_divide(n_new, n_new_users)
    out = Shard(names, [x_s[a:b] for a, b in groups], [y_s[a:b] for a, b in groups])
    return out, new_user_count + n_new_users


def remove_users(shard: Shard, min_samples: int) -> Shard:
    """LEAF ``data/utils/remove_users.py``: keep the users with at least ``min_samples`` samples, in order."""
    return shard.subset([i for i, n in enumerate(shard.num_samples) if n >= min_samples])


def split_by_sample(shard: Shard, rng: random.Random, train_fraction: float) -> tuple[Shard, Shard]:
    """LEAF ``data/utils/split_data.py``, ``--by_sample``, on one shard: per user with n >= 2 samples,
    ``rng.sample`` ``max(1, int(train_fraction * n))`` train indices (1 when n == 2), the rest test, both kept in
    their original order; a user with n < 2, or left with an empty side, is dropped from both."""
    train, test = Shard([], [], []), Shard([], [], [])
    for u, x, y in zip(shard.users, shard.x, shard.y):
        n = len(y)
        if n < 2:
            continue
        n_train = 1 if n == 2 else max(1, int(train_fraction * n))
        tr = set(rng.sample(range(n), n_train))
        tr_idx = [j for j in range(n) if j in tr]
        te_idx = [j for j in range(n) if j not in tr]
        if tr_idx and te_idx:
            for part, idx in ((train, tr_idx), (test, te_idx)):
                part.users.append(u)
                part.x.append(x[idx])
                part.y.append(y[idx])
    return train, test


def split_by_user(
    files: list[Path], rng: random.Random, train_fraction: float, out_dirs: dict[str, Path], suffix: str
) -> dict[str, list[Path]]:
    """LEAF ``data/utils/split_data.py``, ``--by_user``: over the users of all ``files`` in order, ``rng.sample``
    ``int(train_fraction * n_users)`` as train users, the others test; each set written in that order,
    :data:`MAX_USERS_PER_SPLIT_FILE` users per file (LEAF's code intends 50 for femnist, but its file-writing
    check sits after the loop, so it writes one file per set; the users of each set are the same).
    ``suffix``: the file-name tail (``_<set>_<tf label>.json`` is appended)."""
    users: list[tuple[int, int]] = []  # (file index, user index in file)
    for fi, f in enumerate(files):
        users += [(fi, ui) for ui in range(len(_peek_users(f)))]
    n_train = int(train_fraction * len(users))
    chosen = set(rng.sample(range(len(users)), n_train))
    sets = {
        "train": [u for k, u in enumerate(users) if k in chosen],
        "test": [u for k, u in enumerate(users) if k not in chosen],
    }
    out: dict[str, list[Path]] = {}
    for which, members in sets.items():
        out[which] = []
        cur, loaded = Shard([], [], []), (None, None)
        for pos, (fi, ui) in enumerate(members):
            if loaded[0] != fi:
                loaded = (fi, read_shard(files[fi]))
            s = loaded[1]
            cur.users.append(s.users[ui])
            cur.x.append(s.x[ui])
            cur.y.append(s.y[ui])
            if len(cur.users) == MAX_USERS_PER_SPLIT_FILE or pos == len(members) - 1:
                name = f"all_data_{len(out[which])}{suffix}_{which}_{_label_of(train_fraction)}.json"
                out[which].append(write_shard(out_dirs[which] / name, cur))
                cur = Shard([], [], [])
    return out


def _peek_users(path: Path) -> list[str]:
    return read_shard(path).users


@dataclass(frozen=True)
class LeafOptions:
    """The options of LEAF's ``data/femnist/preprocess.sh`` (-> ``data/utils/preprocess.sh``).

    ``sample``: ``-s`` 'niid', 'iid' or None (no sampling step); ``fraction``: ``--sf`` (sample.py default 0.1);
    ``iid_users``: ``--iu`` (iid only, default 0.01); ``min_samples``: ``-k`` (None: no remove_users step);
    ``split``: ``-t`` 'sample' or 'user'; ``train_fraction``: ``--tf`` (default 0.9); ``sampling_seed`` /
    ``split_seed``: ``--smplseed`` / ``--spltseed``. LEAF draws a seed from the clock when none is given; here both
    are required. ``build``: the options of the NIST steps (:class:`BuildOptions`).
    """

    sampling_seed: int
    split_seed: int
    sample: str | None = "niid"
    fraction: float = 0.1
    iid_users: float = 0.01
    min_samples: int | None = None
    split: str = "sample"
    train_fraction: float = 0.9
    build: BuildOptions = BuildOptions()

    def __post_init__(self):
        if self.sample not in ("niid", "iid", None):
            raise ValueError(f"LeafOptions.sample must be 'niid', 'iid' or None, not {self.sample!r}")
        if self.split not in ("sample", "user"):
            raise ValueError(f"LeafOptions.split must be 'sample' or 'user', not {self.split!r}")
        for name in ("sampling_seed", "split_seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"LeafOptions.{name} must be an integer >= 0 (got {v!r})")
        if not (0 < self.fraction <= 1 and 0 < self.train_fraction <= 1 and 0 < self.iid_users <= 1):
            raise ValueError("LeafOptions fractions must lie in (0, 1]")

    def suffix(self) -> str:
        """LEAF's file-name tail after ``all_data_<k>``: sampling, then remove_users."""
        s = ""
        if self.sample == "niid":
            s += f"_niid_{_label_of(self.fraction)}"
        elif self.sample == "iid":
            s += f"_iid_{_label_of(self.iid_users)}_{_label_of(self.fraction)}"
        if self.min_samples is not None:
            s += f"_keep_{self.min_samples}"
        return s

    def tag(self) -> str:
        """Directory name of this option set's train/test output."""
        parts = [self.sample or "all", f"sf{self.fraction:g}"]
        if self.sample == "iid":
            parts.append(f"iu{self.iid_users:g}")
        parts += [
            f"k{'na' if self.min_samples is None else self.min_samples}",
            f"t{self.split}",
            f"tf{self.train_fraction:g}",
            f"smpl{self.sampling_seed}",
            f"splt{self.split_seed}",
        ]
        if self.build != BuildOptions():
            b = self.build
            parts.append(f"dup{int(b.duplicate_first)}_gap{b.reducing_gap}_last{int(b.last_partial_shard)}")
        return "_".join(parts)


# AdaPeD (Ozkara et al. 2023) Sec. 4 uses "a subset of 198 writers" of LEAF FEMNIST, loaded through
# github.com/tao-shen/FEMNIST_pytorch (App. K footnote 12), whose LEAF options are not published. The values below
# are declared as GAPs in config/partitions.yaml (femnist_digits_m66): LEAF's full-size command
# (data/femnist/README.md: -s niid --sf 1.0 -k 0 -t sample, --tf default 0.9) with the seeds of LEAF's own FEMNIST
# experiments (paper_experiments/femnist.sh: sampling 1549786595, split 1549786796); the writer subset is then
# drawn by the writer_groups partition.
LEAF_FEMNIST = LeafOptions(
    sampling_seed=1549786595,
    split_seed=1549786796,
    sample="niid",
    fraction=1.0,
    min_samples=0,
    split="sample",
    train_fraction=0.9,
)


def preprocess(
    all_data: list[Path], out_root: Path, options: LeafOptions, log: Callable[[str], None] = _log_default
) -> dict[str, list[Path]]:
    """LEAF ``data/utils/preprocess.sh`` after ``all_data``: sample (``sample.py``), remove users
    (``remove_users.py``), split (``split_data.py``), into ``out_root/train`` and ``out_root/test`` with LEAF's file
    names (e.g. ``all_data_0_niid_0_keep_0_train_9.json``). One generator per step seeded as LEAF seeds it
    (``random.Random(seed)``), the shards processed in index order. The sampled and user-filtered shards are not
    written (LEAF keeps them in ``sampled_data/`` and ``rem_user_data/``). Reused while ``out_root/.complete.json``
    matches ``all_data``'s marker and the options."""
    out_root = Path(out_root)
    all_data = sorted((Path(p) for p in all_data), key=lambda p: _shard_index(p.name))
    source = _read_marker(all_data[0].parent / MARKER) if all_data else None
    key = {
        "format": FORMAT,
        "options": asdict(options),
        "all_data": {p.name: p.stat().st_size for p in all_data},
        "all_data_key": None if source is None else {k: source.get(k) for k in ("by_class", "by_write", "options")},
    }
    marker = out_root / MARKER
    dirs = {s: out_root / s for s in ("train", "test")}
    with _locked(out_root.parent / ".leaf_femnist.lock"):
        old = _read_marker(marker)
        if old is not None and {k: old.get(k) for k in key} == key and _files_intact(out_root, old.get("files")):
            return {s: [out_root / n for n in old["files"] if n.startswith(s + "/")] for s in dirs}
        marker.unlink(missing_ok=True)
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
            for p in d.glob("*.json"):
                p.unlink()
        rng_sample = random.Random(options.sampling_seed)
        rng_split = random.Random(options.split_seed)
        suffix = options.suffix()
        tf = _label_of(options.train_fraction)
        out: dict[str, list[Path]] = {s: [] for s in dirs}
        staged: list[Path] = []
        new_user_count = 0
        for f in all_data:
            shard = read_shard(f)
            if options.sample == "niid":
                shard = sample_niid(shard, rng_sample, options.fraction)
            elif options.sample == "iid":
                shard, new_user_count = sample_iid(
                    shard, rng_sample, options.fraction, options.iid_users, new_user_count
                )
            if options.min_samples is not None:
                shard = remove_users(shard, options.min_samples)
            stem = f.name[: -len(".json")] + suffix
            if options.split == "sample":
                train, test = split_by_sample(shard, rng_split, options.train_fraction)
                out["train"].append(write_shard(dirs["train"] / f"{stem}_train_{tf}.json", train))
                out["test"].append(write_shard(dirs["test"] / f"{stem}_test_{tf}.json", test))
            else:
                staged.append(write_shard(out_root / "staged" / f"{stem}.json", shard))
            log(f"{options.tag()}: {f.name} done")
        if options.split == "user":
            out = split_by_user(staged, rng_split, options.train_fraction, dirs, suffix)
            for p in staged:
                p.unlink()
        files = {f"{s}/{p.name}": p.stat().st_size for s, ps in out.items() for p in ps}
        _write_marker(marker, {**key, "files": files})
        return out


# --------------------------------------------------------------------------------------------------------------------
# the loader


def _archives(files: Iterable[Path]) -> tuple[Path, Path]:
    paths = {Path(p).name: Path(p) for p in files}
    missing = [n for n in (BY_CLASS, BY_WRITE) if n not in paths]
    if missing:
        raise DataError(
            f"leaf_femnist: {' and '.join(missing)} not among the dataset's files "
            f"({', '.join(paths) or 'none'}); fetch them with `python -m fedrepro data fetch leaf_femnist`"
        )
    return paths[BY_CLASS], paths[BY_WRITE]


def _shard_writers(path: Path) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    s = read_shard(path)
    return s.users, s.x, s.y


def read_split(paths: Iterable[Path]) -> FederatedSplit:
    """Shards of one split (natural file-name order, as :func:`fedrepro.data.leaf.load_femnist_split`) ->
    :class:`~fedrepro.data.leaf.FederatedSplit` with float32 ``x`` equal to what ``load_femnist`` returns; the
    pixels stay uint8 until the end (a quarter of the memory while shards are read)."""
    paths = sorted((Path(p) for p in paths), key=lambda p: _shard_index(p.as_posix()))
    if not paths:
        raise DataError("FEMNIST: no json shards given")
    users, xs, ys, cs = collect_writers(paths, _shard_writers)
    if not xs:
        raise DataError(f"{paths[0].parent}: the shards hold no writer")
    x8 = np.concatenate(xs)
    del xs
    return FederatedSplit(tuple(users), _FLOAT32_OF_PIXEL[x8], np.concatenate(ys), np.concatenate(cs))


def load_splits(
    files: Iterable[Path], options: LeafOptions = LEAF_FEMNIST, log: Callable[[str], None] = _log_default
) -> dict[str, FederatedSplit]:
    """The dataset's files (``by_class.zip``, ``by_write.zip``, verified) -> LEAF FEMNIST ``{"train", "test"}``
    built with ``options``, the cache kept in the zips' directory (``all_data/``, ``intermediate/``, ``leaf/``)."""
    by_class, by_write = _archives(files)
    root = by_class.parent
    shards = build_all_data(by_class, by_write, root / "all_data", options.build, root / "intermediate", log)
    out = preprocess(shards, root / "leaf" / options.tag(), options, log)
    return {s: read_split(out[s]) for s in ("train", "test")}
