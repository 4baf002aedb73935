"""Shared setup of the federated-learning benchmarks (``engine.py``, ``fedavg_frameworks.py``): the Table-2-shaped
setting of Ozkara et al. 2023, its data, the minibatch stream of fedrepro's engine, a plain PyTorch local-training
routine, and the machine description recorded with every result. Not a test; nothing here is timed.

Setting: Fashion-MNIST partition ``results/data/fashion_mnist_pathological_m50`` (m = 50 clients, 3 classes per
client, 1,200 training images each; built by ``python -m fedrepro data partition fashion_mnist_pathological_m50
--out results/data/fashion_mnist_pathological_m50``), all 50 clients every round, LeNet5 (44,426 parameters),
batch size 20, tau = 10 local SGD steps per round, lr 0.05, weight decay 1e-4 (FedAvg's default), seed 0. Without
the partition the benchmarks fall back to synthetic uint8 28x28 arrays of the same size (stated in the output).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedrepro.learning.data import from_arrays
from fedrepro.learning.models import LeNet5
from fedrepro.seeding import rng_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REAL = ROOT / "results" / "data" / "fashion_mnist_pathological_m50"

N_CLIENTS = 50
BATCH_SIZE = 20
TAU = 10
LR = 0.05
WEIGHT_DECAY = 1e-4
SEED = 0


def load_data(m: int = N_CLIENTS, n_train: int = 1200, n_test: int = 200, seed: int = 0):
    """(FederatedDataset, description): the real partition when built, else synthetic arrays of the same size."""
    if (REAL / "manifest.json").is_file():
        from fedrepro.data import fedformat

        ds = fedformat.load(REAL)
        return ds, f"Fashion-MNIST, {REAL.relative_to(ROOT)} ({ds.n_clients} clients)"
    rng = np.random.default_rng(seed)

    def block(n):
        return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)

    ds = from_arrays([block(n_train) for _ in range(m)], [block(n_test) for _ in range(m)], n_classes=10)
    return ds, f"synthetic uint8 28x28, {m} clients x ({n_train} train, {n_test} test), random labels"


def initial_model(seed: int = SEED) -> nn.Module:
    """LeNet5 initialized exactly as fedrepro's engine initializes it (factory under ``torch.manual_seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LeNet5()


def engine_rows(ds, rounds: int, *, batch_size: int = BATCH_SIZE, tau: int = TAU, seed: int = SEED) -> np.ndarray:
    """(rounds, tau, n_clients, batch_size) global row indices: the minibatches fedrepro's engine draws when all
    clients are sampled every round (same stream: ``rng_for("learning.train", seed)``, client sampling then one
    ``sample_rows`` per local step). Feeding them to the other implementations makes all of them do the same math."""
    rng = rng_for("learning.train", seed)
    m = ds.n_clients
    out = np.empty((rounds, tau, m, batch_size), dtype=np.int64)
    for r in range(rounds):
        sel = np.sort(rng.choice(m, m, replace=False))
        for s in range(tau):
            out[r, s] = ds.sample_rows(sel, batch_size, rng, "train", replace=False)
    return out


def features(ds) -> tuple[torch.Tensor, torch.Tensor]:
    """All features as float32 (n, 1, 28, 28) in [0, 1] (uint8 / 255, as the engine's ClientData) and labels."""
    x = torch.from_numpy(np.array(ds.features)).to(torch.float32).mul_(1 / 255)
    return x.reshape(len(x), 1, 28, 28), torch.from_numpy(np.asarray(ds.labels, dtype=np.int64))


_CACHE: dict = {}


def cached_data(rows_file: str) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """(features, labels, pre-drawn rows from ``rows_file``), loaded once per process (a Flower client's Ray actor
    keeps them across rounds, as a real client keeps its local data)."""
    if rows_file not in _CACHE:
        ds, _ = load_data()
        _CACHE[rows_file] = (*features(ds), np.load(rows_file))
    return _CACHE[rows_file]


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rows: np.ndarray,
    *,
    lr: float = LR,
    weight_decay: float = WEIGHT_DECAY,
) -> float:
    """The plain PyTorch client update shared by the per-client loop and the Flower client: ``len(rows)`` SGD steps
    (``torch.optim.SGD``, no momentum) on minibatches ``x[rows[s]]`` (DataLoader-free batching: index the client's
    preloaded tensor). Returns the mean training loss."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=weight_decay)
    total = 0.0
    for r in rows:
        idx = torch.from_numpy(r)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return total / len(rows)


def machine(threads: int | None = None) -> dict:
    """Machine description recorded with every benchmark result."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": threads or torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "date": time.strftime("%Y-%m-%d"),
    }


class Load:
    """``os.getloadavg()`` before and after a measurement: other processes on the machine skew the timings."""

    def __enter__(self):
        self.before = os.getloadavg()
        return self

    def __exit__(self, *exc):
        self.after = os.getloadavg()

    def record(self) -> dict:
        return {"loadavg_before": list(self.before), "loadavg_after": list(self.after)}
