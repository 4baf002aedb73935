"""Archive fixtures in the upstream formats (CIFAR's .tar.gz), for the data tests and the networked rehearsal."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def tar_gz(path: Path, members: dict[str, bytes], extra=()) -> Path:
    """A .tar.gz with a directory entry per top folder, the given regular files, then ``extra`` TarInfo's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for d in sorted({n.split("/")[0] for n in members if "/" in n}):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path
