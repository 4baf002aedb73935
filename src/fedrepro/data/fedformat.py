"""On-disk format of a partitioned federated dataset, and its loader.

A partitioned dataset is one directory::

    features.npy     every used sample's features, one contiguous array (npy format, never pickled), rows ordered
                     by split (train, then test), then client id, then index in the source split; so each
                     client's samples of a split are one contiguous block of rows
    index.parquet    one row per features row: row, client_id, split ("train"/"test"), label, source_index
                     (position in the parser's split array), [coarse_label], [writer]
    manifest.json    format + version, fedrepro version, source dataset id and the sha256 of its input files,
                     partition scheme + parameters + seed, feature dtype/shape, sha256 and size of the two data
                     files, per split the row range, per client its train/test counts, class sets and
                     scheme-specific metadata (writers, opt-out flag, assigned classes)

Every use verifies the two data files against the sha256 the manifest records, cheaply (fedrepro.data.stamps): the
partition's ``.verified.json`` holds their size and mtime when they last matched, and a file is hashed again only
when these changed; so one flipped byte in ``features.npy`` stops the next run or plot that reads it, naming the
file. A partition written before the state existed is hashed in full on its first use, which records it.

Writing is atomic: everything goes into a hidden temporary directory beside the target (``.<name>.tmp-<pid>-*``),
the manifest last, and the directory is renamed into place; an exception removes the temporary directory, and a
killed writer leaves only a hidden ``.tmp-`` directory, never a directory with the final name, which the next write
of the same target removes. :func:`load`
refuses a directory without a manifest or whose files do not match it.

Loading memory-maps ``features.npy`` (``mmap_mode="r"``, ``allow_pickle=False``) and reads the small index into
numpy arrays; :meth:`FederatedDataset.client_arrays` returns views (no copy) of one client's block, and
:meth:`FederatedDataset.offsets` (CSR offsets), :meth:`~FederatedDataset.padded_rows` and
:meth:`~FederatedDataset.sample_rows` serve vectorized training over many clients.

This module is imported by the dataset catalog: it keeps pyarrow imports inside functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedrepro.data.partition import SPLITS, LabelSet, Partition, as_labelset
from fedrepro.data.stamps import STATE, file_stat, read_state, sha256_of, unchanged, write_state
from fedrepro.errors import DataError, naming_a_full_disk

FORMAT = "fedrepro.fedformat"
FORMAT_VERSION = 1
FEATURES = "features.npy"
INDEX = "index.parquet"
MANIFEST = "manifest.json"
CHUNK_BYTES = 64 << 20


# --------------------------------------------------------------------------------------------------- helpers


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.str_):
        return str(obj)
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)  # "inf" (e.g. Dirichlet alpha); JSON has no infinity
    return obj


def source_info(dataset_id: str, files: Iterable[str | Path] = ()) -> dict:
    """The ``source`` entry of a manifest: dataset id and the sha256 of each input file (by file name)."""
    return {"dataset": dataset_id, "files": {Path(f).name: sha256_of(Path(f)) for f in files}}


def _fedrepro_version() -> str:
    import fedrepro

    return fedrepro.__version__


# ----------------------------------------------------------------------------------------------------- write


@dataclass(frozen=True)
class _Split:
    """One split as :func:`write` stores it: its inputs, and ``order``, its source rows in file order."""

    name: str
    features: np.ndarray
    labels: LabelSet
    assign: np.ndarray  # client of each source row (-1: none)
    order: np.ndarray


def _order(assign: np.ndarray, keep_unassigned: bool) -> np.ndarray:
    """Source indices of one split in file order: by client id (unassigned, -1, last), then source index."""
    idx = np.arange(len(assign)) if keep_unassigned else np.flatnonzero(assign >= 0)
    key = np.where(assign[idx] >= 0, assign[idx], np.iinfo(np.int64).max)
    return idx[np.argsort(key, kind="stable")]


def _classes_of(client: np.ndarray, labels: np.ndarray, n_clients: int) -> list[list[int]]:
    keep = client >= 0
    pairs = np.unique(np.stack([client[keep], labels[keep]]), axis=1) if keep.any() else np.zeros((2, 0), int)
    bounds = np.searchsorted(pairs[0], np.arange(n_clients + 1))
    return [pairs[1, bounds[c] : bounds[c + 1]].tolist() for c in range(n_clients)]


def _validated_splits(
    partition: Partition,
    train_features: np.ndarray,
    train: LabelSet | np.ndarray,
    test_features: np.ndarray | None,
    test: LabelSet | np.ndarray | None,
    keep_unassigned: bool,
) -> list[_Split]:
    """The splits to store, in file order (train, then test if given), after checking that they fit together."""
    train, test = as_labelset(train), as_labelset(test)
    given = [("train", train_features, train, partition.train_client)]
    if test is not None or test_features is not None:
        if test is None or test_features is None:
            raise ValueError("test_features and test must be given together")
        given.append(("test", test_features, test, partition.test_client))
    ref = np.asarray(train_features[:0])
    for name, feats, labels, assign in given:
        if len(feats) != len(labels) or len(labels) != len(assign):
            raise ValueError(f"{name}: {len(feats)} feature rows, {len(labels)} labels, {len(assign)} assignments")
        if feats.dtype != ref.dtype or feats.shape[1:] != ref.shape[1:]:
            raise ValueError(
                f"{name} features {feats.dtype}{feats.shape[1:]} differ from train {ref.dtype}{ref.shape[1:]}"
            )
    if ref.dtype.hasobject:
        raise ValueError("features must not be an object array (the format never pickles)")
    return [
        _Split(name, feats, labels, assign, _order(assign, keep_unassigned)) for name, feats, labels, assign in given
    ]


def _write_features(path: Path, splits: list[_Split]) -> None:
    """Every stored row's features, gathered split by split in file order, in chunks, into one preallocated .npy."""
    first = splits[0].features
    n_rows = sum(len(s.order) for s in splits)
    feat = np.lib.format.open_memmap(path, mode="w+", dtype=first.dtype, shape=(n_rows, *first.shape[1:]))
    # reserve the file's blocks now: a memory map over a sparse file that the disk cannot fill dies of SIGBUS at the
    # first write past the free space; allocated, a full disk is an OSError (ENOSPC) here, which the caller names
    if hasattr(os, "posix_fallocate"):
        with open(path, "r+b") as fh:
            os.posix_fallocate(fh.fileno(), 0, os.fstat(fh.fileno()).st_size)
    row_bytes = max(1, int(np.prod(first.shape[1:], dtype=np.int64)) * first.dtype.itemsize)
    chunk = max(1, CHUNK_BYTES // row_bytes)
    start = 0
    for s in splits:
        for a in range(0, len(s.order), chunk):
            sel = s.order[a : a + chunk]
            feat[start + a : start + a + len(sel)] = s.features[sel]
        start += len(s.order)
    feat.flush()
    del feat


def _write_index(path: Path, splits: list[_Split]) -> list[str]:
    """The index (one row per features row; coarse labels and writers only when every split has them) as parquet;
    returns its column names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def column(values) -> np.ndarray:
        return np.concatenate([values(s) for s in splits])

    table = {
        "row": pa.array(np.arange(sum(len(s.order) for s in splits), dtype=np.int64)),
        "client_id": pa.array(column(lambda s: s.assign[s.order]).astype(np.int64)),
        "split": pa.DictionaryArray.from_arrays(
            pa.array(column(lambda s: np.full(len(s.order), SPLITS.index(s.name), dtype=np.int8))),
            pa.array(list(SPLITS)),
        ),
        "label": pa.array(column(lambda s: s.labels.labels[s.order]).astype(np.int64)),
        "source_index": pa.array(column(lambda s: s.order.astype(np.int64))),
    }
    if all(s.labels.coarse is not None for s in splits):
        table["coarse_label"] = pa.array(column(lambda s: s.labels.coarse[s.order]).astype(np.int64))
    if all(s.labels.groups is not None for s in splits):
        w = column(lambda s: s.labels.groups[s.order])
        table["writer"] = pa.array(w.astype(str) if w.dtype.kind in "OUS" else w)
    pq.write_table(pa.table(table), path)
    return list(table)


def _clients_entry(partition: Partition, splits: list[_Split]) -> list[dict[str, Any]]:
    """Per client: its count and class set per split, and the scheme's metadata."""
    counts = {s.name: np.bincount(s.assign[s.assign >= 0], minlength=partition.n_clients) for s in splits}
    classes = {s.name: _classes_of(s.assign, s.labels.labels, partition.n_clients) for s in splits}
    clients = []
    for c in range(partition.n_clients):
        entry: dict[str, Any] = {"id": c}
        for s in splits:
            entry[s.name] = int(counts[s.name][c])
            entry[f"{s.name}_classes"] = classes[s.name][c]
        for key, arr in partition.client_meta.items():
            entry[key] = arr[c]
        clients.append(entry)
    return clients


def _manifest(
    directory: Path,
    partition: Partition,
    splits: list[_Split],
    index_columns: list[str],
    *,
    source: Mapping[str, Any] | None,
    keep_unassigned: bool,
    n_classes: int | None,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The manifest of the data files already written in ``directory`` (see the module docstring)."""
    split_rows, offset = {}, 0
    for s in splits:
        split_rows[s.name] = {
            "start": offset,
            "rows": len(s.order),
            "assigned": int((s.assign[s.order] >= 0).sum()),
            "source_rows": len(s.assign),
        }
        offset += len(s.order)
    if n_classes is None:
        n_classes = max(int(s.labels.labels.max(initial=-1)) for s in splits) + 1
    has_coarse = all(s.labels.coarse is not None for s in splits)
    first = splits[0].features
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fedrepro_version": _fedrepro_version(),
        "source": dict(source) if source is not None else None,
        "partition": {
            "scheme": partition.scheme,
            "params": partition.params,
            "seed": partition.params.get("seed"),
            "n_clients": partition.n_clients,
            "client_meta": sorted(partition.client_meta),
        },
        "n_clients": partition.n_clients,
        "n_classes": n_classes,
        "n_coarse_classes": (max(int(s.labels.coarse.max(initial=-1)) for s in splits) + 1 if has_coarse else None),
        "features": {
            "file": FEATURES,
            "dtype": first.dtype.str,
            "shape": [offset, *first.shape[1:]],
            "bytes": (directory / FEATURES).stat().st_size,
            "sha256": sha256_of(directory / FEATURES),
        },
        "index": {
            "file": INDEX,
            "columns": index_columns,
            "bytes": (directory / INDEX).stat().st_size,
            "sha256": sha256_of(directory / INDEX),
        },
        "splits": split_rows,
        "keep_unassigned": keep_unassigned,
        "clients": _clients_entry(partition, splits),
        "extra": dict(extra) if extra else {},
    }


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """The manifest as sorted, indented JSON, flushed to disk (it is the mark of a complete dataset)."""
    text = json.dumps(_jsonable(manifest), indent=1, sort_keys=True) + "\n"
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _stale_temporaries(out_dir: Path) -> list[Path]:
    """The hidden directories beside ``out_dir`` that writes of it made and that no running writer owns:
    ``.<name>.tmp-<pid>-*`` (the data being written) and ``.<name>.old-<pid>-*`` (a replaced directory on its way
    out) of a process that has ended, and those without an id (made before ids were recorded)."""
    out = []
    for p in out_dir.parent.iterdir():
        for prefix in (f".{out_dir.name}.tmp-", f".{out_dir.name}.old-"):
            if p.name.startswith(prefix) and p.is_dir():
                pid = p.name[len(prefix) :].split("-", 1)[0]
                if not (pid.isdigit() and _running(int(pid))):
                    out.append(p)
    return out


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # running, as another user
        return True
    return True


@contextlib.contextmanager
def _atomic_directory(out_dir: Path, overwrite: bool):
    """Yield a hidden temporary directory beside ``out_dir``; when the block ends, rename it to ``out_dir``
    (replacing an existing one only with ``overwrite``). An exception removes it and leaves ``out_dir`` as it was; a
    full disk is a ResourceError naming ``out_dir``. A writer killed outright (kill -9, power loss) cannot clean up:
    the next write of ``out_dir`` removes the temporary directories of writers no longer running."""
    from fedrepro.files import honour_umask

    with naming_a_full_disk(out_dir):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        for stale in _stale_temporaries(out_dir):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-{os.getpid()}-", dir=out_dir.parent))
        try:
            honour_umask(tmp)  # the final directory gets the umask's mode (0755), not mkdtemp's 0700
            yield tmp
            if out_dir.exists():
                if not overwrite:
                    raise FileExistsError(f"{out_dir} exists (pass overwrite=True to replace it)")
                trash = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-{os.getpid()}-", dir=out_dir.parent))
                os.replace(out_dir, trash / "old")
                os.replace(tmp, out_dir)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                os.replace(tmp, out_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def write(
    out_dir: str | Path,
    partition: Partition,
    train_features: np.ndarray,
    train: LabelSet | np.ndarray,
    test_features: np.ndarray | None = None,
    test: LabelSet | np.ndarray | None = None,
    *,
    source: Mapping[str, Any] | None = None,
    keep_unassigned: bool = False,
    overwrite: bool = False,
    n_classes: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a partitioned dataset to ``out_dir`` atomically and return its path.

    ``train_features``/``test_features``: arrays whose first axis is the sample (any numeric dtype, same trailing
    shape and dtype for both; may be memory-mapped). ``train``/``test``: labels (+ groups, coarse) as given to the
    partitioner. ``source``: dataset id and input-file sha256 (:func:`source_info`, or the verified record of
    fedrepro.data.prepare). ``keep_unassigned``: also
    store samples held by no client (client_id -1, after each split's clients). ``extra``: free JSON-able entries
    stored under ``manifest["extra"]``.
    """
    out_dir = Path(out_dir)
    splits = _validated_splits(partition, train_features, train, test_features, test, keep_unassigned)
    with _atomic_directory(out_dir, overwrite) as tmp:
        _write_features(tmp / FEATURES, splits)
        index_columns = _write_index(tmp / INDEX, splits)
        manifest = _manifest(
            tmp,
            partition,
            splits,
            index_columns,
            source=source,
            keep_unassigned=keep_unassigned,
            n_classes=n_classes,
            extra=extra,
        )
        # the files as just hashed: the first use checks them cheaply (the rename keeps their mtimes)
        files = [manifest[k] for k in ("features", "index")]
        write_state(tmp / STATE, {e["file"]: {"sha256": e["sha256"], **file_stat(tmp / e["file"])} for e in files})
        _write_manifest(tmp / MANIFEST, manifest)
    return out_dir


# ------------------------------------------------------------------------------------------------------ load


@dataclass
class FederatedDataset:
    """A loaded partitioned dataset: memory-mapped features and the (small) index as numpy arrays.

    Rows of a client's split form one contiguous block ``[offsets(split)[c], offsets(split)[c+1])``.
    """

    path: Path
    manifest: dict
    features: np.ndarray  # np.memmap, all rows
    labels: np.ndarray  # int64 per row
    client_id: np.ndarray  # int64 per row (-1: unassigned, only with keep_unassigned)
    split: np.ndarray  # int8 per row: 0 train, 1 test
    source_index: np.ndarray  # int64 per row: index in the parser's split array
    coarse_labels: np.ndarray | None = None
    writer: np.ndarray | None = None
    _offsets: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def n_clients(self) -> int:
        return int(self.manifest["n_clients"])

    @property
    def n_classes(self) -> int:
        return int(self.manifest["n_classes"])

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(s for s in SPLITS if s in self.manifest["splits"])

    def offsets(self, split: str = "train") -> np.ndarray:
        """CSR offsets (length n_clients+1) into the rows: client c's block is ``rows[o[c]:o[c+1]]``."""
        if split not in self._offsets:
            if split not in self.manifest["splits"]:
                raise DataError(
                    f"{self.path}: no {split!r} split (its dataset has none); an experiment that evaluates on the "
                    f"clients' {split} data needs a partition that has one"
                )
            counts = np.array([c.get(split, 0) for c in self.manifest["clients"]], dtype=np.int64)
            off = np.empty(self.n_clients + 1, dtype=np.int64)
            off[0] = self.manifest["splits"][split]["start"]
            np.cumsum(counts, out=off[1:])
            off[1:] += off[0]
            self._offsets[split] = off
        return self._offsets[split]

    def counts(self, split: str = "train") -> np.ndarray:
        return np.diff(self.offsets(split))

    def client_rows(self, client: int, split: str = "train") -> slice:
        if not 0 <= client < self.n_clients:
            raise IndexError(f"client {client} not in [0, {self.n_clients})")
        o = self.offsets(split)
        return slice(int(o[client]), int(o[client + 1]))

    def client_arrays(self, client: int, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """(features, labels) of one client's split: views into the memmap and the label array (no copy)."""
        s = self.client_rows(client, split)
        return self.features[s], self.labels[s]

    def split_arrays(self, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """All assigned rows of a split (e.g. FedHDP's server test set = every client's test rows)."""
        o = self.offsets(split)
        s = slice(int(o[0]), int(o[-1]))
        return self.features[s], self.labels[s]

    def class_counts(self, split: str = "train", coarse: bool = False) -> np.ndarray:
        """(n_clients, n_classes) sample counts per client and class (or superclass with ``coarse``)."""
        o = self.offsets(split)
        lab = (self.coarse_labels if coarse else self.labels)[o[0] : o[-1]]
        n_cls = int(self.manifest["n_coarse_classes"] if coarse else self.n_classes)
        cid = np.repeat(np.arange(self.n_clients), np.diff(o))
        return np.bincount(cid * n_cls + lab, minlength=self.n_clients * n_cls).reshape(self.n_clients, n_cls)

    def client_meta(self, key: str) -> np.ndarray:
        """Per-client metadata from the manifest (e.g. "opt_out", "writers", "classes", "digit")."""
        return np.array([c[key] for c in self.manifest["clients"]])

    def padded_rows(
        self, split: str = "train", clients: np.ndarray | None = None, pad: int = -1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, mask): ``rows[i, j]`` is the j-th row of ``clients[i]`` (``pad`` beyond its count), ``mask`` marks
        the real entries. Shape (len(clients), max count)."""
        o = self.offsets(split)
        clients = np.arange(self.n_clients) if clients is None else np.asarray(clients, dtype=np.int64)
        start, n = o[clients], o[clients + 1] - o[clients]
        width = int(n.max(initial=0))
        j = np.arange(width)
        mask = j[None, :] < n[:, None]
        rows = np.where(mask, start[:, None] + j[None, :], pad)
        return rows, mask

    def sample_rows(
        self, clients: np.ndarray, size: int, rng: np.random.Generator, split: str = "train", replace: bool = True
    ) -> np.ndarray:
        """(len(clients), size) rows, ``size`` per client drawn uniformly from the client's rows (vectorized).

        ``replace=False`` draws distinct rows per client and needs ``size`` <= every selected client's count.
        Gather the data with ``features[rows]``, ``labels[rows]`` (one copy of just those rows)."""
        o = self.offsets(split)
        clients = np.asarray(clients, dtype=np.int64)
        start, n = o[clients], o[clients + 1] - o[clients]
        if (n <= 0).any():
            raise ValueError(f"clients {clients[n <= 0].tolist()[:5]} have no {split} samples")
        if replace:
            return start[:, None] + (rng.random((len(clients), size)) * n[:, None]).astype(np.int64)
        if (n < size).any():
            raise ValueError(f"size={size} exceeds the {split} count of some clients (min {int(n.min())})")
        keys = rng.random((len(clients), int(n.max())))
        keys[np.arange(keys.shape[1])[None, :] >= n[:, None]] = np.inf
        if size < keys.shape[1]:
            pick = np.argpartition(keys, size - 1, axis=1)[:, :size]  # the `size` smallest keys: a random subset
        else:
            pick = np.argsort(keys, axis=1)[:, :size]
        return start[:, None] + pick


def manifest_digest(path: str | Path) -> str:
    """sha256 of the partition's manifest.json, which records the sha256 of its data files and of its source's
    files: the partition's identity in a run's provenance (fedrepro.provenance)."""
    return sha256_of(Path(path) / MANIFEST)


PARTITION_FILES = frozenset({"features.npy", "index.parquet", "manifest.json", ".verified.json"})


def replaceable(path: str | Path) -> str | None:
    """Why ``path`` may not be replaced by a new partition (None when it may): a partition is written only to a new
    or empty directory, or over a partition fedrepro made (its manifest says so, and the directory holds nothing
    else). What is there is named, so nothing else is ever removed."""
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_dir():
        return f"{path} exists and is not a directory"
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return None
    others = [e for e in entries if e not in PARTITION_FILES]
    try:
        doc = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        ours = isinstance(doc, dict) and doc.get("format") == FORMAT
    except (OSError, UnicodeDecodeError, ValueError):
        ours = False
    if ours and not others:
        return None
    shown = ", ".join((others or entries)[:5]) + (
        f" and {len(others or entries) - 5} more" if len(others or entries) > 5 else ""
    )
    why = (
        "holds files that are not a partition's"
        if ours
        else "is not a partition fedrepro made (no fedrepro manifest.json)"
    )
    return f"{path} {why}: {shown}; nothing there is replaced: choose a new directory"


def is_complete(path: str | Path) -> bool:
    """Whether ``path`` holds a finished dataset (manifest present and the data files of the sizes it records)."""
    try:
        _check(Path(path), "size")
        return True
    except (DataError, OSError, ValueError, KeyError):
        return False


def _rebuild(path: Path) -> str:
    return f"delete {path} and build it again (`snakemake --cores 2 {path}`)"


# what the loader reads from a manifest: key -> the fields it needs inside that key's mapping
_MANIFEST_FIELDS = {
    "features": ("file", "bytes", "sha256", "shape", "dtype"),
    "index": ("file", "bytes", "sha256"),
    "splits": (),
    "clients": (),
    "n_clients": (),
    "n_classes": (),
}


def _read_manifest(path: Path) -> dict:
    mf = path / MANIFEST
    if not mf.is_file():
        raise DataError(
            f"{path}: not a complete federated dataset (no {MANIFEST}; an interrupted write?); {_rebuild(path)}"
        )
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{mf}: not valid JSON ({exc}); {_rebuild(path)}") from None
    got = manifest if isinstance(manifest, dict) else {}
    if got.get("format") != FORMAT or got.get("format_version") != FORMAT_VERSION:
        raise DataError(
            f"{mf}: format {got.get('format')!r} v{got.get('format_version')}, expected "
            f"{FORMAT} v{FORMAT_VERSION}; {_rebuild(path)}"
        )
    for key, fields in _MANIFEST_FIELDS.items():
        entry = manifest.get(key)
        if entry is None or (fields and not (isinstance(entry, dict) and all(f in entry for f in fields))):
            raise DataError(
                f"{mf}: {key}: missing or incomplete (needs {', '.join(fields) or 'a value'}); {_rebuild(path)}"
            )
    return manifest


def _check(path: Path, verify: str) -> dict:
    """The manifest, after checking the data files' sizes and, unless ``verify`` is "size", their sha256 (every time
    with "full"; with "stamp" only when their size or mtime changed since they last matched)."""
    manifest = _read_manifest(path)
    state = read_state(path / STATE) if verify != "size" else {}
    changed = False
    for key in ("features", "index"):
        entry = manifest[key]
        f = path / entry["file"]
        if not f.is_file() or f.stat().st_size != entry["bytes"]:
            raise DataError(f"{f}: missing or of the wrong size (manifest: {entry['bytes']} bytes); {_rebuild(path)}")
        if verify == "size" or (verify == "stamp" and unchanged(state.get(entry["file"]), f, entry["sha256"])):
            continue
        digest = sha256_of(f)
        if digest != entry["sha256"]:
            raise DataError(
                f"{f}: checksum mismatch: changed after the partition was written (sha256 {digest}, "
                f"manifest {entry['sha256']}); {_rebuild(path)}"
            )
        state[entry["file"]] = {"sha256": digest, **file_stat(f)}
        changed = True
    if changed:
        try:
            write_state(path / STATE, state)
        except OSError:
            pass  # a read-only partition: verified all the same, hashed again on its next use
    return manifest


def check(path: str | Path, verify: bool = False) -> None:
    """Raise a DataError naming the file when ``path`` is not a complete dataset whose data files match its
    manifest: their sha256 when their size or mtime changed since they last matched, or always with ``verify``."""
    _check(Path(path), "full" if verify else "stamp")


def load(path: str | Path, verify: bool = False) -> FederatedDataset:
    """Open a dataset written by :func:`write`: features memory-mapped read-only, index read into numpy.

    The data files are checked against the manifest's sha256 first (:func:`check`): cheaply, by size and mtime
    since they last matched, or in full with ``verify=True`` (reads the whole features file)."""
    import pyarrow.parquet as pq

    path = Path(path)
    manifest = _check(path, "full" if verify else "stamp")
    try:
        features = np.load(path / FEATURES, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path / FEATURES}: not a readable npy file ({exc}); {_rebuild(path)}") from None
    if list(features.shape) != manifest["features"]["shape"] or features.dtype.str != manifest["features"]["dtype"]:
        raise DataError(
            f"{path}: {FEATURES} is {features.dtype.str}{features.shape}, manifest says "
            f"{manifest['features']['dtype']}{tuple(manifest['features']['shape'])}"
        )
    try:
        t = pq.read_table(path / INDEX)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path / INDEX}: not a readable parquet file ({exc}); {_rebuild(path)}") from None
    split_col = t.column("split").combine_chunks()
    if hasattr(split_col, "indices"):
        names = split_col.dictionary.to_pylist()
        codes = np.array([SPLITS.index(n) for n in names], dtype=np.int8)[split_col.indices.to_numpy()]
    else:
        codes = np.array([SPLITS.index(s) for s in split_col.to_pylist()], dtype=np.int8)

    def col(name):
        return t.column(name).to_numpy() if name in t.column_names else None

    ds = FederatedDataset(
        path=path,
        manifest=manifest,
        features=features,
        labels=col("label").astype(np.int64),
        client_id=col("client_id").astype(np.int64),
        split=codes,
        source_index=col("source_index").astype(np.int64),
        coarse_labels=None if col("coarse_label") is None else col("coarse_label").astype(np.int64),
        writer=col("writer"),
    )
    if len(ds.labels) != len(features):
        raise DataError(f"{path}: {INDEX} has {len(ds.labels)} rows, {FEATURES} {len(features)}")
    for s in ds.splits:  # the blocks must be where the manifest says
        o = ds.offsets(s)
        cid = ds.client_id[o[0] : o[-1]]
        if not (
            np.array_equal(cid, np.repeat(np.arange(ds.n_clients), np.diff(o)))
            and (ds.split[o[0] : o[-1]] == SPLITS.index(s)).all()
        ):
            raise DataError(f"{path}: {INDEX} rows of split {s!r} do not match the manifest's client counts")
    return ds


write_federated = write
load_federated = load

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "FederatedDataset",
    "check",
    "is_complete",
    "load",
    "load_federated",
    "source_info",
    "write",
    "write_federated",
]
