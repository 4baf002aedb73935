"""What every federated training kind starts from: threads, the partition, its client data on a device, and the
model factory (one setup for AdaPeD's and FedHDP's learning experiments)."""

from __future__ import annotations

import os
from typing import Any

from fedrepro.experiments import RunContext
from fedrepro.experiments.params import INT1

# The parameters training_setup reads: a fragment of every training kind's schema.
SETUP_PROPERTIES = {
    "partition": {"type": "string"},
    # null: the partition's own feature shape
    "feature_shape": {"type": ["array", "null"], "minItems": 1, "items": INT1, "default": None},
    "standardize": {"type": "boolean", "default": False},
    "model": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "threads": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: FEDREPRO_THREADS, else 1
    # auto: cuda when torch sees a GPU (paper-scale CNNs), else cpu
    "device": {"enum": ["auto", "cpu", "cuda"], "default": "auto"},
    "checkpoint_every": {**INT1, "default": 10},  # rounds between checkpoints of each training (kill-and-resume)
    # batched (default): clients vmapped / the batched CNN; loop: the per-client reference loop of the same math in
    # another float order (benchmarks/compare_runs.py: the yardstick for an engine change's rounding)
    "engine": {"enum": ["batched", "loop"], "default": "batched"},
}


def vectorize(p: dict) -> bool:
    """engine.train's ``vectorize`` for ``params.engine``."""
    return p["engine"] == "batched"


def training_workers(p: dict, device, n_trainings: int, outside: bool) -> int:
    """How many processes a run's independent trainings (a table's methods, epsilons and lr grids; FedHDP's methods)
    take: one per training up to the job's threads (fedrepro.processes: FEDREPRO_THREADS, its threads shared among
    them); 1, here in turn, where ``params.threads`` is set (the run's own thread count), the device is a GPU (one,
    shared), a method comes from outside the package (``outside``: its class is registered in this process only), or
    the run is a replay of its first rounds (the limit is this process's)."""
    from fedrepro.learning.engine import replaying
    from fedrepro.processes import workers_for

    if p["threads"] is not None or device.type != "cpu" or outside or replaying():
        return 1
    return workers_for(n_trainings)


def training_setup(p: dict, ctx: RunContext):
    """What every training kind starts from: torch threads (params.threads, when null FEDREPRO_THREADS, else 1), the
    partition, its ClientData on params.device (auto: a GPU when torch sees one; feature_shape, e.g. LEAF's flat 784
    features -> [1, 28, 28]; standardize: pooled train mean/std), and the model factory with its keyword arguments
    (n_classes defaults to the partition's). Returns (ds, data, factory, model_kw)."""
    import torch

    from fedrepro.data import fedformat
    from fedrepro.learning.data import ClientData
    from fedrepro.learning.engine import resolve_device
    from fedrepro.learning.models import build_model

    torch.set_num_threads(p["threads"] or int(os.environ.get("FEDREPRO_THREADS", "1")))
    ds = fedformat.load(ctx.partitions[p["partition"]])
    device = resolve_device(p["device"])
    print(f"[fedrepro] training on {device}", flush=True)
    data = ClientData(ds, device, feature_shape=p["feature_shape"], standardize=p["standardize"])
    model_kw: dict[str, Any] = {k: v for k, v in p["model"].items() if k != "name"}
    model_kw.setdefault("n_classes", ds.n_classes)
    return ds, data, (lambda: build_model(p["model"]["name"], **model_kw)), model_kw
