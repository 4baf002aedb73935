"""Parse a verified dataset, partition it as a paper describes, and write it in the federated on-disk format.

A *partition spec* (config/partitions.yaml) names a dataset, a scheme from fedrepro.data.partition, its parameters
and a seed. A dataset whose one file holds several datasets takes a loader option among the parameters: TFF's
``emnist_all.sqlite`` (``tff_emnist_sqlite``) holds the digits-only and the 62-class EMNIST, and
``params: {only_digits: true}`` picks one, as TFF's ``emnist.load_data(only_digits=...)``: the options a loader
names (its ``options`` attribute) go to the loader, the other parameters to the scheme, and the manifest's
``source`` records the options.

:func:`prepare` is what the `partition_dataset` rule runs. It verifies the input files again
(fedrepro.data.sources.verified_files) and the manifest records the sha256 each one matched (the catalog's pin; a
file verified by its content check, whose sha256 was recorded at its first fetch, is listed under ``unpinned``), so
a partitioned dataset can always be traced to the exact bytes it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.errors import ConfigError


@dataclass(frozen=True)
class Arrays:
    """One dataset as arrays: features and labels per split (test may be absent)."""

    train_x: np.ndarray
    train: object  # LabelSet
    test_x: np.ndarray | None
    test: object | None
    n_classes: int


def _idx(files: list[Path]) -> Arrays:
    from fedrepro.data.mnist import load_idx_dataset
    from fedrepro.data.partition import LabelSet

    d = load_idx_dataset(files)
    return Arrays(d["train"].images, LabelSet(d["train"].labels), d["test"].images, LabelSet(d["test"].labels), 10)


def _cifar(loader: str, n_classes: int) -> Callable[[list[Path]], Arrays]:
    def load(files: list[Path]) -> Arrays:
        from fedrepro.data import cifar
        from fedrepro.data.partition import LabelSet

        d = getattr(cifar, loader)(files[0])
        ls = [LabelSet(s.labels, coarse=s.coarse_labels) for s in (d.train, d.test)]
        return Arrays(d.train.images, ls[0], d.test.images, ls[1], n_classes)

    return load


def _femnist(files: list[Path]) -> Arrays:
    from fedrepro.data.leaf import load_femnist
    from fedrepro.data.partition import LabelSet

    d = load_femnist(files)
    # writers are identified by name so train and test samples of one writer share a group id
    ls = {s: LabelSet(d[s].y, groups=np.asarray(d[s].users)[d[s].client]) for s in ("train", "test")}
    return Arrays(d["train"].x, ls["train"], d["test"].x, ls["test"], 62)


def _leaf_femnist(files: list[Path]) -> Arrays:
    """Full LEAF FEMNIST built from NIST SD19's zips by LEAF's pipeline (fedrepro.data.nist_sd19, its options
    LEAF_FEMNIST), in the same form as ``_femnist``."""
    from fedrepro.data.nist_sd19 import load_splits
    from fedrepro.data.partition import LabelSet

    d = load_splits(files)
    ls = {s: LabelSet(d[s].y, groups=np.asarray(d[s].users)[d[s].client]) for s in ("train", "test")}
    return Arrays(d["train"].x, ls["train"], d["test"].x, ls["test"], 62)


def _digits(files: list[Path]) -> Arrays:
    from fedrepro.data.digits import load_digits
    from fedrepro.data.partition import LabelSet

    d = load_digits()  # scikit-learn ships one split; partitions of it have no test split
    return Arrays(d.images, LabelSet(d.labels), None, None, 10)


def _tff_emnist(dataset_id: str) -> Callable[..., Arrays]:
    def load(files: list[Path], only_digits: bool | None = None) -> Arrays:
        """Every writer's examples in TFF's (sorted) client order, pixels as shipped (1.0 = background: the PPSGD
        code feeds them uninverted), writers as groups so a natural partition keeps TFF's per-writer split. The
        same arrays from either release (h5: ``tff_emnist_digits`` / ``tff_emnist``; sqlite: ``tff_emnist_sqlite``
        with ``only_digits``)."""
        from fedrepro.data import tff_emnist as em
        from fedrepro.data.partition import LabelSet

        if only_digits is not None and not isinstance(only_digits, bool):
            raise ConfigError(
                f"partitions: dataset {dataset_id}: only_digits must be true or false, got {only_digits!r}"
            )
        if dataset_id == em.SQLITE_ID and only_digits is None:
            raise ConfigError(
                f"partitions: dataset {dataset_id} holds both TFF EMNIST label sets: say which with "
                "`params: {only_digits: true}` (10 digit classes) or `params: {only_digits: false}` (62 classes)"
            )
        train, test = em.load_data(files, only_digits)
        n_classes = train.num_classes
        with train, test:
            out = []
            for h in (train, test):
                clients = [h.client(cid) for cid in h.client_ids]
                x = np.concatenate([c.pixels.reshape(len(c), 28, 28) for c in clients])
                y = np.concatenate([c.labels for c in clients]).astype(np.int64)
                groups = np.repeat(np.asarray(h.client_ids), [len(c) for c in clients])
                out.append((x, LabelSet(y, groups=groups)))
        return Arrays(out[0][0], out[0][1], out[1][0], out[1][1], n_classes)

    load.options = ("only_digits",)
    return load


LOADERS: dict[str, Callable[..., Arrays]] = {
    "tff_emnist_sqlite": _tff_emnist("tff_emnist_sqlite"),
    "tff_emnist_digits": _tff_emnist("tff_emnist_digits"),
    "tff_emnist": _tff_emnist("tff_emnist"),
    "mnist": _idx,
    "fashion_mnist": _idx,
    "cifar10": _cifar("load_cifar10", 10),
    "cifar100": _cifar("load_cifar100", 100),
    "leaf_femnist_sf005": _femnist,
    "leaf_femnist": _leaf_femnist,
    "digits": _digits,
}


def loader_options(dataset_id: str) -> tuple[str, ...]:
    """The partition parameters the dataset's loader takes (none for most datasets)."""
    return tuple(getattr(LOADERS.get(dataset_id), "options", ()))


def load_arrays(dataset_id: str, files: list[Path], options: Mapping | None = None) -> Arrays:
    """The dataset's arrays; ``options`` go to its loader, which must take them (:func:`loader_options`)."""
    if dataset_id not in LOADERS:
        raise ConfigError(f"partitions: no array loader for dataset {dataset_id!r} (have: {', '.join(LOADERS)})")
    loader = LOADERS[dataset_id]
    options = dict(options or {})
    unknown = sorted(set(options) - set(getattr(loader, "options", ())))
    if unknown:
        takes = ", ".join(getattr(loader, "options", ())) or "none"
        raise ConfigError(
            f"partitions: dataset {dataset_id!r}'s loader takes no option {', '.join(unknown)} (takes: {takes})"
        )
    return loader(files, **options)


def prepare(cfg: Mapping, name: str, spec: Mapping, out_dir: Path) -> Path:
    """Partition dataset ``spec['dataset']`` by ``spec['scheme']`` and write it to ``out_dir``."""
    from fedrepro.data import fedformat
    from fedrepro.data.partition import partition
    from fedrepro.data.sources import verified_files

    verified = verified_files(cfg, spec["dataset"])
    params = dict(spec.get("params") or {})
    options = {k: params.pop(k) for k in loader_options(spec["dataset"]) if k in params}
    arrays = load_arrays(spec["dataset"], [v.path for v in verified], options)
    part = partition(spec["scheme"], arrays.train, arrays.test, seed=spec["seed"], **params)
    source = {
        "dataset": spec["dataset"],
        "files": {v.name: v.sha256 for v in verified},
        "unpinned": [v.name for v in verified if not v.pinned],
    }
    if options:
        source["load"] = options  # which of the file's datasets (TFF EMNIST's only_digits)
    return fedformat.write(
        out_dir,
        part,
        arrays.train_x,
        arrays.train,
        arrays.test_x,
        arrays.test,
        source=source,
        n_classes=arrays.n_classes,
        overwrite=True,
        extra={"name": name, "description": spec["description"]},
    )
