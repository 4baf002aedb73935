"""Files written atomically, with the mode the umask gives new files (the lowest layer: every other one writes
through it)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from fedrepro.errors import naming_a_full_disk


@functools.cache
def umask() -> int:
    """The process's umask (read once: os.umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(path: Path) -> None:
    """Give a file or directory made by tempfile (always 0600 / 0700) the mode a plain open/mkdir would have given
    it (0644 / 0755 under umask 022), so colleagues on a shared filesystem can read the results."""
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask())


def atomic_write(path: Path, writer: Callable[[Path], None]) -> None:
    """Call ``writer(tmp_path)`` and rename the result onto ``path`` (with the mode the umask gives new files). An
    exception or Ctrl-C removes the temporary file and leaves ``path`` as it was; a full disk is a ResourceError
    naming ``path``."""
    with naming_a_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            writer(Path(tmp))
            honour_umask(Path(tmp))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
