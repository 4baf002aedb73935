"""Guarded extraction of downloaded archives (tar, tar.bz2, tar.gz, tar.xz; single-stream .lzma/.xz/.bz2/.gz).

Only the member names a caller asks for are written (a name may have directories, e.g.
``cifar-10-batches-bin/test_batch.bin``; it is written at the same relative path under ``dest``). Every member of
the archive is checked first, requested or not (a genuine upstream archive has no such member), and the archive is
refused with a ``DataError`` naming the member when one

  * has an absolute name, a ``..`` component or a backslash, or would resolve outside ``dest``;
  * is a symlink, a hard link, a device or a fifo (only regular files and directories are allowed);

and when a requested member is missing or appears twice.

Nothing is ever extracted with ``TarFile.extract``/``extractall``: each requested member is streamed through
``TarFile.extractfile`` into ``<dest>/<name>.part`` and renamed into place, so a pre-existing symlink at the target
is replaced, never followed, and an interrupted extraction leaves no file that looks complete. A marker file
``<dest>/.extracted-<archive name>`` records the archive's size and mtime and the extracted sizes; a second call
with an unchanged archive and intact outputs returns at once (these archives are up to GBs).

This module is imported with the rest of fedrepro.data; it registers no dataset and imports only the standard
library.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from fedrepro.errors import DataError

_CHUNK = 1 << 20
MARKER_PREFIX = ".extracted-"


def _normalise(name: str) -> str | None:
    """The member's path relative to the archive root ('./a/b' -> 'a/b'), or None when it is unsafe."""
    if not name or "\\" in name or "\x00" in name:
        return None
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    parts = [part for part in p.parts if part != "."]
    return "/".join(parts)


def _inside(dest: Path, rel: str) -> bool:
    """Whether ``dest/rel`` stays inside ``dest``. The directories are resolved (a symlinked directory pointing
    elsewhere counts as outside); the last component is not, since it is written with os.replace, which replaces
    a link there instead of following it."""
    root = dest.resolve()
    parent = PurePosixPath(rel).parent
    try:
        (root / parent).resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _unsafe_reason(name: str, dest: Path) -> str | None:
    if name.startswith(("/", "\\")) or PurePosixPath(name).is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "has a '..' component"
    rel = _normalise(name)
    if rel is None:
        return "has a backslash or NUL in its name"
    if rel and not _inside(dest, rel):
        return f"resolves outside the target directory {dest}"
    return None


def _member_kind_problem(info: tarfile.TarInfo) -> str | None:
    if info.issym() or info.islnk():
        return f"is a {'symlink' if info.issym() else 'hardlink'} (to {info.linkname!r})"
    if not (info.isreg() or info.isdir()):
        return "is not a regular file or directory (device, FIFO or other special member)"
    return None


def _check_requested_name(name: str) -> None:
    if _normalise(name) != name or name in ("", ".") or name.endswith("/"):
        raise DataError(f"expected member {name!r} must be a relative file path without '.', '..' or '\\'")


def _write_atomically(src, target: Path) -> int:
    tmp = target.with_name(target.name + ".part")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    size = 0
    with open(tmp, "xb") as out:  # 'x': never write through a link planted at the .part name
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            out.write(chunk)
            size += len(chunk)
    os.replace(tmp, target)  # replaces a symlink at ``target`` itself, never its destination
    return size


def _marker_state(archive: Path, outputs: dict[str, Path]) -> dict:
    st = archive.stat()
    return {
        "archive": archive.name,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "members": {n: (p.stat().st_size if p.is_file() and not p.is_symlink() else None) for n, p in outputs.items()},
    }


def _up_to_date(marker: Path, archive: Path, outputs: dict[str, Path]) -> bool:
    if (
        not archive.is_file()
        or not marker.is_file()
        or not all(p.is_file() and not p.is_symlink() for p in outputs.values())
    ):
        return False
    try:
        return json.loads(marker.read_text()) == _marker_state(archive, outputs)
    except (OSError, ValueError):
        return False


def _write_marker(marker: Path, archive: Path, outputs: dict[str, Path]) -> None:
    tmp = marker.with_name(marker.name + ".part")
    tmp.write_text(json.dumps(_marker_state(archive, outputs), sort_keys=True))
    os.replace(tmp, marker)


def extract_members(archive: str | Path, dest: str | Path, members: Iterable[str]) -> dict[str, Path]:
    """Extract exactly ``members`` (relative file paths inside the archive, './' prefix in the archive allowed)
    into ``dest`` at the same relative paths. Returns {member name: extracted path}.

    The tar compression is detected from the file (bz2, gz, xz or none). The member list is read (and checked) in
    full before anything is written, then the requested members are streamed in a second pass.
    """
    archive, dest = Path(archive), Path(dest)
    wanted = list(dict.fromkeys(members))
    for name in wanted:
        _check_requested_name(name)
    dest.mkdir(parents=True, exist_ok=True)
    outputs = {name: dest / name for name in wanted}
    marker = dest / f"{MARKER_PREFIX}{archive.name}"
    if _up_to_date(marker, archive, outputs):
        return outputs
    if not archive.is_file():
        raise DataError(f"archive {archive} does not exist")
    try:
        tar = tarfile.open(archive, mode="r:*")
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, zlib.error) as exc:  # EOFError: cut short
        raise DataError(
            f"{archive}: cannot open as a tar archive ({exc}): corrupt or truncated; delete it and fetch it again"
        ) from None
    done: set[str] = set()
    try:
        with tar:
            infos = tar.getmembers()
            for info in infos:  # refuse the whole archive before writing anything
                why = _unsafe_reason(info.name, dest) or _member_kind_problem(info)
                if why:
                    raise DataError(f"{archive}: refusing to extract: member {info.name!r} {why}")
            for info in infos:  # archive order: a compressed stream is never rewound
                rel = _normalise(info.name)
                if rel not in outputs or info.isdir():
                    continue
                if rel in done:
                    raise DataError(f"archive {archive} holds member {info.name!r} twice")
                src = tar.extractfile(info)
                if src is None:  # pragma: no cover - regular members always have data
                    raise DataError(f"cannot read member {info.name!r} of {archive}")
                outputs[rel].parent.mkdir(parents=True, exist_ok=True)
                with src:
                    _write_atomically(src, outputs[rel])
                done.add(rel)
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
        for path in outputs.values():
            path.with_name(path.name + ".part").unlink(missing_ok=True)
        raise DataError(f"{archive}: corrupt or truncated archive ({exc}); delete it and fetch it again") from None
    missing = [n for n in wanted if n not in done]
    if missing:
        raise DataError(
            f"archive {archive} lacks expected member(s) {', '.join(map(repr, missing))}: not the upstream file?"
        )
    _write_marker(marker, archive, outputs)
    return outputs


_OPENERS = {
    "xz": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_AUTO),
    "lzma": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_AUTO),
    "bz2": lambda p: bz2.open(p, "rb"),
    "gz": lambda p: gzip.open(p, "rb"),
}


def decompress_file(src: str | Path, dest: str | Path, name: str, fmt: str = "lzma") -> Path:
    """Decompress a single-stream compressed file ``src`` to ``<dest>/<name>`` (``name`` a plain file name).

    ``fmt``: 'lzma'/'xz' (either container, auto-detected, as TFF's ``download.get_compressed_file`` reads its
    ``*.sqlite.lzma`` files), 'bz2' or 'gz'. Same atomic write and up-to-date marker as :func:`extract_members`.
    """
    src, dest = Path(src), Path(dest)
    if "/" in name:
        raise DataError(f"decompressed file name {name!r} must be a plain file name")
    _check_requested_name(name)
    if fmt not in _OPENERS:
        raise ValueError(f"unknown compression {fmt!r} (known: {', '.join(_OPENERS)})")
    dest.mkdir(parents=True, exist_ok=True)
    outputs = {name: dest / name}
    marker = dest / f"{MARKER_PREFIX}{src.name}"
    if _up_to_date(marker, src, outputs):
        return outputs[name]
    if not src.is_file():
        raise DataError(f"compressed file {src} does not exist")
    try:
        with _OPENERS[fmt](src) as fh:
            _write_atomically(fh, outputs[name])
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        outputs[name].with_name(name + ".part").unlink(missing_ok=True)
        raise DataError(
            f"{src}: cannot decompress ({fmt}: {exc}): corrupt or truncated; delete it and fetch it again"
        ) from None
    _write_marker(marker, src, outputs)
    return outputs[name]


def zip_names(archive: str | Path):
    """Yield the member names of a zip archive from its central directory, one at a time (nothing is extracted).

    ``zipfile.ZipFile`` builds a ``ZipInfo`` per member up front, about a GB of memory for the ~1.6M members of
    NIST SD19's ``by_class.zip``; this reads the same records (zip64 included) and keeps only the current name.
    A file that is not a zip archive, or whose central directory is cut short, is a DataError naming it.
    """
    import struct
    import zipfile

    archive = Path(archive)
    bad = f"{archive}: not a complete zip archive"
    try:
        with open(archive, "rb") as fh:
            end = zipfile._EndRecData(fh)  # the end record, zip64 resolved (standard library, stable since 2.x)
            if not end:
                raise DataError(f"{bad} (no end-of-central-directory record: cut short, or not a zip)")
            size, offset = end[zipfile._ECD_SIZE], end[zipfile._ECD_OFFSET]
            # an archive may be prefixed (self-extracting): the directory then lies `concat` bytes further on
            concat = end[zipfile._ECD_LOCATION] - size - offset
            if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
                concat -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
            fh.seek(offset + concat)
            remaining = size
            while remaining > 0:
                head = fh.read(zipfile.sizeCentralDir)
                if len(head) != zipfile.sizeCentralDir or head[:4] != zipfile.stringCentralDir:
                    raise DataError(f"{bad} (its central directory is damaged)")
                rec = struct.unpack(zipfile.structCentralDir, head)
                n, extra, comment = (
                    rec[zipfile._CD_FILENAME_LENGTH],
                    rec[zipfile._CD_EXTRA_FIELD_LENGTH],
                    rec[zipfile._CD_COMMENT_LENGTH],
                )
                raw = fh.read(n)
                fh.seek(extra + comment, os.SEEK_CUR)
                remaining -= zipfile.sizeCentralDir + n + extra + comment
                flags = rec[zipfile._CD_FLAG_BITS]
                yield raw.decode("utf-8" if flags & 0x800 else "cp437")
    except OSError as exc:
        raise DataError(f"{archive}: cannot read ({exc.strerror or exc})") from None
