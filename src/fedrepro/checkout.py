"""Where the checkout is: the repository root that relative paths of the configuration are read against."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_path(p: str | Path, base: Path = REPO_ROOT) -> Path:
    p = Path(p)
    return p if p.is_absolute() else base / p
