"""The datasets fedrepro reads: canonical URL, file name and sha256 of every file.

A file whose sha256 is ``None`` has not yet been pinned (no networked machine has fetched it for this project);
fetching it fails unless ``--allow-unpinned`` is given, which records the observed hash beside the file so it can
be pinned here.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrepro.errors import ConfigError


@dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    sha256: str | None


@dataclass(frozen=True)
class Dataset:
    id: str
    title: str
    files: tuple[RemoteFile, ...]
    citation: str
    licence: str = ""


DATASETS: dict[str, Dataset] = {}


def register(ds: Dataset) -> Dataset:
    DATASETS[ds.id] = ds
    return ds


def get_dataset(dataset_id: str) -> Dataset:
    if dataset_id not in DATASETS:
        raise ConfigError(f"datasets: unknown dataset {dataset_id!r} (known: {', '.join(sorted(DATASETS))})")
    return DATASETS[dataset_id]


register(
    Dataset(
        id="election_county_returns",
        title="MIT Election Data and Science Lab, County Presidential Election Returns 2000-2020",
        files=(
            RemoteFile(
                name="countypres_2000-2020.csv",
                # Harvard Dataverse, doi:10.7910/DVN/VOQCHQ, file IQNIFU; format=original serves the CSV as deposited.
                url="https://dataverse.harvard.edu/api/access/datafile/:persistentId"
                "?persistentId=doi:10.7910/DVN/VOQCHQ/IQNIFU&format=original",
                # GAP: not pinned. No machine with internet access has fetched this file for fedrepro yet; run
                # `python -m fedrepro data fetch election_county_returns --allow-unpinned` on one and pin the
                # sha256 it records here.
                sha256=None,
            ),
        ),
        citation='MIT Election Data and Science Lab, 2018, "County Presidential Election Returns 2000-2020", '
        "https://doi.org/10.7910/DVN/VOQCHQ, Harvard Dataverse",
        licence="CC0 1.0",
    )
)
