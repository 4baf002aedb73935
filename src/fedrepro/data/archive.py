"""Guarded extraction of downloaded archives (tar, tar.bz2, tar.gz, tar.xz; single-stream .lzma/.xz/.bz2/.gz).

Only the member names a caller asks for are written, each as a regular file directly under ``dest``; the archive
is refused (``DataError``) when

  * any member name is absolute, contains a ``..`` component or a backslash, or would resolve outside ``dest``
    (checked for every member, not only the requested ones: such an archive is not the published file);
  * a requested member is not a regular file (symlink, hard link, device, fifo, directory);
  * a requested member is missing, or appears twice.

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
from pathlib import Path, PurePosixPath
from typing import Iterable

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


def check_member_name(name: str, dest: Path) -> str:
    """Normalised member name, or DataError if it is absolute, has '..' or resolves outside ``dest``."""
    rel = _normalise(name)
    if rel is None or (rel and not _inside(dest, rel)):
        raise DataError(f"refusing archive member {name!r}: absolute path, '..' or outside {dest}")
    return rel


def _check_plain_name(name: str) -> None:
    if _normalise(name) != name or "/" in name or name in ("", "."):
        raise DataError(f"expected member {name!r} must be a plain file name (no directories)")


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
    return {"archive": archive.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "members": {n: (p.stat().st_size if p.is_file() and not p.is_symlink() else None)
                        for n, p in outputs.items()}}


def _up_to_date(marker: Path, archive: Path, outputs: dict[str, Path]) -> bool:
    if not archive.is_file() or not marker.is_file() or not all(
            p.is_file() and not p.is_symlink() for p in outputs.values()):
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
    """Extract exactly ``members`` (plain file names at the archive root, './' prefix allowed) into ``dest``.

    Returns {member name: extracted path}. The tar compression is detected from the file (bz2, gz, xz or none).
    """
    archive, dest = Path(archive), Path(dest)
    wanted = list(dict.fromkeys(members))
    for name in wanted:
        _check_plain_name(name)
    dest.mkdir(parents=True, exist_ok=True)
    outputs = {name: dest / name for name in wanted}
    marker = dest / f"{MARKER_PREFIX}{archive.name}"
    if _up_to_date(marker, archive, outputs):
        return outputs
    if not archive.is_file():
        raise DataError(f"archive {archive} does not exist")
    done: set[str] = set()
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            for info in tar:  # streaming: one pass over a compressed archive
                rel = check_member_name(info.name, dest)
                if rel not in outputs:
                    continue
                if not info.isreg():
                    kind = "symlink" if info.issym() else "hard link" if info.islnk() else "non-regular file"
                    raise DataError(f"refusing archive member {info.name!r} in {archive}: a {kind}, not a file")
                if rel in done:
                    raise DataError(f"archive {archive} holds member {info.name!r} twice")
                src = tar.extractfile(info)
                if src is None:  # pragma: no cover - isreg() members always have data
                    raise DataError(f"cannot read member {info.name!r} of {archive}")
                with src:
                    _write_atomically(src, outputs[rel])
                done.add(rel)
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError) as exc:
        for path in outputs.values():
            path.with_name(path.name + ".part").unlink(missing_ok=True)
        raise DataError(f"cannot read archive {archive}: {exc}") from None
    missing = [n for n in wanted if n not in done]
    if missing:
        raise DataError(f"archive {archive} lacks member(s) {', '.join(missing)}: not the expected file?")
    _write_marker(marker, archive, outputs)
    return outputs


_OPENERS = {"xz": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_AUTO),
            "lzma": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_AUTO),
            "bz2": lambda p: bz2.open(p, "rb"),
            "gz": lambda p: gzip.open(p, "rb")}


def decompress_file(src: str | Path, dest: str | Path, name: str, fmt: str = "lzma") -> Path:
    """Decompress a single-stream compressed file ``src`` to ``<dest>/<name>`` (``name`` a plain file name).

    ``fmt``: 'lzma'/'xz' (either container, auto-detected, as TFF's ``download.get_compressed_file`` reads its
    ``*.sqlite.lzma`` files), 'bz2' or 'gz'. Same atomic write and up-to-date marker as :func:`extract_members`.
    """
    src, dest = Path(src), Path(dest)
    _check_plain_name(name)
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
    except (OSError, EOFError, lzma.LZMAError) as exc:
        outputs[name].with_name(name + ".part").unlink(missing_ok=True)
        raise DataError(f"cannot decompress {src} ({fmt}): {exc}") from None
    _write_marker(marker, src, outputs)
    return outputs[name]

