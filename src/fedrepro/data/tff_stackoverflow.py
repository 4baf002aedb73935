"""TFF federated Stack Overflow, read without TensorFlow: the h5 and sqlite releases and the word / tag counts.

Catalog ids (files on storage.googleapis.com/tff-datasets-public/):
  * ``tff_stackoverflow``: ``stackoverflow.tar.bz2`` (h5 release of older TFF versions) -> ``stackoverflow_train.h5``,
    ``stackoverflow_held_out.h5``, ``stackoverflow_test.h5``. Train: 342,477 users / 135,818,730 examples;
    held-out: 38,758 / 16,491,230; test: 204,088 / 16,586,035 (TFF docstring).
  * ``tff_stackoverflow_counts``: ``stackoverflow.word_count.tar.bz2`` -> ``stackoverflow.word_count`` (one
    ``<word> <count>`` per line, most frequent first) and ``stackoverflow.tag_count.tar.bz2`` ->
    ``stackoverflow.tag_count`` (a JSON object tag -> count). Needed by both releases for the vocabularies.
  * ``tff_stackoverflow_sqlite``: ``stackoverflow.sqlite.lzma`` -> ``stackoverflow.sqlite``: the release TFF reads
    since Feb 2021 (TFF commit 7bb20162f) and the one the experiments name (config/ppsgd.yaml); the h5 release is
    the alternative.

h5 layout (TFF ``hdf5_client_data.py``): ``examples/<client id>/`` with one dataset per feature, all of length n:
``creation_date``, ``tags`` (``|``-separated), ``title``, ``tokens`` (space-separated), ``type`` ('question' or
'answer') as strings and ``score`` (int64). The string storage (variable-length or fixed-length bytes) is not
documented upstream; every h5py string type is accepted and decoded as UTF-8.

sqlite layout (TFF ``sql_client_data.py``; read by :mod:`fedrepro.data.tff_sqlite`): table
``examples(split_name, client_id, serialized_example_proto)`` and table ``client_metadata(client_id, split_name,
num_examples)``; split names 'train', 'heldout', 'test'. Each ``serialized_example_proto`` is a
``tf.train.Example`` whose features are parsed by TFF as ``FixedLenFeature(shape=())``: the same six keys, strings
as ``bytes_list`` and ``score`` as ``int64_list``. :func:`fedrepro.data.tf_example.parse_tf_example` decodes that
message. Both readers return the same :class:`StackOverflowClient` (clients sorted, a client's examples in stored
order: h5 dataset order, sqlite rowid order, the order TFF's query returns); whether the two published releases
store each user's examples in the same order has not been checked here (no network).

Checksums: the three ``.tar.bz2`` sha256 values are the ``file_hash=..., hash_algorithm='sha256'`` passed to
``tf.keras.utils.get_file`` in TFF's ``tensorflow_federated/python/simulation/datasets/stackoverflow.py``
(``load_data``, ``load_word_counts``, ``load_tag_counts``). TFF downloads the ``.sqlite.lzma`` file through
``download.get_compressed_file`` without any hash and none is published, so that file is checked by content
(:func:`check_sqlite_release`): TFF's schema, the users and examples per split that TFF's ``load_data``
docstring states (:data:`UPSTREAM_SIZES`; the user counts are also what TFF's ``stackoverflow_test.py``
``test_load_from_gcs`` asserts of this file), and the first example of each split decodes.

The text these readers return is split into words and tags by :mod:`fedrepro.data.tokenizer`; PPSGD's
tag-prediction features are built from them in :mod:`fedrepro.papers.ppsgd.stackoverflow_tags`.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.data import tff_sqlite
from fedrepro.data.archive import extract_members
from fedrepro.data.catalog import Dataset, RemoteFile, register
from fedrepro.data.tf_example import TfExampleError, parse_tf_example
from fedrepro.data.tff_h5 import TffH5, decode_strings
from fedrepro.errors import DataError

BASE_URL = "https://storage.googleapis.com/tff-datasets-public/"
H5_ID = "tff_stackoverflow"
COUNTS_ID = "tff_stackoverflow_counts"
SQLITE_ID = "tff_stackoverflow_sqlite"

ARCHIVE = "stackoverflow.tar.bz2"
H5_MEMBERS = {
    "train": "stackoverflow_train.h5",
    "held_out": "stackoverflow_held_out.h5",
    "test": "stackoverflow_test.h5",
}
WORD_COUNT_ARCHIVE, WORD_COUNT_FILE = "stackoverflow.word_count.tar.bz2", "stackoverflow.word_count"
TAG_COUNT_ARCHIVE, TAG_COUNT_FILE = "stackoverflow.tag_count.tar.bz2", "stackoverflow.tag_count"
SQLITE_ARCHIVE, SQLITE_FILE = "stackoverflow.sqlite.lzma", "stackoverflow.sqlite"
SQL_SPLIT = {"train": "train", "held_out": "heldout", "test": "test"}
#: TFF stackoverflow.load_data docstring: (users, examples) per split
UPSTREAM_SIZES = {"train": (342_477, 135_818_730), "held_out": (38_758, 16_491_230), "test": (204_088, 16_586_035)}
#: a bound far above the decompressed file's real size (not measured here: 168,895,995 examples of a post's text
#: and metadata), against a decompression bomb
SQLITE_MAX_BYTES = 1 << 40

STRING_FEATURES = ("creation_date", "tags", "title", "tokens", "type")
INT_FEATURES = ("score",)
FEATURES = tuple(sorted(STRING_FEATURES + INT_FEATURES))

_CITATION = (
    "Stack Overflow Data (kaggle.com/stackoverflow/stackoverflow, CC BY-SA 3.0), federated by user in "
    "TensorFlow Federated, tff.simulation.datasets.stackoverflow"
)
_LICENCE = "CC BY-SA 3.0 (Stack Overflow content); TFF code Apache-2.0"

register(
    Dataset(
        id=H5_ID,
        title="TFF federated Stack Overflow (h5 release: train / held_out / test)",
        files=(
            RemoteFile(
                name=ARCHIVE,
                url=BASE_URL + ARCHIVE,
                # TFF simulation/datasets/stackoverflow.py load_data (h5 release): file_hash, hash_algorithm='sha256'
                sha256="99eca2f8b8327a09e5fc123979df2d237acbc5e52322f6d86bf523ee47b961a2",
            ),
        ),
        citation=_CITATION,
        licence=_LICENCE,
    )
)

register(
    Dataset(
        id=COUNTS_ID,
        title="TFF federated Stack Overflow word and tag counts (vocabularies)",
        files=(
            RemoteFile(
                name=WORD_COUNT_ARCHIVE,
                url=BASE_URL + WORD_COUNT_ARCHIVE,
                # TFF simulation/datasets/stackoverflow.py load_word_counts: file_hash, hash_algorithm='sha256'
                sha256="1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c",
            ),
            RemoteFile(
                name=TAG_COUNT_ARCHIVE,
                url=BASE_URL + TAG_COUNT_ARCHIVE,
                # TFF simulation/datasets/stackoverflow.py load_tag_counts: file_hash, hash_algorithm='sha256'
                sha256="6fe281cec490d9384a290d560072438e7e2b377bbb823876ce7bd6f82696772d",
            ),
        ),
        citation=_CITATION,
        licence=_LICENCE,
    )
)


# ----------------------------------------------------------------------------------------------------------------
# examples
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackOverflowClient:
    """One user's examples (stored order); strings decoded as UTF-8."""

    client_id: str
    tokens: list[str]
    title: list[str]
    tags: list[str]
    type: list[str]
    creation_date: list[str]
    score: np.ndarray  # int64 (n,)

    def __len__(self) -> int:
        return len(self.tokens)


def _client_from_columns(client_id: str, cols: Mapping[str, object], where: str) -> StackOverflowClient:
    missing = [f for f in FEATURES if f not in cols]
    if missing:
        raise DataError(f"{where}: client {client_id!r} lacks feature(s) {', '.join(missing)}")
    return StackOverflowClient(
        client_id=client_id,
        tokens=list(cols["tokens"]),
        title=list(cols["title"]),
        tags=list(cols["tags"]),
        type=list(cols["type"]),
        creation_date=list(cols["creation_date"]),
        score=np.asarray(cols["score"], dtype=np.int64).reshape(-1),
    )


class StackOverflowH5(TffH5):
    """One split of the h5 release; clients read one at a time."""

    FEATURES = {**{f: "string" for f in STRING_FEATURES}, "score": "iu"}

    def client(self, client_id: str, limit: int | None = None) -> StackOverflowClient:
        """The client's examples (the first ``limit`` in stored order, if given)."""
        raw = self.raw(client_id, FEATURES, limit=limit)
        cols: dict[str, object] = {f: decode_strings(raw[f]) for f in STRING_FEATURES}
        cols["score"] = raw["score"]
        return _client_from_columns(client_id, cols, str(self.path))


def _stackoverflow_example(buf: bytes) -> dict[str, object]:
    """One example with TFF's parse spec: FixedLenFeature(shape=()) for each of the six features."""
    ex = parse_tf_example(buf)
    row: dict[str, object] = {}
    for name in FEATURES:
        vals = ex.get(name)
        if vals is None or len(vals) != 1:
            raise TfExampleError(
                f"feature {name!r}: expected exactly one value, got {'none' if vals is None else len(vals)}"
            )
        v = vals[0]
        if name in INT_FEATURES:
            if not isinstance(v, int):
                raise TfExampleError(f"feature {name!r}: expected an int64_list")
            row[name] = v
        else:
            if not isinstance(v, bytes):
                raise TfExampleError(f"feature {name!r}: expected a bytes_list")
            try:
                row[name] = v.decode("utf-8")
            except UnicodeDecodeError:
                raise TfExampleError(f"feature {name!r}: {v[:40]!r} is not UTF-8") from None
    return row


class StackOverflowSqlite(tff_sqlite.SqliteSplit):
    """One split of the sqlite release; same ``client`` API as :class:`StackOverflowH5`."""

    def __init__(self, path: str | Path, split: str = "train"):
        if split not in SQL_SPLIT:
            raise ValueError(f"split must be one of {tuple(SQL_SPLIT)}, got {split!r}")
        todo = f"delete it and fetch it again (`{tff_sqlite.fetch_hint(SQLITE_ID)}`)"
        super().__init__(path, SQL_SPLIT[split], todo)
        self.split = split

    def client(self, client_id: str, limit: int | None = None) -> StackOverflowClient:
        """The client's examples (the first ``limit`` in stored order, if given)."""
        cols: dict[str, list] = {f: [] for f in FEATURES}
        for blob in self.records(client_id, limit):
            try:
                row = _stackoverflow_example(blob)
            except TfExampleError as exc:
                raise DataError(
                    f"{self.path}: client {client_id!r}: bad tf.train.Example: {exc}; {self.todo}"
                ) from None
            for f in FEATURES:
                cols[f].append(row[f])
        return _client_from_columns(client_id, cols, str(self.path))


def check_sqlite_release(path: str | Path) -> None:
    """Content check of ``stackoverflow.sqlite.lzma`` (or the decompressed ``stackoverflow.sqlite``): TFF's schema,
    every split's users and examples as TFF states them, and the first example of each split decodes with TFF's
    parse spec. The ``.lzma`` file is decompressed beside itself first (once; the readers reuse it). One DataError
    line naming the file otherwise."""
    path = Path(path)
    db = path
    if path.name.endswith(".lzma"):
        db = tff_sqlite.decompress(path, SQLITE_FILE, dataset_id=SQLITE_ID, max_bytes=SQLITE_MAX_BYTES)
    expected = {SQL_SPLIT[s]: n for s, n in UPSTREAM_SIZES.items()}
    tff_sqlite.check_release(
        db,
        expected,
        label=str(path),
        dataset_id=SQLITE_ID,
        decode=_stackoverflow_example,
        source="TFF simulation/datasets/stackoverflow.py, load_data docstring",
    )


register(
    Dataset(
        id=SQLITE_ID,
        title="TFF federated Stack Overflow (sqlite release: train / heldout / test)",
        files=(
            RemoteFile(
                name=SQLITE_ARCHIVE,
                url=BASE_URL + SQLITE_ARCHIVE,
                # TFF simulation/datasets/stackoverflow.py load_data: download.get_compressed_file takes no hash
                # and none is published; verified by content instead
                sha256=None,
                content_check=check_sqlite_release,
            ),
        ),
        citation=_CITATION,
        licence=_LICENCE,
    )
)


# ----------------------------------------------------------------------------------------------------------------
# locating / opening
# ----------------------------------------------------------------------------------------------------------------


def _as_paths(source: str | Path | Iterable[str | Path]) -> list[Path]:
    return [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]


def open_split(source: str | Path | Iterable[str | Path], split: str = "train"):
    """A split ('train', 'held_out' or 'test') from the catalog files of ``tff_stackoverflow`` (the h5 archive or
    an extracted ``stackoverflow_<split>.h5``) or ``tff_stackoverflow_sqlite`` (the ``.sqlite.lzma`` file or the
    decompressed ``stackoverflow.sqlite``). Archives are unpacked beside themselves (guarded; once)."""
    if split not in H5_MEMBERS:
        raise ValueError(f"split must be one of {tuple(H5_MEMBERS)}, got {split!r}")
    paths = _as_paths(source)
    by_name = {p.name: p for p in paths}
    if SQLITE_ARCHIVE in by_name:
        a = by_name[SQLITE_ARCHIVE]
        return StackOverflowSqlite(
            tff_sqlite.decompress(a, SQLITE_FILE, dataset_id=SQLITE_ID, max_bytes=SQLITE_MAX_BYTES), split
        )
    if SQLITE_FILE in by_name:
        return StackOverflowSqlite(by_name[SQLITE_FILE], split)
    if ARCHIVE in by_name:
        a = by_name[ARCHIVE]
        out = extract_members(a, a.parent, H5_MEMBERS.values())
        return StackOverflowH5(out[H5_MEMBERS[split]])
    for p in paths:
        if p.name in H5_MEMBERS.values():
            target = p.parent / H5_MEMBERS[split]
            if not target.is_file():
                raise DataError(
                    f"TFF Stack Overflow {split} file {target} not found (extract {ARCHIVE} there, or "
                    f"fetch it: `{tff_sqlite.fetch_hint(H5_ID)}`)"
                )
            return StackOverflowH5(target)
    raise DataError(
        f"no TFF Stack Overflow file among {', '.join(map(str, paths)) or 'the given files'} (expected "
        f"{SQLITE_ARCHIVE}, {ARCHIVE} or their extracted files): fetch the release with "
        f"`{tff_sqlite.fetch_hint(SQLITE_ID)}` (or the h5 one, `{tff_sqlite.fetch_hint(H5_ID)}`)"
    )


def load_data(source: str | Path | Iterable[str | Path]):
    """(train, held_out, test), like ``tff.simulation.datasets.stackoverflow.load_data``; close them when done."""
    opened = []
    try:
        for s in ("train", "held_out", "test"):
            opened.append(open_split(source, s))
    except Exception:
        for o in opened:
            o.close()
        raise
    return tuple(opened)


def _count_file(source: str | Path | Iterable[str | Path], archive: str, member: str) -> Path:
    for p in _as_paths(source):
        if p.name == archive:
            return extract_members(p, p.parent, [member])[member]
        if p.name == member:
            return p
    raise DataError(f"no {archive} (or extracted {member}) among the given files")


def load_word_counts(
    source: str | Path | Iterable[str | Path], vocab_size: int | None = None
) -> collections.OrderedDict[str, int]:
    """Word -> count in file order (most frequent first), as TFF's ``load_word_counts``: each line is split on
    whitespace into exactly (word, count); reading stops after ``vocab_size`` words."""
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size <= 0):
        raise ValueError(f"vocab_size must be a positive int or None, got {vocab_size!r}")
    path = _count_file(source, WORD_COUNT_ARCHIVE, WORD_COUNT_FILE)
    counts: collections.OrderedDict[str, int] = collections.OrderedDict()
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if len(parts) != 2:
                raise DataError(f"{path}:{lineno}: expected '<word> <count>', got {line.rstrip()!r}")
            try:
                counts[parts[0]] = int(parts[1])
            except ValueError:
                raise DataError(f"{path}:{lineno}: count {parts[1]!r} is not an integer") from None
            if vocab_size is not None and len(counts) >= vocab_size:
                break
    return counts


def load_tag_counts(source: str | Path | Iterable[str | Path]) -> collections.OrderedDict[str, int]:
    """Tag -> count sorted by decreasing count (stable: ties keep the JSON file's order), as TFF's
    ``load_tag_counts``."""
    path = _count_file(source, TAG_COUNT_ARCHIVE, TAG_COUNT_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a JSON tag-count file: {exc}") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object tag -> count")
    return collections.OrderedDict(sorted(raw.items(), key=lambda item: item[1], reverse=True))
