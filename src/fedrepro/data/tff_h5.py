"""Read-only, per-client lazy access to TFF's HDF5 federated datasets (no TensorFlow).

Layout (TFF ``tff.simulation.HDF5ClientData``, used by ``emnist.load_data`` and the h5 releases of
``stackoverflow.load_data``): a top-level group ``examples`` with one subgroup per client, named by the client id;
each subgroup holds one dataset per feature, all with the same first dimension (the client's examples). TFF lists
the clients as ``sorted(file['examples'].keys())`` and yields a client's features sorted by name; this module does
the same.

Laziness: opening the file and listing ``client_ids`` read only the group index; :meth:`TffH5.num_examples` reads a
dataset's shape (metadata); only :meth:`TffH5.client` reads the arrays, and only those of that client. h5py is
imported inside the functions (fedrepro.data modules are imported by the catalog at start-up).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from fedrepro.errors import DataError

EXAMPLES_GROUP = "examples"


def decode_strings(arr: np.ndarray) -> list[str]:
    """An h5 string dataset (variable-length bytes/str, or fixed-length ``S``) as a list of Python str."""
    out = []
    for v in np.asarray(arr, dtype=object).ravel().tolist():
        out.append(v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v))
    return out


class TffH5:
    """One TFF ``*.h5`` federated file. Use as a context manager or call :meth:`close`."""

    #: feature name -> "string" | numpy dtype kind(s) accepted; subclasses fill it to validate the upstream schema
    FEATURES: dict[str, str] = {}

    def __init__(self, path: str | Path):
        import h5py

        self.path = Path(path)
        try:
            self._file = h5py.File(self.path, "r")
        except (OSError, ValueError) as exc:
            raise DataError(f"{self.path}: cannot open as HDF5: {exc}") from None
        if EXAMPLES_GROUP not in self._file or not isinstance(self._file[EXAMPLES_GROUP], h5py.Group):
            self._file.close()
            raise DataError(f"{self.path}: not a TFF federated h5 file (no top-level group '{EXAMPLES_GROUP}')")
        self._examples = self._file[EXAMPLES_GROUP]
        self._client_ids: list[str] | None = None

    # -- context manager -------------------------------------------------------------------------------------------
    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- clients ---------------------------------------------------------------------------------------------------
    @property
    def client_ids(self) -> list[str]:
        """All client ids, sorted as TFF sorts them (reads the group index only)."""
        if self._client_ids is None:
            self._client_ids = sorted(self._examples.keys())
        return self._client_ids

    def __len__(self) -> int:
        return len(self._examples)

    def __contains__(self, client_id: object) -> bool:
        return isinstance(client_id, str) and client_id in self._examples

    def __iter__(self) -> Iterator[str]:
        return iter(self.client_ids)

    def _group(self, client_id: str):
        if client_id not in self:
            raise KeyError(f"{self.path}: no client {client_id!r}")
        return self._examples[client_id]

    def num_examples(self, client_id: str) -> int:
        """Number of examples of one client, from a dataset's shape (no data read)."""
        g = self._group(client_id)
        names = sorted(g.keys())
        if not names:
            return 0
        return int(g[names[0]].shape[0])

    def raw(
        self, client_id: str, features: Sequence[str] | None = None, limit: int | None = None
    ) -> dict[str, np.ndarray]:
        """The client's datasets as numpy arrays (all of them, or ``features``), checked against the schema.

        ``limit``: read only the first ``limit`` examples (in stored order) of each dataset.
        """
        g = self._group(client_id)
        names = sorted(g.keys()) if features is None else list(features)
        out = {}
        for name in names:
            if name not in g:
                raise DataError(
                    f"{self.path}: client {client_id!r} has no dataset {name!r} (has {', '.join(sorted(g.keys()))})"
                )
            ds = g[name]
            try:
                out[name] = ds[()] if limit is None or ds.ndim == 0 else ds[: max(int(limit), 0)]
            except OSError as exc:
                raise DataError(f"{self.path}: cannot read {ds.name}: {exc}") from None
        lengths = {k: (v.shape[0] if v.ndim else None) for k, v in out.items()}
        if len(set(lengths.values())) > 1:
            raise DataError(f"{self.path}: client {client_id!r}: datasets of different lengths {lengths}")
        for name, arr in out.items():
            self._check_dtype(client_id, name, arr)
        return out

    def _check_dtype(self, client_id: str, name: str, arr: np.ndarray) -> None:
        want = self.FEATURES.get(name)
        if want is None:
            return
        if want == "string":
            ok = arr.dtype.kind in "OSU"
        else:
            ok = arr.dtype.kind in want
        if not ok:
            raise DataError(
                f"{self.path}: client {client_id!r}: dataset {name!r} has dtype {arr.dtype}, "
                f"expected {'a string type' if want == 'string' else 'kind ' + want}"
            )
