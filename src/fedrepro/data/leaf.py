"""LEAF json shards: FEMNIST (images by writer) and Reddit (comments by user), parsed into numpy arrays.

LEAF (Caldas et al. 2018, https://github.com/TalwalkarLab/leaf) stores every dataset as json shards::

    {"users": [u, ...], "num_samples": [n_u, ...], "user_data": {u: {"x": [...], "y": [...]}, ...}}

(``data/femnist/preprocess/data_to_json.py``; an optional "hierarchies" list is ignored). A shard that does not
follow this schema is a :class:`~fedrepro.errors.DataError` naming the file and the offending user.

FEMNIST
    ``x`` is a list of 784 floats per image: the 128x128 NIST SD19 character image converted to grey, thumbnailed to
    28x28 and divided by 255 (so values are k/255 in [0, 1], 1.0 = white background, the ink is dark: inverted with
    respect to MNIST), row-major; ``y`` the class 0..61 (digits 0-9, upper-case A-Z 10-35, lower-case a-z 36-61).
    :func:`load_femnist` returns per split a :class:`FederatedSplit`: ``x`` float32 (N, 784) in the upstream layout,
    ``y`` int64 (N,), ``client`` int64 (N,) indexing ``users``. LEAF's split files are ``train/*.json`` and
    ``test/*.json``.

    * ``leaf_femnist_sf005``: a 105-writer SAMPLE of FEMNIST, not the full data set: 20 shard pairs
      (``all_data_{0-10,16-20,31-34}``) of LEAF's ``preprocess.sh -s niid --sf 0.05 -k 0`` output with LEAF's
      sample-based train/test split (``-t sample --tf 0.9``, inferred from the file names and from every writer
      appearing in both splits); 14,708 train and 1,685 test images, 62 classes. It is not downloadable: the files
      come from the shared data beside the project (``../shared/data/leaf_femnist_sf005`` relative to the project
      root, which holds a SHA256SUMS file); since its directory is named like the dataset, the default
      ``data.mirror: ../shared/data`` finds it. The 40 sha256 below
      are exactly those of that SHA256SUMS file (re-computed from the files: all match).
    * ``leaf_femnist``: the full data set (3,550 writers, 805,263 images per the LEAF paper). Its canonical
      source is NIST Special Database 19 (``by_class.zip``, ``by_write.zip``), which LEAF's
      ``data/femnist/preprocess/get_data.sh`` downloads from NIST's host; the json shards are then produced by
      LEAF's preprocessing (``preprocess.sh``, with the sampling/splitting options of the experiment), which
      fedrepro reimplements step by step in :mod:`fedrepro.data.nist_sd19` (the ``leaf_femnist`` array loader).
      sha256 not pinned: NIST publishes no sha256 and no networked machine has fetched the
      archives for fedrepro yet; they are verified by :func:`check_nist_by_class` / :func:`check_nist_by_write`
      (layout and counts NIST states) and the sha256 of the first fetch is recorded and printed for pinning.

Reddit
    LEAF's Reddit data (pushshift.io comments of December 2017, cleaned and tokenized; ``data/reddit/README.md``)
    is published only preprocessed, as a Google Drive archive. The catalog entry ``reddit`` is the subsampled archive
    LEAF's reference model uses, ``reddit_subsampled.zip`` (Drive id 1ISzp69JmaIJqBpQCX-JJ8-kVyUns8M7o) holding
    ``new_small_data/{train,val,test}_data.json``; the complete data set is Drive id
    1lT1Z0N1weG-oA2PgC1Jak_WQ6h3bu7V_ (not registered). Schema (``data/reddit/source/preprocess.py``,
    ``models/reddit/stacked_lstm.py``): per user ``x`` is a list of comments, each a list of token sequences of
    ``SEQ_LEN`` = 10 tokens (``<BOS>`` comment tokens ``<EOS>``, padded with ``<PAD>``); ``y`` is a list of one dict
    per comment with ``subreddit``, ``created_utc``, ``score``, ``target_tokens`` (the input shifted by one token,
    same shape) and ``count_tokens`` (1 for a real token, 0 for padding, same shape). LEAF's preprocessing copies
    each user's total comment count into ``num_samples`` of all three splits, so ``num_samples`` is kept as given
    and NOT checked against ``len(x)``. :func:`load_reddit` returns per split a :class:`RedditSplit` whose users
    hold token arrays (str, (n_seq, 10)), the mask and the comment index of each sequence. Google Drive serves an
    HTML confirmation page instead of a large file to plain HTTP clients; ``fedrepro data fetch reddit`` downloads
    it through ``gdown``, which answers that page. No checksum is published: the archive is verified by
    :func:`check_reddit_archive` and the sha256 of its first fetch is recorded and printed for pinning.

json is parsed with the standard library; no pickle is involved anywhere (LEAF's Reddit vocabulary is a pickle
file and is deliberately not read: build the vocabulary from the train split instead).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from fedrepro.data.catalog import Dataset, RemoteFile, register
from fedrepro.errors import DataError

FEMNIST_PIXELS = 28 * 28
FEMNIST_CLASSES = 62
REDDIT_SEQ_LEN = 10
REDDIT_ARCHIVE = "reddit_subsampled.zip"
REDDIT_MEMBERS = {split: f"new_small_data/{split}_data.json" for split in ("train", "val", "test")}
_FEMNIST_SPLITS = ("train", "test")


# --------------------------------------------------------------------------------------------------------------------
# generic LEAF shard


def read_leaf_json(source: str | Path | IO[bytes], name: str | None = None) -> dict[str, Any]:
    """Read one LEAF shard and check its top-level schema; return the parsed json.

    Checks: keys users / num_samples / user_data; as many num_samples as users, non-negative integers; users unique;
    every user has user_data with lists ``x`` and ``y`` of equal length. ``name`` labels errors (default: the path).
    """
    label = name or str(source)
    try:
        if isinstance(source, (str, Path)):
            with open(source, "rb") as fh:
                doc = json.load(fh)
        else:
            doc = json.load(source)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{label}: cannot read as a LEAF json shard: {exc}") from None
    if not isinstance(doc, dict):
        raise DataError(f"{label}: not a LEAF json shard (top level is {type(doc).__name__}, expected an object)")
    missing = [k for k in ("users", "num_samples", "user_data") if k not in doc]
    if missing:
        raise DataError(f"{label}: not a LEAF json shard: missing key(s) {', '.join(missing)}")
    users, counts, data = doc["users"], doc["num_samples"], doc["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or not isinstance(data, dict):
        raise DataError(f"{label}: users and num_samples must be lists and user_data an object")
    if len(users) != len(counts):
        raise DataError(f"{label}: {len(users)} users but {len(counts)} num_samples")
    if len(set(users)) != len(users):
        raise DataError(f"{label}: duplicate user ids in 'users'")
    for u, n in zip(users, counts):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise DataError(f"{label}: user {u!r}: num_samples {n!r} is not a non-negative integer")
        ud = data.get(u)
        if not isinstance(ud, dict) or not isinstance(ud.get("x"), list) or not isinstance(ud.get("y"), list):
            raise DataError(f"{label}: user {u!r} listed in 'users' has no user_data with lists 'x' and 'y'")
        if len(ud["x"]) != len(ud["y"]):
            raise DataError(f"{label}: user {u!r}: {len(ud['x'])} x but {len(ud['y'])} y")
    return doc


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.as_posix())]


# --------------------------------------------------------------------------------------------------------------------
# FEMNIST


@dataclass(frozen=True)
class FederatedSplit:
    """One split of a federated image dataset, flat: sample ``i`` belongs to ``users[client[i]]``."""

    users: tuple[str, ...]
    x: np.ndarray
    y: np.ndarray
    client: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def num_samples(self) -> np.ndarray:
        return np.bincount(self.client, minlength=len(self.users))

    def client_data(self, user: str) -> tuple[np.ndarray, np.ndarray]:
        k = self.users.index(user)
        sel = self.client == k
        return self.x[sel], self.y[sel]


def read_femnist_shard(path: str | Path, dtype=np.float32) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """One FEMNIST shard -> (users, per-user x (n, 784) ``dtype``, per-user y int64), in the shard's user order."""
    path = Path(path)
    doc = read_leaf_json(path)
    xs, ys = [], []
    for u, n in zip(doc["users"], doc["num_samples"]):
        ud = doc["user_data"][u]
        if len(ud["y"]) != n:
            raise DataError(f"{path}: user {u!r}: num_samples says {n}, user_data has {len(ud['y'])} samples")
        for i, row in enumerate(ud["x"]):
            if not isinstance(row, list) or len(row) != FEMNIST_PIXELS:
                got = len(row) if isinstance(row, list) else type(row).__name__
                raise DataError(f"{path}: user {u!r}: image {i} has {got} values, expected {FEMNIST_PIXELS} (28x28)")
        if not all(type(v) is int for v in ud["y"]):
            raise DataError(f"{path}: user {u!r}: labels y are not all integers")
        try:
            x = np.asarray(ud["x"], dtype=dtype).reshape(n, FEMNIST_PIXELS)
            y = np.asarray(ud["y"], dtype=np.int64).reshape(n)
        except (ValueError, TypeError) as exc:
            raise DataError(f"{path}: user {u!r}: x/y are not numeric ({exc})") from None
        if n and (not np.isfinite(x).all() or x.min() < 0 or x.max() > 1):
            raise DataError(f"{path}: user {u!r}: pixel values missing, not finite or outside [0, 1]")
        if n and (y.min() < 0 or y.max() >= FEMNIST_CLASSES):
            raise DataError(f"{path}: user {u!r}: labels outside 0..{FEMNIST_CLASSES - 1}")
        xs.append(x)
        ys.append(y)
    return list(doc["users"]), xs, ys


def load_femnist_split(paths: Iterable[str | Path], dtype=np.float32) -> FederatedSplit:
    """Concatenate FEMNIST shards (in natural file-name order) into one :class:`FederatedSplit`.

    A writer appearing in two shards of the same split is a DataError.
    """
    paths = sorted((Path(p) for p in paths), key=_natural_key)
    if not paths:
        raise DataError("FEMNIST: no json shards given")
    users, xs, ys, cs = collect_writers(paths, lambda p: read_femnist_shard(p, dtype))
    return FederatedSplit(tuple(users), np.concatenate(xs), np.concatenate(ys), np.concatenate(cs))


def collect_writers(
    paths: Iterable[Path], read: Callable[[Path], tuple[list[str], list[np.ndarray], list[np.ndarray]]]
) -> tuple[list[str], list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The writers of one split's shards, in ``paths`` order: ``read(path)`` gives a shard's (users, x per user, y per
    user); returns users, xs, ys and each sample's client index (int64, the writer's position in users). A writer
    appearing in two shards of the same split is a DataError."""
    users: list[str] = []
    seen: dict[str, Path] = {}
    xs, ys, cs = [], [], []
    for p in paths:
        for u, x, y in zip(*read(p)):
            if u in seen:
                raise DataError(f"{p}: writer {u!r} also appears in {seen[u]} (same split)")
            seen[u] = p
            cs.append(np.full(len(y), len(users), dtype=np.int64))
            users.append(u)
            xs.append(x)
            ys.append(y)
    return users, xs, ys, cs


def load_femnist(paths: Iterable[str | Path], dtype=np.float32) -> dict[str, FederatedSplit]:
    """LEAF FEMNIST shards -> {"train": ..., "test": ...}, each shard assigned by its parent directory name.

    ``paths`` are e.g. ``dataset_files(cfg, "leaf_femnist_sf005")`` (``.../train/*.json``, ``.../test/*.json``).
    """
    groups: dict[str, list[Path]] = {s: [] for s in _FEMNIST_SPLITS}
    for p in map(Path, paths):
        if p.parent.name not in groups:
            raise DataError(f"{p}: a LEAF shard must lie in a 'train' or 'test' directory")
        groups[p.parent.name].append(p)
    empty = [s for s, ps in groups.items() if not ps]
    if empty:
        raise DataError(f"FEMNIST: no {' or '.join(empty)} shards among the given files")
    return {s: load_femnist_split(ps, dtype) for s, ps in groups.items()}


def load_femnist_dir(root: str | Path, dtype=np.float32) -> dict[str, FederatedSplit]:
    """Same as :func:`load_femnist` for a directory holding ``train/*.json`` and ``test/*.json``."""
    root = Path(root)
    return load_femnist([*root.glob("train/*.json"), *root.glob("test/*.json")], dtype)


# --------------------------------------------------------------------------------------------------------------------
# Reddit


@dataclass(frozen=True)
class RedditUser:
    """One user's comments cut into LEAF's token sequences (``n_seq`` rows of :data:`REDDIT_SEQ_LEN` tokens)."""

    inputs: np.ndarray  # str (n_seq, 10): <BOS> tokens <EOS> <PAD>...
    targets: np.ndarray  # str (n_seq, 10): the next token of each input position
    mask: np.ndarray  # float32 (n_seq, 10): 1 real token, 0 padding (LEAF's count_tokens)
    comment: np.ndarray  # int64 (n_seq,): index of the comment each sequence comes from
    meta: tuple[dict, ...]  # per comment: the y fields other than the tokens (subreddit, created_utc, score)

    @property
    def num_comments(self) -> int:
        return len(self.meta)


@dataclass(frozen=True)
class RedditSplit:
    users: tuple[str, ...]
    data: Mapping[str, RedditUser]
    num_samples: Mapping[str, int] = field(default_factory=dict)  # as stored by LEAF (see module docstring)


def _token_block(label: str, what: str, seqs: Any, dtype=None) -> np.ndarray:
    if (
        not isinstance(seqs, list)
        or not seqs
        or not all(isinstance(s, list) and len(s) == REDDIT_SEQ_LEN for s in seqs)
    ):
        raise DataError(f"{label}: {what} must be a non-empty list of {REDDIT_SEQ_LEN}-token sequences")
    if dtype is None:
        if not all(isinstance(t, str) for s in seqs for t in s):
            raise DataError(f"{label}: {what} must hold string tokens")
        return np.array(seqs, dtype=str)
    try:
        return np.asarray(seqs, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{label}: {what} is not numeric: {exc}") from None


def read_reddit_json(source: str | Path | IO[bytes], name: str | None = None) -> RedditSplit:
    """One LEAF Reddit split file (e.g. ``train_data.json``) -> :class:`RedditSplit`."""
    label = name or str(source)
    doc = read_leaf_json(source, label)
    data: dict[str, RedditUser] = {}
    for u in doc["users"]:
        ud = doc["user_data"][u]
        ins, tgs, msk, com, meta = [], [], [], [], []
        for i, (cx, cy) in enumerate(zip(ud["x"], ud["y"])):
            where = f"{label}: user {u!r} comment {i}"
            if not isinstance(cy, dict) or "target_tokens" not in cy or "count_tokens" not in cy:
                raise DataError(f"{where}: y must be an object with target_tokens and count_tokens")
            x = _token_block(where, "x", cx)
            t = _token_block(where, "target_tokens", cy["target_tokens"])
            m = _token_block(where, "count_tokens", cy["count_tokens"], np.float32)
            if not (x.shape == t.shape == m.shape):
                raise DataError(f"{where}: x {x.shape}, target_tokens {t.shape} and count_tokens {m.shape} differ")
            ins.append(x)
            tgs.append(t)
            msk.append(m)
            com.append(np.full(len(x), i, dtype=np.int64))
            meta.append({k: v for k, v in cy.items() if k not in ("target_tokens", "count_tokens")})
        if ins:
            user = RedditUser(
                np.concatenate(ins), np.concatenate(tgs), np.concatenate(msk), np.concatenate(com), tuple(meta)
            )
        else:
            e = np.zeros((0, REDDIT_SEQ_LEN))
            user = RedditUser(e.astype(str), e.astype(str), e.astype(np.float32), np.zeros(0, np.int64), ())
        data[u] = user
    return RedditSplit(tuple(doc["users"]), data, dict(zip(doc["users"], doc["num_samples"])))


def load_reddit(archive: str | Path) -> dict[str, RedditSplit]:
    """``reddit_subsampled.zip`` -> {"train", "val", "test"}: reads only the three expected members, in memory
    (nothing is extracted to disk)."""
    archive = Path(archive)
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataError(
            f"{archive}: not a zip archive ({exc}): cut short, or a Google Drive HTML page instead of "
            "the file? delete it and fetch it again"
        ) from None
    out = {}
    with zf:
        names = set(zf.namelist())
        for split, member in REDDIT_MEMBERS.items():
            if member not in names:
                raise DataError(f"{archive}: expected member {member!r} is missing (not LEAF's reddit_subsampled.zip?)")
            try:
                with zf.open(member) as fh:
                    out[split] = read_reddit_json(io.BufferedReader(fh), f"{archive}:{member}")
            except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise DataError(
                    f"{archive}: cannot read member {member!r} ({exc}): corrupt or truncated; delete it "
                    "and fetch it again"
                ) from None
    return out


# --------------------------------------------------------------------------------------------------------------------
# content checks of the unpinned archives (fedrepro.data.catalog: what their publishers state, since no sha256 is)

#: NIST SD19's 62 character classes, as directory names: the ASCII code in lower-case hex (0-9: 30-39, A-Z: 41-5a,
#: a-z: 61-7a), per the SD19 user's guide (2nd ed.) and LEAF's data/femnist/preprocess/get_file_dirs.py.
NIST_CLASSES = frozenset(f"{c:02x}" for c in [*range(0x30, 0x3A), *range(0x41, 0x5B), *range(0x61, 0x7B)])
#: EMNIST ByClass (Cohen et al. 2017), built from SD19's by_class hsf_* images, counts 814,255 characters; NIST
#: publishes no per-archive member count, so the checks ask for at least this many images, not exactly 814,255.
NIST_MIN_IMAGES = 800_000
#: SD19 holds the forms of 3,600 writers (the user's guide; LEAF keeps 3,550 of them): at least this many writers.
NIST_MIN_WRITERS = 3_500
_HSF = re.compile(r"hsf_\d+$")


def check_nist_by_class(path: Path) -> None:
    """NIST SD19 by_class.zip: members under by_class/<class>/, exactly the 62 classes (hex 30-39, 41-5a, 61-7a),
    each with hsf_* directories of PNG images, >= 800,000 of them in all."""
    from fedrepro.data.archive import zip_names

    classes: dict[str, int] = {}
    for name in zip_names(path):
        parts = name.rstrip("/").split("/")
        if parts[0] != "by_class" or (len(parts) > 1 and parts[1] not in NIST_CLASSES):
            raise DataError(f"{path}: member {name!r} is not under by_class/<one of the 62 SD19 classes>/")
        if len(parts) == 4 and _HSF.match(parts[2]) and parts[3].lower().endswith(".png"):
            classes[parts[1]] = classes.get(parts[1], 0) + 1
    _nist_counts(path, classes, "class")


def check_nist_by_write(path: Path) -> None:
    """NIST SD19 by_write.zip: members under by_write/hsf_*/<writer form f####_##>/<field dir>/, PNG images,
    >= 800,000 of them, from >= 3,500 writers' forms."""
    from fedrepro.data.archive import zip_names

    writers: dict[str, int] = {}
    for name in zip_names(path):
        parts = name.rstrip("/").split("/")
        if parts[0] != "by_write" or (len(parts) > 1 and not _HSF.match(parts[1])):
            raise DataError(f"{path}: member {name!r} is not under by_write/hsf_*/")
        if len(parts) == 5 and parts[4].lower().endswith(".png"):
            writers[parts[2]] = writers.get(parts[2], 0) + 1
    if len(writers) < NIST_MIN_WRITERS:
        raise DataError(f"{path}: images of {len(writers)} writers' forms, SD19 has 3,600 writers")
    _nist_counts(path, writers, "writer")


def _nist_counts(path: Path, groups: dict[str, int], what: str) -> None:
    if what == "class" and set(groups) != NIST_CLASSES:
        missing = sorted(NIST_CLASSES - set(groups))
        raise DataError(f"{path}: no hsf_* PNG images for class(es) {', '.join(missing[:10])} of SD19's 62")
    n = sum(groups.values())
    if n < NIST_MIN_IMAGES:
        raise DataError(f"{path}: {n:,} PNG images, SD19 has 814,255 characters (a partial or other archive)")


def check_reddit_archive(path: Path) -> None:
    """LEAF reddit_subsampled.zip: a zip holding new_small_data/{train,val,test}_data.json, each a LEAF json with
    users / num_samples / user_data in the token-sequence schema of LEAF's Reddit preprocessing, users in train.

    LEAF states no user or comment count for this archive (data/reddit/README.md), so none is checked.
    """
    if not load_reddit(path)["train"].users:
        raise DataError(f"{path}: the train split has no users")


# --------------------------------------------------------------------------------------------------------------------
# catalog

_LEAF_CITATION = (
    "S. Caldas, S. M. K. Duddu, P. Wu, T. Li, J. Konecny, H. B. McMahan, V. Smith, A. Talwalkar, "
    "LEAF: A Benchmark for Federated Settings, arXiv:1812.01097, 2018; "
    "https://github.com/TalwalkarLab/leaf"
)
_NIST_CITATION = (
    "P. J. Grother, K. K. Hanaoka, NIST Special Database 19, Handprinted Forms and Characters, 2nd "
    "ed., NIST, 2016, https://doi.org/10.18434/T4H01C"
)
SAMPLE_SOURCE = (
    "not downloadable: output of LEAF data/femnist/preprocess.sh -s niid --sf 0.05 -k 0 -t sample "
    "--tf 0.9 (project shared data leaf_femnist_sf005; see fedrepro.data.leaf)"
)

# name, sha256: exactly the 40 lines of ../shared/data/leaf_femnist_sf005/SHA256SUMS (sha256 of that file:
# f74e25b11b612224c2d7745fc7c896809dd56667a26409b338cf0d535f983b54), re-computed from the files here.
_SF005 = (
    (
        "train/all_data_0_niid_05_keep_0_train_9.json",
        "e52c8724a9a3ea3ff3fecc179b3f322efa25fe84a1d712a37ee94586f08123c6",
    ),
    (
        "train/all_data_10_niid_05_keep_0_train_9.json",
        "dc687d0b52afc4cb038ba59504f5962217947b58be77708502f27aace6481f9d",
    ),
    (
        "train/all_data_16_niid_05_keep_0_train_9.json",
        "927bb8cc27658e539c0781ac39918397b3ad712f42fff8ac687778dfabab2451",
    ),
    (
        "train/all_data_17_niid_05_keep_0_train_9.json",
        "9fe910f90e73eb87989f8dbcbab94bd713b1ada05dad8c438f19d0febe4ea5d6",
    ),
    (
        "train/all_data_18_niid_05_keep_0_train_9.json",
        "b0acfd82f3e3854d6a105928c46f66c25868b3ae1305488a9e91572dce0396b0",
    ),
    (
        "train/all_data_19_niid_05_keep_0_train_9.json",
        "6e3184a7b11c700f89af4a779dcca275796768c48fa84e4e150af7d4bf4db513",
    ),
    (
        "train/all_data_1_niid_05_keep_0_train_9.json",
        "e7e9a1b23bc206e1feeb94d4f993d911ed950adc47e92ce52954597197b99c13",
    ),
    (
        "train/all_data_20_niid_05_keep_0_train_9.json",
        "46a4e20479468057c9b9462cc60ad2ad48c2b0c000e740d94d4a8310b23715bf",
    ),
    (
        "train/all_data_2_niid_05_keep_0_train_9.json",
        "a71f9d0d1ab95b98bb95f20cdcab02097125efab27d9ce341045cb07d565409d",
    ),
    (
        "train/all_data_31_niid_05_keep_0_train_9.json",
        "a2438bbf6e17a45d05ea9e28b9c7085dde298e1ed02e00372eee6da8161d6701",
    ),
    (
        "train/all_data_32_niid_05_keep_0_train_9.json",
        "8c82d19646fbc0a96483d886c36a3502bdfc657e758c40cae12ee9eef83e3daf",
    ),
    (
        "train/all_data_33_niid_05_keep_0_train_9.json",
        "b6f89d29618747d8431396bd2a9d2e54fd2286d1d8939a9b32c72f569d6ffd05",
    ),
    (
        "train/all_data_34_niid_05_keep_0_train_9.json",
        "655a68578d2edd76a02f6ee8141e32c5aad079f48d4edeece711b0e04c84c1fc",
    ),
    (
        "train/all_data_3_niid_05_keep_0_train_9.json",
        "1623ade048b1c1991d3aa6d5a658dcb67e83fe1def41c2b2647f466f3f3c91db",
    ),
    (
        "train/all_data_4_niid_05_keep_0_train_9.json",
        "133facbc92bfaffe3b315a147cd458ca20e3283d3f48882ad72e953c4906e435",
    ),
    (
        "train/all_data_5_niid_05_keep_0_train_9.json",
        "2a2b8dccb528033995b0d29ddd953edf002242ed4869c99b23983570b37348de",
    ),
    (
        "train/all_data_6_niid_05_keep_0_train_9.json",
        "be03dc6a7fef7197501f75cb25285f03b9dbf6ae0e1367e48d82096da41cb32c",
    ),
    (
        "train/all_data_7_niid_05_keep_0_train_9.json",
        "2e1008e286bdb71110e47ab0010edde2d5bcabfb96ba988926481aa401e85532",
    ),
    (
        "train/all_data_8_niid_05_keep_0_train_9.json",
        "b72ad0551d01fa0b031f2580aac5bc415f4ffb8613a8cf62048389923d44be90",
    ),
    (
        "train/all_data_9_niid_05_keep_0_train_9.json",
        "4c8ed42c941fa95250f21125cf35141b57147cce5063e6acb1bf1d02c7684b8d",
    ),
    ("test/all_data_0_niid_05_keep_0_test_9.json", "979c4ab82ccbc6de67656cfdfc7412900910099014a7c134d64a36347ca6be41"),
    ("test/all_data_10_niid_05_keep_0_test_9.json", "9ed09f6d45455c66d8d442a8451d96d7f53b64e159149a2ccc0931651ae52851"),
    ("test/all_data_16_niid_05_keep_0_test_9.json", "b326cd7652b00073ae157e517b6d90e5bd45257bcdf8b6d6781f5e9beafdf628"),
    ("test/all_data_17_niid_05_keep_0_test_9.json", "40b93f70a73598b133443a7c5e332e706d82c2611de7d5cfd6066d2a2a3c9052"),
    ("test/all_data_18_niid_05_keep_0_test_9.json", "fefe2cf9c2f14fdb6cb757774ff841519fed1adf214c786c680492a94d6b63fc"),
    ("test/all_data_19_niid_05_keep_0_test_9.json", "c3f5506ff72efbce185955fb4778d7887389a31c0bb4d9090a08dbcb90101e82"),
    ("test/all_data_1_niid_05_keep_0_test_9.json", "e7dabc622469a0941c32ba03c14ba8c1f2f2c24e03378926f2b4d60a10f5a537"),
    ("test/all_data_20_niid_05_keep_0_test_9.json", "34a4aedc5b4e7a7c88c3ddb2f8f5beff944a5f3619e98a634879de9e509588f6"),
    ("test/all_data_2_niid_05_keep_0_test_9.json", "86f292986d0843c50f08d069125f73fddd4fff59a990e6a4c7cc7fff472696b1"),
    ("test/all_data_31_niid_05_keep_0_test_9.json", "7534a28d664082283e1fd678ced09faf2883b344cc87f12acdc8490c60562ece"),
    ("test/all_data_32_niid_05_keep_0_test_9.json", "83e62e7c499bf1211424b0a38082df3efd80de66f9f2a16a094d8f971f8f6f03"),
    ("test/all_data_33_niid_05_keep_0_test_9.json", "b5eec2f3d839cf2934a9581aaaee94b40bf368fcdf1c918b9107fd67f1fde519"),
    ("test/all_data_34_niid_05_keep_0_test_9.json", "1ccf595d2c2442141ba555cba762d4c72d76d8e7341314e45e7830d196013fe0"),
    ("test/all_data_3_niid_05_keep_0_test_9.json", "99f701d9394a8516a4cb86eb96e3565bf8a405e490ae00487f882419ca86d6fc"),
    ("test/all_data_4_niid_05_keep_0_test_9.json", "2a4c61b74d2efd1dcd6b7eaa6a970ca10da82f6b1f3b419839c6ae314e85b14b"),
    ("test/all_data_5_niid_05_keep_0_test_9.json", "63b48265b8ccae669c770ce7846976dbd62e7b848e9c36563d93a364f0109607"),
    ("test/all_data_6_niid_05_keep_0_test_9.json", "a7ece8a2f53b40671c5a58150d6b7f846bb44003a9b4b8c4628a1973387607ca"),
    ("test/all_data_7_niid_05_keep_0_test_9.json", "a2094cd1048f01072f4a9b8cbff2bd1f69c4e24c03f871e0b23796c19f2f8c97"),
    ("test/all_data_8_niid_05_keep_0_test_9.json", "3939db329891ce9a9b1def83e55af6193eabaa11672344d8129d4a9ab6300e86"),
    ("test/all_data_9_niid_05_keep_0_test_9.json", "09707e362bd5cf273c1948170eb0e3aed4264659b9b7efbb4d7bd0fd38be4b12"),
)

LEAF_FEMNIST_SF005 = register(
    Dataset(
        id="leaf_femnist_sf005",
        title="FEMNIST 105-writer SAMPLE (LEAF niid sf=0.05 shards, 20 of them; 14,708 train / 1,685 test, 62 "
        "classes) - not the full FEMNIST",
        files=tuple(RemoteFile(name, SAMPLE_SOURCE, sha) for name, sha in _SF005),
        citation=_LEAF_CITATION + "; data: " + _NIST_CITATION,
        licence="NIST SD19: NIST SRD terms (https://www.nist.gov/srd/nist-special-database-19); LEAF code BSD-2-Clause",
    )
)

_NIST = "https://s3.amazonaws.com/nist-srd/SD19/"
LEAF_FEMNIST = register(
    Dataset(
        id="leaf_femnist",
        title="FEMNIST, full (NIST SD19 by_class/by_write archives; json shards come from LEAF preprocessing)",
        files=(
            # GAP: not pinned. NIST publishes no sha256 and no networked machine has fetched these for fedrepro
            # (~4 GB + ~0.5 GB). Unverified hint: third-party loaders list MD5 79572b1694a8506f2b722c7be54130c4
            # (by_class.zip) and a29f21babf83db0bb28a2f77b2b456cb (by_write.zip). Verified by content check until
            # pinned: `python -m fedrepro data fetch leaf_femnist` prints the line that pins the sha256 it got.
            RemoteFile("by_class.zip", _NIST + "by_class.zip", None, content_check=check_nist_by_class),
            RemoteFile("by_write.zip", _NIST + "by_write.zip", None, content_check=check_nist_by_write),
        ),
        citation=_LEAF_CITATION + "; data: " + _NIST_CITATION,
        licence="NIST SD19: NIST SRD terms (https://www.nist.gov/srd/nist-special-database-19); LEAF code BSD-2-Clause",
    )
)

REDDIT = register(
    Dataset(
        id="reddit",
        title="LEAF Reddit, subsampled (pushshift.io Dec 2017 comments, tokenized; train/val/test json)",
        files=(
            # GAP: not pinned. LEAF hosts the preprocessed data only on Google Drive (data/reddit/README.md) and
            # publishes no checksum; no networked machine has fetched it for fedrepro (verified by content check until
            # pinned; the first fetch prints the pinning line). Landing page:
            # https://drive.google.com/file/d/1ISzp69JmaIJqBpQCX-JJ8-kVyUns8M7o/view
            RemoteFile(
                REDDIT_ARCHIVE,
                "https://drive.google.com/uc?id=1ISzp69JmaIJqBpQCX-JJ8-kVyUns8M7o&export=download",
                None,
                content_check=check_reddit_archive,
            ),
        ),
        citation=_LEAF_CITATION + "; data: pushshift.io Reddit comments, December 2017",
        licence="Reddit content; LEAF code BSD-2-Clause",
    )
)
