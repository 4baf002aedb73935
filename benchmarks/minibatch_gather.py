"""Milliseconds per local step that the engine spends drawing and gathering the clients' minibatches
(``ClientData.sample``: the rows, then ``ClientData.gather``), against the gather the engine used before (the
features indexed with a tensor, cast, then scaled), in one process, on one thread.

Not a test. Setting: FedHDP's non-IID MNIST step, K = 100 clients x batch 20 of the 2,000-client partition
``results/data/mnist_fedhdp_noniid`` when it exists, else synthetic uint8 28x28 rows of the same count and client
sizes (stated in the output); ``--clients`` and ``--batch`` change it. Both gathers must give the same bits
(checked on every step before timing). Each is timed over ``--steps`` steps' rows, best of ``--repeat``, interleaved.

    python benchmarks/minibatch_gather.py
    python benchmarks/minibatch_gather.py --clients 50 --batch 20      # AdaPeD's Table-2 step
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from fedrepro.data import fedformat
from fedrepro.learning import engine
from fedrepro.learning.data import ClientData, from_arrays

PARTITION = Path("results/data/mnist_fedhdp_noniid")


def dataset(seed: int = 0):
    """The partition when it is built here, else synthetic rows of MNIST's shape: (dataset, what it is)."""
    if (PARTITION / "manifest.json").is_file():
        return fedformat.load(PARTITION), f"the partition {PARTITION}"
    rng = np.random.default_rng(seed)
    blocks = [(rng.integers(0, 256, (30, 28, 28), dtype=np.uint8), rng.integers(0, 10, 30)) for _ in range(2000)]
    return from_arrays(blocks, [(b[0][:5], b[1][:5]) for b in blocks], n_classes=10), "synthetic rows (no partition)"


def gather_before(data: ClientData, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``ClientData.gather`` as it was: tensor indexing, then the cast, then the scaling, each a new tensor."""
    idx = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))
    x = data._features[idx].to(torch.float32) * (1 / 255)
    return x.reshape(*rows.shape, *data.feature_shape), data._labels[idx]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50, help="steps' rows per timing (FedHDP: 50 a round)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    engine.keep_freed_memory()  # as engine.train does on CPU
    ds, what = dataset()
    data = ClientData(ds, "cpu", feature_shape=(784,))
    rng = np.random.default_rng(0)
    clients = np.sort(rng.choice(ds.n_clients, args.clients, replace=False))
    rows = [data.sample_rows(clients, args.batch, rng) for _ in range(args.steps)]
    for r in rows:
        (x, y), (xb, yb) = data.gather(r), gather_before(data, r)
        if not (torch.equal(x.view(torch.int32), xb.view(torch.int32)) and torch.equal(y, yb)):
            raise SystemExit("the two gathers differ")
    times: dict[str, list[float]] = {"sample_rows": [], "before": [], "this": []}
    for _ in range(args.repeat):
        for name, fn in (
            ("sample_rows", lambda r: data.sample_rows(clients, args.batch, rng)),
            ("before", lambda r: gather_before(data, r)),
            ("this", data.gather),
        ):
            t = time.perf_counter()
            for r in rows:
                fn(r)
            times[name].append((time.perf_counter() - t) * 1e3 / len(rows))
    best = {k: min(v) for k, v in times.items()}
    print(f"{what}; {args.clients} clients x batch {args.batch}, {args.steps} steps, 1 thread, load {os.getloadavg()}")
    print(f"drawing the rows (sample_rows): {best['sample_rows']:.3f} ms a step")
    print(f"gather before: {best['before']:.3f} ms a step; all: {', '.join(f'{t:.3f}' for t in times['before'])}")
    print(f"gather this:   {best['this']:.3f} ms a step; all: {', '.join(f'{t:.3f}' for t in times['this'])}")
    print(f"this / before (best): {best['this'] / best['before']:.2f}x the time; the same bits on every step")


if __name__ == "__main__":
    main()
