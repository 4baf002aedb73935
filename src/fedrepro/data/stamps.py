"""Files verified again where they are used, cheaply: the full sha256 only when a file's size or mtime changed.

A state file ``.verified.json`` in the files' directory records, per file name, the sha256 the file last matched and
its size and mtime (ns) then. A file whose size and mtime are as recorded, under the expected sha256, is taken as
verified without reading it; any other is hashed again, and the caller records the new stamp when it matches.
Datasets (fedrepro.data.sources, ``data/<dataset>/``) and partitions (fedrepro.data.fedformat,
``results/data/<name>/``) are verified this way. Writing the state never touches the files themselves, and a
directory that cannot be written (read-only, shared) only costs a full hash on every use.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

STATE = ".verified.json"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_stat(path: Path) -> dict:
    """What the cheap check compares: size and mtime (ns)."""
    st = Path(path).stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def unchanged(record: object, path: Path, sha256: str) -> bool:
    """Whether ``path`` is as it was when it matched ``sha256`` (``record``: its entry in the state, if any)."""
    return (
        isinstance(record, dict)
        and record.get("sha256") == sha256
        and all(record.get(k) == v for k, v in file_stat(path).items())
    )


def read_state(state: Path) -> dict:
    """{file name: {sha256, size, mtime_ns, ...}}; {} when absent or unreadable (every file is then hashed once)."""
    try:
        doc = json.loads(Path(state).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_state(state: Path, doc: dict) -> None:
    """Write the state atomically, and only when it changed (an OSError, e.g. a read-only directory, is the
    caller's to ignore). A full check that finds every file as recorded leaves the state, and so its directory's
    mtime, as it was: a partition is a Snakemake ``directory()`` output, and one built outside the workflow (by
    `fedrepro run` or the archive's replay) has no ``.snakemake_timestamp``, so Snakemake dates it by the
    directory's own mtime, which rewriting the state in place would move past every run built on it."""
    from fedrepro.files import atomic_write

    state = Path(state)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    try:
        if state.read_text(encoding="utf-8") == text:
            return
    except (OSError, ValueError):
        pass  # absent or unreadable: written below
    atomic_write(state, lambda p: p.write_text(text, encoding="utf-8"))
