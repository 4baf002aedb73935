"""Tasks for tests/test_processes.py's workers (spawned processes import them by module name)."""

import os
import time
from pathlib import Path


def call(fn, *args):
    """``fn(*args)``: lets one map run two different task functions."""
    return fn(*args)


def write_pid(pid_file: str) -> None:
    """This worker's pid, written whole (a reader never sees part of it)."""
    tmp = Path(f"{pid_file}.{os.getpid()}")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, pid_file)


def pid_then_sleep(pid_file: str, seconds: float) -> None:
    """Write this worker's pid, then do nothing for ``seconds`` (a task that would outlive the test)."""
    write_pid(pid_file)
    time.sleep(seconds)


def fail_when(ready_file: str) -> None:
    """Raise once ``ready_file`` exists (the other task has started), so that the error comes while it runs."""
    while not Path(ready_file).exists():
        time.sleep(0.01)
    raise ValueError("a task's error")


def open_file_then_sleep(path: str, seconds: float) -> None:
    """Hold ``path`` half-written, as a checkpoint being saved is (fedrepro.files.atomic_write), for ``seconds``."""
    from fedrepro.files import atomic_write

    def slow(tmp: Path) -> None:
        tmp.write_text("half")
        write_pid(path + ".pid")
        time.sleep(seconds)

    atomic_write(Path(path), slow)
