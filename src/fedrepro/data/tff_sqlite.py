"""TFF's sqlite federated releases (``emnist_all.sqlite.lzma``, ``stackoverflow.sqlite.lzma``), read without
TensorFlow: decompression, the schema, one split's clients and their serialized examples, and the content check.

What TFF does, and what this module does the same way (TFF repository, tensorflow_federated/python/simulation/
datasets/):

  * ``download.py`` (``get_compressed_file``): the ``.lzma`` file is decompressed with ``lzma.LZMADecompressor()``
    (container auto-detected) to the same name without ``.lzma``; no hash is checked. Here :func:`decompress`
    streams it once into the same directory through a ``.part`` file, refuses a stream cut before its end marker
    (TFF's loop would keep the truncated database), and stops when the output would exceed a size bound or the
    disk's free space falls below a margin (checked every 64 MiB written).
  * ``sql_client_data.py`` (``SqlClientData``, ``_check_database_format``): tables ``examples`` with columns
    ``split_name``, ``client_id``, ``serialized_example_proto`` (a serialized ``tf.train.Example``) and
    ``client_metadata`` with ``client_id``, ``split_name``, ``num_examples`` (the columns TFF's docstring requires
    and ``sql_client_data_utils.save_to_sql_client_data`` writes). A split's clients are
    ``sorted(SELECT DISTINCT client_id FROM client_metadata WHERE split_name = <split>)``; a client's examples are
    ``SELECT serialized_example_proto FROM examples WHERE client_id = <id> and split_name = <split>``, without
    ORDER BY. SQLite answers such a query in rowid order, by a table scan and through an index on
    ``(split_name, client_id)`` alike (the index ``sql_client_data_test.py`` builds; an index's entries end with
    the rowid): its behaviour, not a documented guarantee. :class:`SqliteSplit` asks for ``ORDER BY rowid``, the
    same order, stated (tests/data/test_tff_releases.py compares the two with and without the index).

The database is opened read-only (``mode=ro``); nothing is unpickled (the rows are protobuf messages, decoded by
:mod:`fedrepro.data.tf_example`). The content check (:func:`check_release`) compares what TFF states about a
release (clients and examples per split) with the file's ``client_metadata`` and ``examples`` tables, and decodes
the first example of each split with the release's feature spec.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import os
import shutil
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from fedrepro.errors import DataError

REQUIRED_TABLES = ("client_metadata", "examples")
REQUIRED_COLUMNS = {
    "examples": ("split_name", "client_id", "serialized_example_proto"),
    "client_metadata": ("client_id", "split_name", "num_examples"),
}

_IN_CHUNK = 1 << 20  # compressed bytes read at a time
_OUT_CHUNK = 1 << 24  # most decompressed bytes held in memory at a time
_FREE_EVERY = 1 << 26  # check the free disk space after every 64 MiB written
MIN_FREE_BYTES = 1 << 30  # stop when less than 1 GiB would be left on the data directory's disk
MARKER_PREFIX = ".decompressed-"


def fetch_hint(dataset_id: str) -> str:
    return f"python -m fedrepro data fetch {dataset_id}"


# ----------------------------------------------------------------------------------------------------------------
# decompression
# ----------------------------------------------------------------------------------------------------------------


def _src_state(src: Path, out: Path) -> dict:
    st = src.stat()
    return {"source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns, "output": out.name}


def _up_to_date(marker: Path, src: Path, out: Path) -> bool:
    if not marker.is_file() or not out.is_file() or out.is_symlink():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return recorded == {**_src_state(src, out), "output_size": out.stat().st_size}


def decompress(
    src: str | Path,
    name: str,
    *,
    dataset_id: str,
    max_bytes: int,
    min_free_bytes: int = MIN_FREE_BYTES,
) -> Path:
    """Decompress the ``.lzma`` (or ``.xz``) file ``src`` to ``<its directory>/<name>`` once; return that path.

    The output is written to ``<name>.part`` and renamed when the stream has ended cleanly; a marker file
    ``.decompressed-<name>`` records the source's size and mtime and the output's size, and a later call with an
    unchanged source and output returns at once. Concurrent calls (two partitions of one file built at once) take
    turns on a lock file ``.decompressed-<name>.lock``: one decompresses, the others then find it done.

    Refused with one DataError line naming the file and what to do (the command that fetches it again): a stream
    cut before its end marker, corrupt data, bytes after the end of the stream, an output larger than
    ``max_bytes`` (a bound far above the real file, against a decompression bomb), or less than ``min_free_bytes``
    left on the disk while writing. A refused run leaves no ``.part`` file (only the lock file).
    """
    src = Path(src)
    if not name or "/" in name or name in (".", "..") or "\\" in name:
        raise ValueError(f"decompressed file name {name!r} must be a plain file name")
    out = src.parent / name
    marker = src.parent / f"{MARKER_PREFIX}{name}"
    if not src.is_file():
        raise DataError(f"{src}: not found; fetch it with `{fetch_hint(dataset_id)}`")
    if _up_to_date(marker, src, out):
        return out
    with _locked(marker.with_name(marker.name + ".lock")):
        if _up_to_date(marker, src, out):  # another process did it while this one waited
            return out
        _decompress(src, out, marker, dataset_id, max_bytes, min_free_bytes)
    return out


@contextlib.contextmanager
def _locked(lock: Path):
    """An exclusive advisory lock (fcntl.flock) held while the block runs; no lock where fcntl is missing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _decompress(src: Path, out: Path, marker: Path, dataset_id: str, max_bytes: int, min_free_bytes: int) -> None:
    again = f"delete it and fetch it again (`{fetch_hint(dataset_id)}`)"
    part = out.with_name(out.name + ".part")
    if part.is_symlink() or part.exists():
        part.unlink()
    marker.unlink(missing_ok=True)
    written, next_free_check = 0, 0
    try:
        with open(src, "rb") as fin, open(part, "xb") as fout:  # 'x': never write through a link at the .part name
            dec = lzma.LZMADecompressor(format=lzma.FORMAT_AUTO)
            while not dec.eof:
                chunk = fin.read(_IN_CHUNK) if dec.needs_input else b""
                if dec.needs_input and not chunk:
                    raise DataError(
                        f"{src}: the lzma stream ends before its end-of-stream marker after {written:,} "
                        f"decompressed bytes (a cut download); {again}"
                    )
                data = dec.decompress(chunk, max_length=_OUT_CHUNK)
                written += len(data)
                if written > max_bytes:
                    raise DataError(
                        f"{src}: decompresses to more than {max_bytes:,} bytes, the bound for this release "
                        f"(not the published file?); {again}"
                    )
                fout.write(data)
                if written >= next_free_check:
                    next_free_check = written + _FREE_EVERY
                    free = shutil.disk_usage(part.parent).free
                    if free < min_free_bytes:
                        raise DataError(
                            f"{src}: decompressing it to {out} would leave less than {min_free_bytes:,} bytes free "
                            f"on that disk ({free:,} left after {written:,} bytes); free space there or point "
                            "data.dir at a larger disk"
                        )
            trailing = len(dec.unused_data) + len(fin.read(1))
        if trailing:
            raise DataError(f"{src}: has bytes after the end of its lzma stream (not the published file); {again}")
    except lzma.LZMAError as exc:
        part.unlink(missing_ok=True)
        raise DataError(f"{src}: corrupt lzma data ({exc}); {again}") from None
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise DataError(
            f"{src}: cannot decompress to {out} ({exc}); make that directory writable with room for it, or point "
            "data.dir at another disk"
        ) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, out)  # replaces a link at ``out`` itself, never its destination
    tmp = marker.with_name(marker.name + ".part")
    tmp.write_text(json.dumps({**_src_state(src, out), "output_size": out.stat().st_size}, sort_keys=True))
    os.replace(tmp, marker)


# ----------------------------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------------------------


def connect(path: str | Path, todo: str = "delete it and decompress or fetch it again") -> sqlite3.Connection:
    """A read-only connection to an existing sqlite file, its schema checked as TFF's ``_check_database_format``
    checks it (plus ``client_metadata``'s columns); one DataError line ending with ``todo`` when it is not such a
    file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file; {todo}")
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise DataError(f"{path}: cannot open as sqlite ({exc}); {todo}") from None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise DataError(
                f"{path}: not a TFF sqlite federated dataset: missing table(s) {', '.join(missing)} "
                f"(TFF's sql_client_data.py requires {', '.join(REQUIRED_TABLES)}); {todo}"
            )
        for table, need in REQUIRED_COLUMNS.items():
            have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            lacking = [c for c in need if c not in have]
            if lacking:
                raise DataError(
                    f"{path}: table {table} lacks column(s) {', '.join(lacking)} (TFF's schema: {', '.join(need)}); "
                    + todo
                )
    except sqlite3.DatabaseError as exc:
        con.close()
        raise DataError(f"{path}: cannot read as sqlite ({exc}); {todo}") from None
    except DataError:
        con.close()
        raise
    return con


class SqliteSplit:
    """One split (``split_name``) of a TFF sqlite release: its sorted client ids and each client's serialized
    examples in TFF's order. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path, split_name: str, todo: str = "delete it and decompress or fetch it again"):
        self.path = Path(path)
        self.split_name = split_name
        self.todo = todo
        self._con = connect(self.path, todo)
        self._client_ids: list[str] | None = None

    def close(self) -> None:
        self._con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._con.execute(sql, args)
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{self.path}: cannot read split {self.split_name!r} ({exc}); {self.todo}") from None

    @property
    def client_ids(self) -> list[str]:
        """The split's client ids, sorted as TFF sorts them (from ``client_metadata``)."""
        if self._client_ids is None:
            rows = self._query(
                "SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?", (self.split_name,)
            )
            self._client_ids = sorted(str(r[0]) for r in rows)
        return self._client_ids

    def __len__(self) -> int:
        return len(self.client_ids)

    def __contains__(self, client_id: object) -> bool:
        return isinstance(client_id, str) and (
            self._query(
                "SELECT 1 FROM client_metadata WHERE split_name = ? AND client_id = ? LIMIT 1",
                (self.split_name, client_id),
            ).fetchone()
            is not None
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.client_ids)

    def num_examples(self, client_id: str) -> int:
        """Rows of ``examples`` for this client and split (what :meth:`records` returns)."""
        return int(
            self._query(
                "SELECT COUNT(*) FROM examples WHERE split_name = ? AND client_id = ?", (self.split_name, client_id)
            ).fetchone()[0]
        )

    def records(self, client_id: str, limit: int | None = None) -> list[bytes]:
        """The client's serialized examples in rowid order (the first ``limit``, if given); KeyError for a client
        not in the split."""
        if client_id not in self:
            raise KeyError(f"{self.path}: no client {client_id!r} in split {self.split_name!r}")
        sql = "SELECT serialized_example_proto FROM examples WHERE split_name = ? AND client_id = ? ORDER BY rowid"
        args: tuple = (self.split_name, client_id)
        if limit is not None:
            sql += " LIMIT ?"
            args += (max(int(limit), 0),)
        return [bytes(r[0]) for r in self._query(sql, args)]


# ----------------------------------------------------------------------------------------------------------------
# content check
# ----------------------------------------------------------------------------------------------------------------


def split_counts(
    path: str | Path, todo: str = "delete it and decompress or fetch it again"
) -> dict[str, dict[str, int]]:
    """{split_name: {'clients', 'metadata_examples', 'examples'}} of a release: distinct clients and the sum of
    ``num_examples`` in ``client_metadata``, and the rows of ``examples``. Reads every row of both tables' split
    columns (an index scan where the release has one)."""
    con = connect(path, todo)
    try:
        out: dict[str, dict[str, int]] = {}
        for split, clients, total in con.execute(
            "SELECT split_name, COUNT(DISTINCT client_id), SUM(num_examples) FROM client_metadata GROUP BY split_name"
        ):
            out[str(split)] = {"clients": int(clients), "metadata_examples": int(total or 0), "examples": 0}
        for split, rows in con.execute("SELECT split_name, COUNT(*) FROM examples GROUP BY split_name"):
            out.setdefault(str(split), {"clients": 0, "metadata_examples": 0, "examples": 0})["examples"] = int(rows)
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{path}: cannot read as sqlite ({exc}); {todo}") from None
    finally:
        con.close()
    return out


_COUNTED = {"clients": "clients", "metadata_examples": "examples in client_metadata", "examples": "rows in examples"}


def check_release(
    sqlite_path: str | Path,
    expected: Mapping[str, tuple[int, int]],
    *,
    label: str,
    source: str,
    dataset_id: str,
    decode: Callable[[bytes], object] | None = None,
) -> None:
    """Raise one DataError line unless the release at ``sqlite_path`` has, for every split named in ``expected``
    (``{split_name: (clients, examples)}``, what its publisher states), exactly that many clients in
    ``client_metadata``, that many examples summed over its ``num_examples`` and that many rows in ``examples``,
    and (when ``decode`` is given) its first example decodes. Splits the publisher does not name are not checked.
    ``label`` names the file in the message (the downloaded ``.lzma``), ``source`` where the stated numbers come
    from."""
    again = f"delete {label} and fetch it again (`{fetch_hint(dataset_id)}`)"
    try:
        found = split_counts(sqlite_path, again)
    except DataError as exc:
        raise DataError(f"{label}: {exc}") from None
    problems = []
    for split, (clients, examples) in expected.items():
        got = found.get(split)
        if got is None:
            problems.append(f"split {split!r} absent (expected {clients:,} clients)")
            continue
        for what, want in (("clients", clients), ("metadata_examples", examples), ("examples", examples)):
            if got[what] != want:
                problems.append(f"split {split!r}: {got[what]:,} {_COUNTED[what]}, expected {want:,}")
    if problems:
        raise DataError(
            f"{label}: not the release TFF describes ({'; '.join(problems)}; expected per {source}): {again}; if it "
            "persists, the published file has changed"
        )
    if decode is not None:
        for split in expected:
            with SqliteSplit(sqlite_path, split, again) as s:
                first = s.client_ids[0] if s.client_ids else None
                rec = s.records(first, limit=1) if first is not None else []
            if not rec:
                raise DataError(f"{label}: split {split!r} has no example to decode; {again}")
            try:
                decode(rec[0])
            except DataError as exc:
                raise DataError(
                    f"{label}: split {split!r}, client {first!r}: first example is not the release's "
                    f"tf.train.Example ({exc}); {again}"
                ) from None
