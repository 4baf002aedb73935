"""Benchmark of the partitioned-dataset format (fedrepro.data.fedformat): write, load, per-client access, RSS.

Not a test. Default: a synthetic array the size of Fashion-MNIST (60,000 + 10,000 images of 28x28 uint8, 10
classes) partitioned 50 ways (pathological, 3 classes per client), written in the format, loaded, every client's
training block read, and a vectorized batch gathered. Results go to benchmarks/results/data_loading.json (not
committed).

    python benchmarks/data_loading.py
    python benchmarks/data_loading.py --dataset path/to/arrays.npz   # keys x_train, y_train, x_test, y_test

``--dataset`` takes an ``.npz`` of parsed arrays (as the dataset parsers return them) instead of synthetic data.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedrepro.data import fedformat
from fedrepro.data.partition import partition

HERE = Path(__file__).resolve().parent


def vm_hwm_mib(pid: int | str = "self") -> float | None:
    """A process's address-space high-water mark (VmHWM in /proc/<pid>/status) in MiB; None where there is none
    to read (not Linux, or the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB.

    ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, except on Linux, where a child process started by fork+exec
    inherits its parent's ru_maxrss; there the address space's own high-water mark (:func:`vm_hwm_mib`) is used,
    which starts afresh at exec."""
    hwm = vm_hwm_mib()
    if hwm is not None:
        return hwm
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024


def synthetic(n_train: int, n_test: int, seed: int):
    rng = np.random.default_rng(seed)
    ytr, yte = rng.integers(0, 10, n_train), rng.integers(0, 10, n_test)
    xtr = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    xte = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    return xtr, ytr, xte, yte


def read_phase(out_dir: Path, repeats: int) -> dict:
    import pyarrow.parquet  # noqa: F401  (imported up front so the baseline below includes it)

    rss_base = peak_rss_mib()
    load_s, access_s, batch_s = [], [], []
    checksum = 0
    rss_load_first = None
    for _ in range(repeats):
        t = time.perf_counter()
        ds = fedformat.load(out_dir)
        load_s.append(time.perf_counter() - t)
        rss_load_first = peak_rss_mib() if rss_load_first is None else rss_load_first
        t = time.perf_counter()
        for c in range(ds.n_clients):  # read every byte of every client's train block
            x, y = ds.client_arrays(c, "train")
            checksum += int(x.sum(dtype=np.uint64)) + int(y.sum())
        access_s.append(time.perf_counter() - t)
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        rows = ds.sample_rows(np.arange(ds.n_clients), 20, rng)  # one batch of 20 for every client
        xb, _ = ds.features[rows], ds.labels[rows]  # the gather is what is timed
        batch_s.append(time.perf_counter() - t)
        n_clients = ds.n_clients
        del ds
    t = time.perf_counter()
    fedformat.load(out_dir, verify=True)
    verify = time.perf_counter() - t
    return {
        "load_s_min": round(min(load_s), 5),
        "load_with_sha256_verify_s": round(verify, 4),
        "access_all_clients_train_s_min": round(min(access_s), 4),
        "access_per_client_ms": round(1000 * min(access_s) / n_clients, 4),
        "batch_20_per_client_all_clients_s_min": round(min(batch_s), 5),
        "batch_shape": list(xb.shape),
        "peak_rss_mib_reader": round(peak_rss_mib(), 1),
        "peak_rss_mib_reader_steps": {
            "after_imports": round(rss_base, 1),
            "after_first_load": round(rss_load_first, 1),
        },
        "checksum": checksum,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, help=".npz with x_train, y_train, x_test, y_test (default: synthetic)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--classes-per-client", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=60_000)
    ap.add_argument("--n-test", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the timed load/access steps (min reported)")
    ap.add_argument("--workdir", type=Path, help="where to write the dataset (default: a temp dir, removed)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "data_loading.json")
    ap.add_argument("--read-only", type=Path, help=argparse.SUPPRESS)  # internal: the reader process
    args = ap.parse_args(argv)
    if args.read_only:
        print(json.dumps(read_phase(args.read_only, args.repeats)))
        return {}

    rss0 = peak_rss_mib()
    if args.dataset:
        with np.load(args.dataset, allow_pickle=False) as z:
            xtr, ytr, xte, yte = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
        source = fedformat.source_info(args.dataset.stem, [args.dataset])
    else:
        xtr, ytr, xte, yte = synthetic(args.n_train, args.n_test, 0)
        source = {"dataset": "synthetic-fmnist-size", "files": {}}
    rss_data = peak_rss_mib()
    feature_shape, feature_dtype = list(xtr.shape[1:]), str(xtr.dtype)

    t = time.perf_counter()
    p = partition("pathological", ytr, yte, seed=0, n_clients=args.clients, classes_per_client=args.classes_per_client)
    t_partition = time.perf_counter() - t

    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="fedrepro-bench-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir
    out_dir = workdir / "ds"
    t = time.perf_counter()
    fedformat.write(out_dir, p, xtr, ytr, xte, yte, source=source, overwrite=True)
    t_write = time.perf_counter() - t
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    rss_write = peak_rss_mib()
    del xtr, xte

    # reading runs in a fresh process, so its peak RSS is that of a reader only (memmap: pages, not copies)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--read-only", str(out_dir), "--repeats", str(args.repeats)]
    read = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    result = {
        "dataset": source["dataset"],
        "feature_shape": feature_shape,
        "feature_dtype": feature_dtype,
        "n_train": int(len(ytr)),
        "n_test": int(len(yte)),
        "clients": args.clients,
        "scheme": "pathological",
        "classes_per_client": args.classes_per_client,
        "on_disk_bytes": size,
        "partition_s": round(t_partition, 4),
        "write_s": round(t_write, 4),
        **read,
        "peak_rss_mib_writer": {
            "start": round(rss0, 1),
            "after_data": round(rss_data, 1),
            "after_write": round(rss_write, 1),
        },
        "repeats": args.repeats,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }
    if tmp is not None:
        tmp.cleanup()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
