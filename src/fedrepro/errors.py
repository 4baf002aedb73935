"""Errors that carry a message meant for the person running the workflow (no traceback needed)."""

import contextlib
import errno
import os
from pathlib import Path


class FedreproError(Exception):
    """Base class: the CLI prints the message and exits with status 2."""


class ConfigError(FedreproError):
    """A configuration value is missing, misnamed or of the wrong type; the message names the key."""


class DataError(FedreproError):
    """A dataset file is missing or corrupt; the message names the file, its checksum and where to put it."""


class ResultError(FedreproError):
    """A result file the workflow wrote earlier (metrics.json, summary.json, history.parquet, a replication report)
    is missing, unreadable or lacks a field it must hold; the message names the file and how to rebuild it."""


class PrivacyError(FedreproError):
    """A privacy-accounting parameter is out of range (delta, sampling rate, noise multiplier, steps, epsilon...);
    the message names the parameter and its value."""


class ResourceError(FedreproError):
    """The machine lacks what a job needs: memory for the arrays its parameters ask for (checked before the run), or
    disk space to write a result; the message names the parameters and the estimate, or the path, and what to do."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # no space left on the device, disk quota exceeded


def disk_full(path: str | Path, exc: OSError) -> ResourceError:
    """The one-line error of a write to ``path`` that found the disk full (``exc``: its OSError)."""
    return ResourceError(
        f"{path}: disk full ({os.strerror(exc.errno) if exc.errno else exc}) while writing it; nothing was left "
        "half-written: free space on that filesystem and run the command again"
    )


@contextlib.contextmanager
def naming_a_full_disk(path: str | Path):
    """Inside the block, a full disk or an exhausted quota is a ResourceError naming ``path`` (what was being
    written); the block's own cleanup has run by then."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise disk_full(path, exc) from None
        raise
