"""Benchmark of the batched federated engine (fedrepro.learning.engine) against the per-client Python loop of the
same math (``train(..., vectorize=False)``).

Not a test. Table-2-shaped setting (Ozkara et al. 2023): m = 50 clients, all sampled (K = m), LeNet5, tau = 10,
batch size 20 (1,200 training images per client -> 60 iterations per epoch). Data: the Fashion-MNIST partition
``results/data/fashion_mnist_pathological_m50`` when it exists, else synthetic uint8 28x28 arrays of the same
size (stated in the output; ``fl_setting.load_data``). For each algorithm, thread count and path: one warm-up
round, then ``--rounds`` timed rounds of training, then the evaluation of all 50 clients' test data (timed
separately). Results go to benchmarks/results/engine.json (not committed).

    python benchmarks/engine.py                      # fedavg and adaped, 1 and 2 threads, 3 timed rounds
    python benchmarks/engine.py --rounds 1           # quick check (about 1.5 min on 2 slow CPU cores)
    python benchmarks/engine.py --rounds 10 --threads 1 2 4 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fl_setting import load_data  # noqa: E402  (the setting's data, shared with fedavg_frameworks.py)

from fedrepro.learning import engine  # noqa: E402
from fedrepro.papers.adaped.adaped import AdaPeD  # noqa: E402
from fedrepro.learning.data import ClientData  # noqa: E402
from fedrepro.learning.fedavg import FedAvg  # noqa: E402
from fedrepro.learning.models import LeNet5  # noqa: E402

HERE = Path(__file__).resolve().parent
ALGORITHMS = {"fedavg": FedAvg, "adaped": AdaPeD}


def timed(cls: type) -> type:
    """``cls`` with a timestamp taken when the engine asks for the deployed models (the start of evaluation)."""
    class Timed(cls):
        def deployed_params(self, state, ctx=None):
            self.eval_start = time.perf_counter()
            return super().deployed_params(state, ctx)
    return Timed


def time_run(algorithm: str, data: ClientData, *, vectorize: bool, rounds: int, batch_size: int, tau: int,
             device: str) -> dict:
    algo = timed(ALGORITHMS[algorithm])()
    stamps: list[float] = []
    start = time.perf_counter()
    engine.train(algo, data, lambda: LeNet5(), batch_size=batch_size, lr=0.05, tau=tau, rounds=rounds + 1,
                 eval_every=0, device=device, vectorize=vectorize,
                 callback=lambda info: stamps.append(time.perf_counter()))
    per_round = (algo.eval_start - stamps[0]) / rounds  # rounds 2 .. rounds+1 (round 1 is the warm-up)
    return {"rounds_per_s": 1 / per_round, "s_per_round": per_round, "warmup_round_s": stamps[0] - start,
            "eval_s": stamps[-1] - algo.eval_start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per configuration")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--tau", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engine.json")
    args = ap.parse_args()

    load_start = os.getloadavg()  # other processes on the machine skew the timings, multi-threaded ones most
    ds, source = load_data(50, 1200, 200)
    data = ClientData(ds, args.device)
    print(f"data: {source}; device {args.device}; torch {torch.__version__}")
    results, ratios = [], {}
    for algorithm in args.algorithms:
        for threads in args.threads:
            torch.set_num_threads(threads)
            rate = {}
            for path, vectorize in (("batched", True), ("loop", False)):
                r = time_run(algorithm, data, vectorize=vectorize, rounds=args.rounds, batch_size=args.batch_size,
                             tau=args.tau, device=args.device)
                rate[path] = r["rounds_per_s"]
                results.append({"algorithm": algorithm, "threads": threads, "path": path, **r})
                print(f"{algorithm:7s} threads={threads} {path:7s} {r['rounds_per_s']:7.3f} rounds/s "
                      f"({r['s_per_round']:.2f} s/round, eval {r['eval_s']:.2f} s)", flush=True)
            ratios.setdefault(algorithm, {})[str(threads)] = rate["batched"] / rate["loop"]
            print(f"{algorithm:7s} threads={threads} batched/loop = {ratios[algorithm][str(threads)]:.2f}x")
    out = {
        "benchmark": "fedrepro.learning.engine batched (vmap) vs per-client loop",
        "data": source,
        "setting": {"n_clients": data.n_clients, "clients_per_round": data.n_clients, "model": "LeNet5 (44,426)",
                    "batch_size": args.batch_size, "tau": args.tau, "timed_rounds": args.rounds,
                    "iters_per_epoch": int(np.ceil(np.median(data.counts("train")) / args.batch_size))},
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "loadavg_start": load_start,
                    "loadavg_end": os.getloadavg(),
                    "torch": torch.__version__, "device": args.device},
        "results": results,
        "batched_over_loop": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
