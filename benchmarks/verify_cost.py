"""What it costs a run to hash every input file by content before it starts (fedrepro.run_inputs.run_inputs: bit rot
keeps size and mtime, so the cheap stamp check cannot see it).

    python benchmarks/verify_cost.py [--experiment fedhdp.noniid_mnist] [--repeat 5]

Prints the bytes hashed, the median seconds of ``run_inputs`` over the repeats and the rate, with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from fedrepro.config import load_global, resolve_experiment
from fedrepro.run_inputs import run_inputs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", default="fedhdp.noniid_mnist")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cfg = load_global()
    exp = resolve_experiment(cfg, args.experiment, "paper")
    data, partitions, _ = run_inputs(cfg, exp)
    files = [p for ps in data.values() for p in ps] + [
        f for d in partitions.values() for f in d.iterdir() if f.name in ("features.npy", "index.parquet")
    ]
    size = sum(f.stat().st_size for f in files)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        run_inputs(cfg, exp)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(
        f"{args.experiment}: {len(files)} files, {size / 1e6:.1f} MB hashed in {med:.3f} s (median of {args.repeat}; "
        f"{size / 1e9 / med:.2f} GB/s); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
