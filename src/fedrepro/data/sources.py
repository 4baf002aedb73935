"""Locate, fetch and verify dataset files: data dir, then offline mirror, then canonical URL.

Lookup order for a file ``NAME`` of dataset ``ID``:
  1. ``<data.dir>/<ID>/NAME`` (already fetched),
  2. the mirror: ``<data.mirror>/<ID>/NAME`` or ``<data.mirror>/NAME`` (a directory or file:// URL),
  3. the canonical URL.
Every file is checked against its sha256; a mismatch is an error, never a warning.
``NAME`` may contain a subdirectory (``train/x.json``); a bundled dataset (no files) is always available.
"""

from __future__ import annotations

import hashlib
import shutil
import urllib.request
from pathlib import Path
from typing import Mapping
from urllib.parse import urlparse

from fedrepro.config import resolve_path
from fedrepro.data.catalog import Dataset, RemoteFile, get_dataset, get_provider
from fedrepro.errors import DataError

STAMP = ".verified"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_dir(cfg: Mapping, dataset_id: str) -> Path:
    return resolve_path(cfg["data"]["dir"]) / dataset_id


def mirror_root(cfg: Mapping) -> Path | None:
    mirror = cfg["data"].get("mirror")
    if not mirror:
        return None
    if mirror.startswith("file://"):
        return Path(urlparse(mirror).path)
    return resolve_path(mirror)


def mirror_candidates(cfg: Mapping, ds: Dataset, f: RemoteFile) -> list[Path]:
    root = mirror_root(cfg)
    return [] if root is None else [root / ds.id / f.name, root / f.name]


def stamp_path(cfg: Mapping, dataset_id: str) -> Path:
    return data_dir(cfg, dataset_id) / STAMP


def _missing_message(cfg: Mapping, ds: Dataset, f: RemoteFile, why: str) -> str:
    searched = [str(data_dir(cfg, ds.id) / f.name)] + [str(p) for p in mirror_candidates(cfg, ds, f)]
    return (
        f"dataset {ds.id} ({ds.title}): file {f.name} is not available ({why}).\n"
        f"  expected sha256: {f.sha256 or 'not pinned yet (see src/fedrepro/data/catalog.py)'}\n"
        f"  canonical URL:   {f.url}\n"
        f"  searched:        {', '.join(searched)}\n"
        f"  fix: download it on a networked machine and put it at {searched[0]}, or into the mirror directory "
        f"(config key data.mirror) as <mirror>/{ds.id}/{f.name}"
    )


def verify(path: Path, f: RemoteFile, ds: Dataset, allow_unpinned: bool = False) -> str:
    digest = sha256_of(path)
    if f.sha256 is None:
        if not allow_unpinned:
            raise DataError(
                f"dataset {ds.id}: {path} has no pinned sha256 in the catalog (observed {digest}); "
                "re-run with --allow-unpinned to accept it and record the hash, then pin it in catalog.py"
            )
    elif digest != f.sha256:
        raise DataError(
            f"dataset {ds.id}: checksum mismatch for {path}\n  expected sha256: {f.sha256}\n"
            f"  actual sha256:   {digest}\n  the file is corrupt or a different version; delete it and fetch "
            f"again from {f.url} (or the mirror)"
        )
    return digest


def find_file(cfg: Mapping, ds: Dataset, f: RemoteFile) -> Path | None:
    """Where a file can be read from without the network, or None."""
    for p in [data_dir(cfg, ds.id) / f.name, *mirror_candidates(cfg, ds, f)]:
        if p.is_file():
            return p
    return None


def is_available(cfg: Mapping, dataset_id: str) -> bool:
    """True when every file is in the data dir or the mirror, or an installed local provider can write them."""
    ds = get_dataset(dataset_id)
    if all(find_file(cfg, ds, f) is not None for f in ds.files):
        return True
    provider = get_provider(dataset_id)
    return provider is not None and provider.available()


def _download(url: str, dest: Path, timeout: float = 60.0) -> None:
    tmp = dest.with_name(dest.name + ".part")
    with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as out:  # noqa: S310 (https only)
        shutil.copyfileobj(resp, out)
    tmp.replace(dest)


def fetch(cfg: Mapping, dataset_id: str, allow_unpinned: bool = False, offline: bool = False) -> Path:
    """Make every file of the dataset present and verified in the data dir; return the stamp file."""
    ds = get_dataset(dataset_id)
    target_dir = data_dir(cfg, ds.id)
    target_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    provider = get_provider(ds.id)
    if provider is not None and any(find_file(cfg, ds, f) is None for f in ds.files) and provider.available():
        provider.write(target_dir)  # verified below against the pinned sha256, like a download
    if not ds.files:
        lines.append(f"bundled: {ds.bundled}")
    for f in ds.files:
        dest = target_dir / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = find_file(cfg, ds, f)
        if src is None:
            if offline or not f.url.startswith("https://"):
                raise DataError(_missing_message(cfg, ds, f, "offline: not in the data dir or mirror"))
            try:
                _download(f.url, dest)
            except OSError as exc:
                raise DataError(_missing_message(cfg, ds, f, f"download failed: {exc}")) from None
        elif src != dest:
            tmp = dest.with_name(dest.name + ".part")
            shutil.copyfile(src, tmp)
            tmp.replace(dest)
        try:
            digest = verify(dest, f, ds, allow_unpinned)
        except DataError:
            if src is not None and src != dest:
                dest.unlink(missing_ok=True)  # never leave an unverified copy in the data dir
            raise
        lines.append(f"{digest}  {f.name}{'  (unpinned)' if f.sha256 is None else ''}")
    stamp = stamp_path(cfg, ds.id)
    tmp = stamp.with_name(STAMP + ".part")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(stamp)
    return stamp


def dataset_files(cfg: Mapping, dataset_id: str) -> list[Path]:
    """Paths of the verified files (after :func:`fetch`)."""
    ds = get_dataset(dataset_id)
    if not ds.files:
        return []  # bundled with an installed package: nothing to fetch
    if not stamp_path(cfg, ds.id).is_file():
        f = ds.files[0]
        raise DataError(_missing_message(cfg, ds, f, "not fetched/verified yet: run `python -m fedrepro data fetch "
                                                    f"{ds.id}`"))
    return [data_dir(cfg, ds.id) / f.name for f in ds.files]
