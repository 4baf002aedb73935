"""Errors that carry a message meant for the person running the workflow (no traceback needed)."""


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
    disk space to write a result; the message names the parameters or the path, the amount, and what to do."""
