"""Files written atomically, with the mode the umask gives new files, and the plain values they hold (the lowest
layer: every other one writes through it)."""

from __future__ import annotations

import functools
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

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


# ------------------------------------------------------------------------------------------- output paths


NAME_MAX = 255  # bytes in one path component (ext4, xfs, btrfs, tmpfs)
PATH_MAX = 4096


@functools.cache
def tracked_top_level(root: Path) -> frozenset[str]:
    """The names at the top of the checkout ``root`` that git tracks (its directories and files), ``.git`` and the
    results archive: no command writes its outputs there. Without git (an installed copy): the project's own
    top-level names."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=30, check=True)
        names = {p.split("/", 1)[0] for p in done.stdout.decode("utf-8", "replace").split("\0") if p}
    except (OSError, subprocess.SubprocessError):
        names = {
            "config",
            "src",
            "tests",
            "workflow",
            "docs",
            "scripts",
            "benchmarks",
            "examples",
            "profiles",
            "archive",
        }
        names |= {"forensics", ".ci", "Snakefile", "README.md", "pyproject.toml", "environment.yml"}
    return frozenset(names | {".git", "archive"})


def output_problem(text: str, is_dir: bool, root: Path) -> str | None:
    """Why the output path ``text`` may not be written (None when it may): empty; a name longer than the file system
    takes; the checkout ``root`` itself or a directory holding it; inside what git tracks there (config/, src/, .git,
    archive/, a tracked file: outputs go under results/ or outside the checkout); a device or other special file;
    a file where a directory is needed or the reverse."""
    if not text or not text.strip():
        return "is empty: name a file or directory"
    path = Path(text).expanduser()
    if any(len(os.fsencode(part)) > NAME_MAX for part in path.parts):
        return f"has a name longer than the file system allows ({NAME_MAX} bytes): choose a shorter one"
    resolved = path.resolve()
    if len(os.fsencode(str(resolved))) >= PATH_MAX:
        return f"is longer than the file system allows ({PATH_MAX} bytes): choose a shorter path"
    root = root.resolve()
    if resolved == root or root.is_relative_to(resolved):
        what = "the checkout" if resolved == root else "a directory holding the checkout"
        return f"is {what} ({root}): choose a new directory"
    if resolved.is_relative_to(root):
        top = resolved.relative_to(root).parts[0]
        if top in tracked_top_level(root):
            kind = "directory" if (root / top).is_dir() else "file"
            return (
                f"is inside {top}{'/' if kind == 'directory' else ''}, a {kind} of the checkout that git tracks: "
                "write outputs under results/ (or outside the checkout)"
            )
    if path.exists() and not (path.is_dir() or path.is_file()):
        return "is a device or other special file: choose a regular file or directory"
    if path.exists() and path.is_dir() != is_dir:
        return f"exists and is not {'a directory' if is_dir else 'a file'}; choose another path or remove it"
    return None


_CREATED: list[Path] = []  # directories made for outputs by this process, removed again if a command fails


def make_output_dirs(folder: Path) -> None:
    """Create ``folder`` and its missing parents, remembering which were new (:func:`remove_created_if_empty`)."""
    new = []
    d = Path(folder)
    while not d.exists():
        new.append(d)
        d = d.parent
    folder.mkdir(parents=True, exist_ok=True)
    _CREATED.extend(reversed(new))


def remove_created_if_empty() -> None:
    """Remove the output directories this process created that are still empty (deepest first): a command that
    failed leaves no empty directory behind."""
    for d in reversed(_CREATED):
        try:
            d.rmdir()  # only when empty
        except OSError:
            pass
    _CREATED.clear()


def to_jsonable(obj: Any, keep_infinite: bool = False) -> Any:
    """Plain Python values (numpy scalars and arrays as numbers and lists); a non-finite float as None (JSON has no
    NaN or infinity), or with ``keep_infinite`` an infinity kept (YAML writes .inf: a run's config.yaml keeps PPSGD's
    alpha Q = inf)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, keep_infinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, keep_infinite) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) or (keep_infinite and math.isinf(f)) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), keep_infinite)
    return obj
