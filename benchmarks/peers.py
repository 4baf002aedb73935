"""Seconds per round of the same federated workload in fedrepro and in its peers (a plain PyTorch loop, pfl in one
process and in its multi-process mode, FedLab, Flower), each framework in its own process. Not a test; the table goes
to stdout and the rows to benchmarks/results/peers.json (not committed).

Workloads (``--workloads``), each a FedAvg round in which every client is sampled:
  mlp    FedHDP's MNIST round: the 784-50-10 MLP, 100 clients x 50 local SGD steps of batch 20, lr 0.5, no weight decay
         (FedHDP samples 100 of its 2,000 clients; here the 100 are the whole population)
  lenet  AdaPeD's Table-2 round: LeNet5 on 1x28x28, 50 clients x 10 local SGD steps of batch 20, lr 0.05, weight decay
         1e-4
``--clients`` and ``--steps`` override the client count and the local steps of every workload;
``--fedrepro-block-mib`` fedrepro's client blocks (``engine.train``'s ``block_bytes`` in MiB; 0: every local step over
all clients; default the engine's). ``--dp`` adds
DP-FedAvg with server-side noise: each client's model update (its local model minus the global model) is clipped to
L2 norm C over all parameters together (``--clip``; default 1 for mlp, 0.01 for lenet, below most clients' update
norms so that the clipping acts), the clipped updates are summed, N(0, (z C)^2) is added per coordinate (z =
``--noise-multiplier``) and the global model moves by the sum over the client count.

Same math everywhere: the data are synthetic MNIST-shaped uint8 arrays drawn from a fixed numpy seed (10 classes;
30 training rows per client for mlp, 1,200 for lenet), the features scaled by 1/255 as fedrepro's ClientData does.
The parent draws every round's minibatch rows once: exactly the rows fedrepro's engine draws
(``fl_setting.engine_rows``), stored with the arrays in one .npz that every framework's process reads, so each peer
trains client c in round r on the same rows in the same order. The model is built once under ``torch.manual_seed``
and its state dict saved; every framework loads it. Local training is plain SGD (no momentum) on the mean
cross-entropy, aggregation the unweighted mean (every client has the same example count). With the DP noise off
(z = 0) the final models of all frameworks must agree to float rounding: the table's ``max|d|`` column is the largest
absolute parameter difference to fedrepro's final model at the same workload and threads. With ``--dp`` and z > 0 the
noised runs cannot agree (every framework draws its own noise), so the DP workload is also run once with z = 0 at the
first thread count and that row carries the check.

Frameworks (``--frameworks``), each run as ``python benchmarks/peers.py --worker FRAMEWORK --workload W --threads T``:
  fedrepro  ``fedrepro.learning.engine.train`` with ``FedAvg`` / ``DPFedAvgServer``: all clients in one batched step
  fedrepro-mp  fedrepro's clients split over processes as pfl-mp splits them (FedAvg only; #42's "clients split
            across processes"): ``torchrun --nproc-per-node T``, each process one thread running the engine's batched
            ``FedAvg.local_step`` for its contiguous share of the clients, then one gloo all-reduce of their models'
            sum. fedrepro itself does not train this way: the row measures what it would give
  loop      plain PyTorch: per round and client a fresh model loaded with the global state dict, a fresh
            ``torch.optim.SGD`` (``fl_setting.local_train``: DataLoader-free batching), then the mean of the state dicts
  pfl       pfl's simulation: ``FederatedAveraging`` on a ``SimulatedBackend``, ``PyTorchModel`` (local SGD from
            ``local_optimizer_create``, central SGD with lr 1 applying the mean update), a ``FederatedDataset`` whose
            user c is client c's rows of the current round, ``WeightByUser``, and for DP
            ``CentrallyAppliedPrivacyMechanism(GaussianMechanism(C, z))``
  pfl-mp    the same script in pfl's multi-process mode, launched as pfl documents for PyTorch: ``torchrun --standalone
            --nproc-per-node T`` (T processes of one thread, gloo on the loopback interface); pfl shards each cohort
            over the processes and all-reduces the summed update. Needs the client count divisible by T.
  fedlab    FedLab's standalone simulation: ``SGDSerialClientTrainer`` (weight decay added to its optimizer) over a
            ``FedDataset`` whose dataloader serves client c's rows of the current round (``DataLoader``, no shuffling),
            ``SyncServerHandler`` with sample ratio 1, ``StandalonePipeline``; for DP the handler's ``global_update``
            clips, sums and noises the updates (FedLab has no DP-FedAvg of its own)
  flower    Flower's Message API simulation (``run_simulation``, ``ServerApp`` + ``flwr.serverapp.strategy.FedAvg``,
            for DP wrapped in ``DifferentialPrivacyServerSideFixedClipping``, ``ClientApp`` running
            ``fl_setting.local_train``) on Ray, one SuperNode per client, one CPU and one torch thread per client
``--threads T``: torch threads of fedrepro, loop, pfl and fedlab; processes of pfl-mp and fedrepro-mp and Ray CPUs
(concurrent clients) of Flower, one thread each.

Timing: one warm-up round (the first, reported apart: torch's lazy imports and first-use set-up where the framework
has not triggered them before, Ray actor start-up, pfl's first-round user evaluation) then ``--rounds`` timed rounds;
s/round is their median. The process start-up before the first round (imports, data loading, Ray start) is recorded
as ``startup_s`` and not counted. fedrepro's final evaluation is outside the timed rounds. The load average is
recorded before and after each run: other processes skew the timings.

The peers go in a separate virtual environment (pfl pins dp-accounting below the version fedrepro records):
``python -m venv peers-venv && peers-venv/bin/pip install -e '.[peers]'`` (flwr, pfl, and what FedLab imports), then
``peers-venv/bin/pip install --no-deps fedlab==1.3.0``: FedLab requires torchvision, which the package index resolves
to a build against the CUDA torch that does not load beside the CPU torch. FedLab imports torchvision only in its
dataset modules, for loaders not used here, so the fedlab worker registers empty ``torchvision`` modules before
importing it. A
framework that is not importable is reported as "not installed".

    python benchmarks/peers.py                                   # both workloads, all frameworks, 1 and 2 threads
    python benchmarks/peers.py --workloads mlp --dp --threads 1  # FedAvg and DP-FedAvg rows of the MLP round
    python benchmarks/peers.py --clients 4 --steps 2 --rounds 2 --threads 1   # smoke test (seconds per framework)
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fl_setting as S  # noqa: E402

from fedrepro.learning.data import from_arrays  # noqa: E402
from fedrepro.learning.models import MLP, LeNet5  # noqa: E402

HERE = Path(__file__).resolve().parent
SEED = 0
TEST_ROWS = 10  # per client: only fedrepro's final evaluation (untimed) reads them
FRAMEWORKS = ("fedrepro", "fedrepro-mp", "loop", "pfl", "pfl-mp", "fedlab", "flower")
TORCHRUN = ("pfl-mp", "fedrepro-mp")  # launched as torchrun's processes of one thread each
# the modules a framework's worker imports: missing -> "not installed"
REQUIRES = {"pfl": ("pfl",), "pfl-mp": ("pfl",), "fedlab": ("fedlab",), "flower": ("flwr", "ray")}
DISTRIBUTIONS = {
    "fedrepro": "fedrepro",
    "fedrepro-mp": "fedrepro",
    "pfl": "pfl",
    "pfl-mp": "pfl",
    "fedlab": "fedlab",
    "flower": "flwr",
}


@dataclass
class Workload:
    name: str
    model: type[nn.Module]
    model_kwargs: dict
    feature_shape: tuple[int, ...]
    clients: int
    steps: int
    lr: float
    weight_decay: float
    train_rows: int  # per client
    clip: float  # DP clip norm: below most clients' update norms at the workload's steps and at 2 steps
    batch_size: int = 20
    description: str = field(default="", compare=False)

    def build(self) -> nn.Module:
        return self.model(**self.model_kwargs)


WORKLOADS = {
    "mlp": Workload(
        "mlp",
        MLP,
        {"in_features": 784, "n_classes": 10, "hidden": (50,)},
        (784,),
        clients=100,
        steps=50,
        lr=0.5,
        weight_decay=0.0,
        train_rows=30,
        clip=1.0,
        description="FedHDP's MNIST round: 784-50-10 MLP",
    ),
    "lenet": Workload(
        "lenet",
        LeNet5,
        {},
        (1, 28, 28),
        clients=50,
        steps=10,
        lr=0.05,
        weight_decay=1e-4,
        train_rows=1200,
        clip=0.01,
        description="AdaPeD's Table-2 round: LeNet5",
    ),
}


# ------------------------------------------------------------------------------------------------ shared task


def prepare(workload: Workload, clients: int, steps: int, rounds_total: int, out: Path) -> Path:
    """Write the workload's data, minibatch rows, initial weights and settings to ``out``; return it."""
    rng = np.random.default_rng(SEED)
    d = int(np.prod(workload.feature_shape))

    def block(n: int):
        return rng.integers(0, 256, (n, d), dtype=np.uint8), rng.integers(0, 10, n)

    train = [block(workload.train_rows) for _ in range(clients)]
    test = [block(TEST_ROWS) for _ in range(clients)]
    ds = from_arrays(train, test, n_classes=10)
    rows = S.engine_rows(ds, rounds_total, batch_size=workload.batch_size, tau=steps, seed=SEED)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(
        out / "data.npz",
        features=np.asarray(ds.features),
        labels=np.asarray(ds.labels),
        train_counts=np.array([len(y) for _, y in train]),
        test_counts=np.array([len(y) for _, y in test]),
        rows=rows,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        torch.save(workload.build().state_dict(), out / "init.pt")
    spec = {
        "workload": workload.name,
        "clients": clients,
        "steps": steps,
        "rounds_total": rounds_total,
        "batch_size": workload.batch_size,
        "lr": workload.lr,
        "weight_decay": workload.weight_decay,
    }
    (out / "spec.json").write_text(json.dumps(spec, indent=1))
    return out


class Task:
    """What a worker process reads: the settings, the data as float32 tensors, the rows (rounds, steps, clients, B),
    the initial state dict, and the DP settings of this run (None: plain FedAvg)."""

    def __init__(self, data_dir: str | Path, dp: dict | None = None):
        data_dir = Path(data_dir)
        self.dir = data_dir
        self.spec = json.loads((data_dir / "spec.json").read_text())
        self.workload = WORKLOADS[self.spec["workload"]]
        self.clients, self.steps = self.spec["clients"], self.spec["steps"]
        self.rounds_total, self.batch_size = self.spec["rounds_total"], self.spec["batch_size"]
        self.lr, self.weight_decay = self.spec["lr"], self.spec["weight_decay"]
        self.dp = dp
        self.block_mib: float | None = None  # fedrepro's client blocks (--fedrepro-block-mib)
        with np.load(data_dir / "data.npz") as z:
            self.arrays = {k: z[k] for k in z.files}
        self.rows = self.arrays["rows"]
        x = torch.from_numpy(self.arrays["features"]).to(torch.float32).mul_(1 / 255)
        self.x = x.reshape(len(x), *self.workload.feature_shape)
        self.y = torch.from_numpy(self.arrays["labels"].astype(np.int64))
        self.init = torch.load(data_dir / "init.pt")

    def model(self, state: dict | None = None) -> nn.Module:
        """A fresh model holding ``state`` (default: the initial weights)."""
        m = self.workload.build()
        m.load_state_dict(self.init if state is None else state)
        return m

    def federated_dataset(self):
        """The fedrepro FederatedDataset the parent drew the rows from (same arrays, same row order)."""
        a = self.arrays
        bounds = np.concatenate([[0], np.cumsum(np.concatenate([a["train_counts"], a["test_counts"]]))])
        blocks = [(a["features"][s:e], a["labels"][s:e]) for s, e in zip(bounds[:-1], bounds[1:])]
        return from_arrays(blocks[: self.clients], blocks[self.clients :], n_classes=10)


def dp_aggregate(global_state: dict, states: list[dict], clip: float, std: float, generator: torch.Generator) -> dict:
    """DP-FedAvg's server step on state dicts: w + (sum_i clip_C(w_i - w) + N(0, std^2)) / K."""
    deltas = {k: torch.stack([s[k] for s in states]) - w for k, w in global_state.items()}
    norms = torch.stack([v.reshape(len(states), -1).pow(2).sum(1) for v in deltas.values()]).sum(0).sqrt()
    scale = (clip / norms).clamp(max=1.0)
    out = {}
    for k, v in deltas.items():
        total = (v * scale.reshape(-1, *([1] * (v.dim() - 1)))).sum(0)
        if std > 0:
            total = total + std * torch.randn(total.shape, generator=generator)
        out[k] = global_state[k] + total / len(states)
    return out


# ------------------------------------------------------------------------------------------------ the frameworks
# Each runner returns (start of round 1, end of every round, final parameters): perf_counter seconds and a state dict.


def run_fedrepro(task: Task, threads: int):
    from fedrepro.learning import engine
    from fedrepro.learning.data import ClientData
    from fedrepro.learning.dp_fedavg import DPFedAvgServer
    from fedrepro.learning.fedavg import FedAvg

    base = FedAvg if task.dp is None else DPFedAvgServer

    class Captured(base):
        """Keeps the state and stamps the start of the final evaluation (the end of the last round)."""

        def init_state(self, net, n_clients, generator):
            self.state = super().init_state(net, n_clients, generator)
            return self.state

        def deployed_params(self, state, ctx=None):
            self.eval_start = time.perf_counter()
            return super().deployed_params(state, ctx)

    if task.dp is None:
        algo = Captured(weight_decay=task.weight_decay)
    else:
        algo = Captured(server_dp=task.dp, weight_decay=task.weight_decay)
    data = ClientData(task.federated_dataset(), "cpu", feature_shape=task.workload.feature_shape)
    stamps: list[float] = []
    start = time.perf_counter()
    engine.train(
        algo,
        data,
        task.model(),
        batch_size=task.batch_size,
        lr=task.lr,
        tau=task.steps,
        rounds=task.rounds_total,
        seed=SEED,
        eval_every=0,
        callback=lambda info: stamps.append(time.perf_counter()),
        **({} if task.block_mib is None else {"block_bytes": int(task.block_mib * 2**20)}),
    )
    return start, stamps[:-1] + [algo.eval_start], algo.state.global_params


def run_fedrepro_shards(task: Task, threads: int):
    """fedrepro's FedAvg with the clients split over the processes torchrun started (as pfl-mp splits them): each
    process runs the engine's batched local steps (``FedAvg.local_step``, the network as ``engine.train`` builds it)
    for its contiguous share of the clients, one thread each, then one all-reduce of the sum of their models (gloo);
    every process computes the same global model. FedAvg only (no DP)."""
    import torch.distributed as dist

    from fedrepro.learning import engine
    from fedrepro.learning.fedavg import FedAvg

    if task.dp is not None:
        raise SystemExit("fedrepro-mp: FedAvg only, no DP")
    dist.init_process_group("gloo")
    shard = torch.arange(task.clients).tensor_split(dist.get_world_size())[dist.get_rank()]
    engine.keep_freed_memory()
    net = engine.training_net(task.model(), task.workload.feature_shape, task.batch_size)
    algo = FedAvg(weight_decay=task.weight_decay)
    state = algo.init_state(net, task.clients, torch.Generator().manual_seed(SEED))
    ends = []
    dist.barrier()
    start = time.perf_counter()
    for r in range(task.rounds_total):
        algo.start_round(state, shard)
        for s in range(task.steps):
            rows = torch.from_numpy(task.rows[r, s, shard.numpy()])  # (clients of this process, B)
            algo.local_step(state, task.x[rows], task.y[rows], shard, task.lr)
        names = list(state.local)
        total = torch.cat([state.local[k].sum(0).reshape(-1) for k in names])
        dist.all_reduce(total)
        sizes = [state.global_params[k].numel() for k in names]
        parts = total.div_(task.clients).split(sizes)
        state.global_params = {k: v.view_as(state.global_params[k]) for k, v in zip(names, parts)}
        state.local = None
        ends.append(time.perf_counter())
    dist.destroy_process_group()
    return start, ends, state.global_params


def run_loop(task: Task, threads: int):
    generator = torch.Generator().manual_seed(SEED)
    state = task.model().state_dict()
    ends = []
    start = time.perf_counter()
    for r in range(task.rounds_total):
        states = []
        for c in range(task.clients):
            model = task.model(state)
            S.local_train(model, task.x, task.y, task.rows[r, :, c], lr=task.lr, weight_decay=task.weight_decay)
            states.append(model.state_dict())
        if task.dp is None:
            state = {k: torch.stack([s[k] for s in states]).mean(0) for k in state}
        else:
            std = task.dp["noise_multiplier"] * task.dp["clip"]
            state = dp_aggregate(state, states, task.dp["clip"], std, generator)
        ends.append(time.perf_counter())
    return start, ends, state


def run_pfl(task: Task, threads: int):
    os.environ.setdefault("PFL_PYTORCH_DEVICE", "cpu")
    np.random.seed(SEED)  # pfl derives its seeds from numpy's global state, which must agree on all its processes
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import MinimizeReuseUserSampler
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism

    class Net(task.workload.model):
        """The workload's model with the ``loss`` and ``metrics`` pfl calls (pfl hands labels over as float32)."""

        def loss(self, x, y):
            return F.cross_entropy(self(x), y.long())

        @torch.no_grad()
        def metrics(self, x, y):
            return {"loss": Weighted(float(F.cross_entropy(self(x), y.long(), reduction="sum")), len(x))}

    net = Net(**task.workload.model_kwargs)
    net.load_state_dict(task.init)
    x, y = task.x.numpy(), task.y.numpy()
    clock = {"round": 0, "stamps": []}

    def make_dataset_fn(user_id):  # user c: client c's rows of the current round, in step order
        idx = task.rows[clock["round"], :, user_id].reshape(-1)
        return Dataset((x[idx], y[idx]), user_id=str(user_id))

    class Clock(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            clock["stamps"].append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            clock["stamps"].append(time.perf_counter())
            clock["round"] += 1
            return False, Metrics()

    users = FederatedDataset(make_dataset_fn, MinimizeReuseUserSampler(list(range(task.clients))))
    postprocessors = [WeightByUser()]
    if task.dp is not None:
        mechanism = GaussianMechanism(task.dp["clip"], task.dp["noise_multiplier"])
        postprocessors.append(CentrallyAppliedPrivacyMechanism(mechanism))
    model = PyTorchModel(
        model=net,
        local_optimizer_create=functools.partial(torch.optim.SGD, weight_decay=task.weight_decay),
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=task.rounds_total,
            evaluation_frequency=task.rounds_total,
            train_cohort_size=task.clients,
            val_cohort_size=None,
        ),
        backend=SimulatedBackend(training_data=users, val_data=users, postprocessors=postprocessors),
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=task.lr, local_num_epochs=1, local_batch_size=task.batch_size
        ),
        callbacks=[Clock()],
        send_metrics_to_platform=False,
    )
    return clock["stamps"][0], clock["stamps"][1:], net.state_dict()


def stand_in_torchvision() -> None:
    """Empty ``torchvision`` modules: FedLab's dataset package imports torchvision at module level and uses it only
    in its MNIST/CIFAR loaders (not used here); a CUDA build of torchvision fails to load beside the CPU torch."""
    names = ("torchvision", "torchvision.transforms", "torchvision.datasets")
    mods = {name: types.ModuleType(name) for name in names}
    mods["torchvision"].transforms = mods["torchvision.transforms"]
    mods["torchvision"].datasets = mods["torchvision.datasets"]
    sys.modules.update(mods)


def run_fedlab(task: Task, threads: int):
    stand_in_torchvision()
    from fedlab.contrib.algorithm.basic_client import SGDSerialClientTrainer
    from fedlab.contrib.algorithm.basic_server import SyncServerHandler
    from fedlab.contrib.dataset.basic_dataset import FedDataset
    from fedlab.core.standalone import StandalonePipeline
    from fedlab.utils.serialization import SerializationTool
    from torch.utils.data import DataLoader, TensorDataset

    class RoundData(FedDataset):
        """Client ``id``'s rows of the current round, served in step order."""

        def __init__(self):
            super().__init__()
            self.num, self.round = task.clients, 0

        def get_dataset(self, id, type="train"):
            idx = torch.from_numpy(task.rows[self.round, :, id].reshape(-1))
            return TensorDataset(task.x[idx], task.y[idx])

        def get_dataloader(self, id, batch_size, type="train"):
            return DataLoader(self.get_dataset(id, type), batch_size=batch_size, shuffle=False)

    class Trainer(SGDSerialClientTrainer):
        def setup_optim(self, epochs, batch_size, lr):
            super().setup_optim(epochs, batch_size, lr)
            self.optimizer = torch.optim.SGD(self._model.parameters(), lr, weight_decay=task.weight_decay)

    class DPHandler(SyncServerHandler):
        """DP-FedAvg's server step on FedLab's serialized parameters."""

        generator = torch.Generator().manual_seed(SEED)

        def global_update(self, buffer):
            w = self.model_parameters
            deltas = torch.stack([pack[0] for pack in buffer]) - w
            scale = (task.dp["clip"] / deltas.norm(dim=1)).clamp(max=1.0)
            total = (deltas * scale[:, None]).sum(0)
            std = task.dp["noise_multiplier"] * task.dp["clip"]
            if std > 0:
                total = total + std * torch.randn(total.shape, generator=self.generator)
            SerializationTool.deserialize_model(self._model, w + total / len(buffer))

    stamps: list[float] = []
    data = RoundData()

    class Pipeline(StandalonePipeline):
        def evaluate(self):  # called after every round
            stamps.append(time.perf_counter())
            data.round += 1

    model = task.model()
    trainer = Trainer(model, task.clients, cuda=False)
    trainer.setup_dataset(data)
    trainer.setup_optim(1, task.batch_size, task.lr)
    handler = (SyncServerHandler if task.dp is None else DPHandler)(model, task.rounds_total, 1.0, cuda=False)
    start = time.perf_counter()
    Pipeline(handler, trainer).main()
    return start, stamps, handler.model.state_dict()


_CACHE: dict = {}


def cached_task(data_dir: str) -> Task:
    """The task, loaded once per process (a Flower client's Ray actor keeps it across rounds)."""
    if data_dir not in _CACHE:
        _CACHE[data_dir] = Task(data_dir)
    return _CACHE[data_dir]


def build_flower_apps(task: Task, sink: dict):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
    from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        config = msg.content["config"]
        t = cached_task(config["data-dir"])
        cid = int(context.node_config["partition-id"])
        rnd = int(config["server-round"])
        model = t.model(msg.content["arrays"].to_torch_state_dict())
        loss = S.local_train(model, t.x, t.y, t.rows[rnd - 1, :, cid], lr=t.lr, weight_decay=t.weight_decay)
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "metrics": MetricRecord({"train_loss": loss, "num-examples": t.steps * t.batch_size}),
            }
        )
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        m = task.clients
        strategy = FlowerFedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=m, min_available_nodes=m)
        if task.dp is not None:
            strategy = DifferentialPrivacyServerSideFixedClipping(
                strategy,
                noise_multiplier=task.dp["noise_multiplier"],
                clipping_norm=task.dp["clip"],
                num_sampled_clients=m,
            )

        def stamp(server_round: int, arrays):  # called before round 1 and after every round
            sink.setdefault("stamps", []).append(time.perf_counter())
            return None

        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(task.model().state_dict()),
            num_rounds=task.rounds_total,
            train_config=ConfigRecord({"data-dir": str(task.dir)}),
            evaluate_fn=stamp,
        )
        sink["arrays"] = result.arrays

    return server_app, client_app


def run_flower(task: Task, threads: int):
    import logging

    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    np.random.seed(SEED)  # Flower's DP noise draws from numpy's global state
    peers = importlib.import_module("peers")  # the apps' functions pickle by reference to an importable module
    sink: dict = {}
    server_app, client_app = peers.build_flower_apps(task, sink)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=task.clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "num_cpus": threads,
                "num_gpus": 0,
                "include_dashboard": False,
            },
        },
    )
    st = sink["stamps"]  # [before round 1, after round 1, ...]
    return st[0], st[1:], sink["arrays"].to_torch_state_dict()


RUNNERS = {
    "fedrepro": run_fedrepro,
    "fedrepro-mp": run_fedrepro_shards,
    "loop": run_loop,
    "pfl": run_pfl,
    "fedlab": run_fedlab,
    "flower": run_flower,
}


def versions(framework: str) -> dict:
    out = {}
    for dist in ("torch", DISTRIBUTIONS.get(framework), "ray" if framework == "flower" else None):
        if dist:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = None
    return out


def worker(args) -> None:
    """One framework's run in this process: writes ``args.out`` (JSON) and the final parameters beside it (.npz)."""
    entry = time.perf_counter()
    threads = args.threads[0]
    torch.set_num_threads(threads)
    dp = None if args.clip is None else {"clip": args.clip, "noise_multiplier": args.noise_multiplier}
    task = Task(args.data, dp)
    task.block_mib = args.block_mib
    start, ends, params = RUNNERS[args.worker](task, threads)
    if int(os.environ.get("RANK", "0")) != 0:  # pfl-mp, fedrepro-mp: rank 0 reports
        return
    out = Path(args.out)
    np.savez(out.with_suffix(".npz"), **{k: v.detach().cpu().numpy() for k, v in params.items()})
    rounds = np.diff([start, *ends]).tolist()
    record = {
        "worker": args.worker,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "startup_s": start - entry,
        "round_s": rounds,
        "versions": versions(args.worker),
    }
    out.write_text(json.dumps(record, indent=1))


# ------------------------------------------------------------------------------------------------ parent


def installed(framework: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in REQUIRES.get(framework, ()))


def launch(
    framework: str, workload: str, threads: int, data_dir: Path, out: Path, dp, timeout: float, block_mib=None
) -> dict:
    """Run one framework's worker process(es); return its record (or ``{"status": why}`` when it failed)."""
    inner = "pfl" if framework == "pfl-mp" else framework
    per_process = 1 if framework in (*TORCHRUN, "flower") else threads
    script = [str(Path(__file__).resolve()), "--worker", inner, "--workload", workload]
    script += ["--threads", str(1 if framework in TORCHRUN else threads), "--data", str(data_dir), "--out", str(out)]
    if dp is not None:
        script += ["--clip", str(dp["clip"]), "--noise-multiplier", str(dp["noise_multiplier"])]
    if framework == "fedrepro" and block_mib is not None:
        script += ["--block-mib", str(block_mib)]
    if framework in TORCHRUN:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--local-addr=127.0.0.1"]
        cmd += [f"--nproc-per-node={threads}", *script]
    else:
        cmd = [sys.executable, *script]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH", "")] if p),
        OMP_NUM_THREADS=str(per_process),
        MKL_NUM_THREADS=str(per_process),
        CUDA_VISIBLE_DEVICES="",
        PFL_PYTORCH_DEVICE="cpu",
        GLOO_SOCKET_IFNAME="lo",
        FLWR_TELEMETRY_ENABLED="0",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # single-node Ray: its processes talk over the loopback address
    )
    log = out.with_suffix(".log")
    with S.Load() as load, open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc != 0 or not out.is_file():
        lines = [s.strip() for s in log.read_text(errors="replace").splitlines() if s.strip()]
        errors = [s for s in lines if "Error" in s] or lines or ["no output"]
        return {"status": f"failed ({rc}): {errors[-1][:80]}", "log_tail": lines[-20:], **load.record()}
    record = json.loads(out.read_text())
    record["params_file"] = str(out.with_suffix(".npz"))
    return {"status": "ok", **record, **load.record()}


def max_diff(file_a: str, file_b: str) -> float:
    with np.load(file_a) as a, np.load(file_b) as b:
        return max(float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()) for k in a.files)


def table(rows: list[dict]) -> str:
    head = ["framework", "workload", "threads", "s/round", "warm-up s", "x fedrepro", "max|d| fedrepro", "load", "note"]
    lines = []
    for r in rows:
        load = f"{r['loadavg_before'][0]:.2f}->{r['loadavg_after'][0]:.2f}" if "loadavg_before" in r else "-"
        cells = [r["framework"], r["workload"], str(r["threads"])]
        if r["status"] != "ok":
            lines.append([*cells, "-", "-", "-", "-", load, r["status"]])
            continue
        ratio = r.get("ratio_to_fedrepro")
        diff = r.get("max_abs_diff_to_fedrepro")
        note = f"{r['world_size']} processes" if r.get("world_size", 1) > 1 else ""
        lines.append(
            [
                *cells,
                f"{r['s_per_round']:.3f}",
                f"{r['warmup_s']:.2f}",
                "-" if ratio is None else f"{ratio:.2f}",
                f"{diff:.1e}" if isinstance(diff, float) else (diff or "-"),
                load,
                note,
            ]
        )
    widths = [max([len(h), *(len(line[i]) for line in lines)]) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up round (median reported)")
    ap.add_argument("--clients", type=int, help="clients of every workload (default: the workload's)")
    ap.add_argument("--steps", type=int, help="local SGD steps of every workload (default: the workload's)")
    ap.add_argument("--dp", action="store_true", help="add DP-FedAvg (server-side noise) rows")
    ap.add_argument("--clip", type=float, help="DP clip norm C of a client's update (default: mlp 1, lenet 0.01)")
    ap.add_argument("--noise-multiplier", type=float, default=1.0, help="DP noise multiplier z (std z C on the sum)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per framework run")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "peers.json")
    ap.add_argument(
        "--fedrepro-block-mib",
        type=float,
        help="fedrepro's client blocks, MiB of parameters (engine.train's block_bytes; 0: none; default the engine's)",
    )
    ap.add_argument("--worker", choices=list(RUNNERS), help=argparse.SUPPRESS)
    ap.add_argument("--block-mib", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    wall0 = time.perf_counter()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, loadavg {os.getloadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="fedrepro-peers-"))
    rows: list[dict] = []
    try:
        for wname in args.workloads:
            w = WORKLOADS[wname]
            clients, steps = args.clients or w.clients, args.steps or w.steps
            clip = w.clip if args.clip is None else args.clip
            data_dir = prepare(w, clients, steps, args.rounds + 1, tmp / wname)
            variants = [(wname, None, args.threads)]
            if args.dp:
                z = args.noise_multiplier
                variants.append((f"{wname}+dp z={z:g}", {"clip": clip, "noise_multiplier": z}, args.threads))
                if z > 0:  # the agreement check: noise off, first thread count
                    variants.append((f"{wname}+dp z=0", {"clip": clip, "noise_multiplier": 0.0}, args.threads[:1]))
            print(f"{wname}: {w.description}, {clients} clients x {steps} steps x batch {w.batch_size}", flush=True)
            for label, dp, thread_counts in variants:
                for threads in thread_counts:
                    ref = None
                    for fw in sorted(args.frameworks, key=lambda f: f != "fedrepro"):
                        row = {"framework": fw, "workload": label, "threads": threads, "dp": dp}
                        if not installed(fw):
                            row["status"] = "not installed"
                        elif fw == "fedrepro-mp" and dp is not None:
                            row["status"] = "skipped: FedAvg only"
                        elif fw == "pfl-mp" and clients % threads:
                            row["status"] = f"skipped: {clients} clients over {threads} processes"
                        else:
                            out = tmp / f"{fw}-{label.replace(' ', '_')}-{threads}.json"
                            row |= launch(fw, wname, threads, data_dir, out, dp, args.timeout, args.fedrepro_block_mib)
                        if row["status"] == "ok":
                            row["warmup_s"] = row["round_s"][0]
                            row["s_per_round"] = float(np.median(row["round_s"][1:]))
                            if fw == "fedrepro":
                                ref = row
                            if ref is not None:
                                row["ratio_to_fedrepro"] = row["s_per_round"] / ref["s_per_round"]
                                noised = dp is not None and dp["noise_multiplier"] > 0
                                row["max_abs_diff_to_fedrepro"] = (
                                    "noise on" if noised else max_diff(row["params_file"], ref["params_file"])
                                )
                        rows.append(row)
                        print(table([row]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(rows))
    for r in rows:
        r.pop("params_file", None)
    result = {
        "benchmark": "seconds per round of the same federated workload in fedrepro and its peers",
        "settings": {
            "rounds_timed": args.rounds,
            "warmup_rounds": 1,
            "fedrepro_block_mib": args.fedrepro_block_mib,
            "clients": args.clients,
            "steps": args.steps,
            "clip": ({k: WORKLOADS[k].clip for k in args.workloads} if args.clip is None else args.clip)
            if args.dp
            else None,
            "noise_multiplier": args.noise_multiplier if args.dp else None,
            "workloads": {k: WORKLOADS[k].description for k in args.workloads},
        },
        "machine": S.machine(),
        "rows": rows,
        "wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
