"""Where the checkout is: the repository root that relative paths of the configuration are read against.

The package normally runs from its own checkout (``pip install -e .``, as scripts/setup.sh installs it): the root is
then two levels above this file. An installed copy (``pip install .``: the package in site-packages, the workflow's
config and Snakefile not) reads the checkout named by ``FEDREPRO_ROOT``, else the nearest directory at or above the
working directory that holds a Snakefile and config/config.yaml. ``FEDREPRO_ROOT`` wins over both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ROOT_ENV = "FEDREPRO_ROOT"


def is_checkout(d: Path) -> bool:
    """Whether ``d`` is a fedrepro checkout (the workflow's Snakefile and its config beside it)."""
    return (d / "Snakefile").is_file() and (d / "config" / "config.yaml").is_file()


def find_root(here: Path, cwd: Path, env: Mapping[str, str]) -> Path:
    """``env[FEDREPRO_ROOT]``, else ``here`` (the package's own checkout), else the nearest checkout at or above
    ``cwd``, else ``cwd`` (no checkout: reading the config then fails, saying what to do)."""
    if env.get(ROOT_ENV):
        return Path(env[ROOT_ENV]).expanduser().resolve()
    if is_checkout(here):
        return here
    return next((d for d in (cwd, *cwd.parents) if is_checkout(d)), cwd)


REPO_ROOT = find_root(Path(__file__).resolve().parents[2], Path.cwd().resolve(), os.environ)


def resolve_path(p: str | Path, base: Path = REPO_ROOT) -> Path:
    p = Path(p)
    return p if p.is_absolute() else base / p
