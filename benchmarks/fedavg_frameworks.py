"""FedAvg on the Table-2-shaped setting: fedrepro's batched engine vs a Flower simulation vs a plain per-client
PyTorch loop. Not a test; results go to benchmarks/results/fedavg_frameworks.json (not committed).

Same machine, same data, same model, same math in all three (setting in ``fl_setting.py``): 50 clients of the
Fashion-MNIST partition ``fashion_mnist_pathological_m50``, all sampled every round, LeNet5 initialized from the
same seed, tau = 10 local SGD steps (lr 0.05, weight decay 1e-4, no momentum) on batches of 20, unweighted mean of
the client models (every client reports the same example count, so Flower's example-weighted mean is the same).
The minibatch rows are the ones fedrepro's engine draws (``fl_setting.engine_rows``) and are fed to the other two,
so after the run all three global models must agree to float rounding (checked and recorded: ``agreement``).

- ``fedrepro``: ``fedrepro.learning.engine.train(FedAvg(), ...)``, all clients in one ``torch.vmap``-ed step.
- ``loop``: plain PyTorch, per round and client a fresh ``LeNet5`` loaded with the global state dict, a fresh
  ``torch.optim.SGD``, DataLoader-free batching (indexing the preloaded float32 tensor), then the state dicts
  averaged. This is the usual hand-written simulation loop.
- ``flower``: Flower (``flwr``) simulation through its Message API (``flwr.simulation.run_simulation``,
  ``ServerApp`` + ``flwr.serverapp.strategy.FedAvg``, ``ClientApp`` with a ``@train`` handler running the same
  local-training function as ``loop``), Ray backend, 50 virtual SuperNodes, CPU-only client resources
  (``num_cpus`` per client, ``num_gpus = 0``), each actor one torch thread, no client-side evaluation.

Timing: one warm-up round (Ray start, actor spawn, first vmap trace) reported apart, then ``--rounds`` timed rounds;
evaluation is outside the timed rounds. ``--profile`` adds torch.profiler / cProfile top entries of one round of the
fedrepro and loop paths (what bounds them).

    python benchmarks/fedavg_frameworks.py --rounds 3 --threads 1 2 --repeat 2 --flower-actors 1 2 --profile
                                                 # as in RESULTS.md (~3.5 min on the 2-core VM at load ~2)
    python benchmarks/fedavg_frameworks.py --rounds 2 --paths fedrepro loop --threads 2
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fl_setting as S  # noqa: E402

from fedrepro.learning import engine  # noqa: E402
from fedrepro.learning.data import ClientData  # noqa: E402
from fedrepro.learning.fedavg import FedAvg  # noqa: E402
from fedrepro.learning.models import LeNet5  # noqa: E402
from fedrepro.learning.net import expand  # noqa: E402

# ------------------------------------------------------------------------------------------------ fedrepro


class _Capture(FedAvg):
    """FedAvg that keeps its state and stamps the start of the final evaluation."""

    def init_state(self, net, n_clients, generator):
        self.state = super().init_state(net, n_clients, generator)
        return self.state

    def deployed_params(self, state, ctx=None):
        self.eval_start = time.perf_counter()
        return super().deployed_params(state, ctx)


def run_fedrepro(data: ClientData, rounds: int) -> dict:
    algo = _Capture(weight_decay=S.WEIGHT_DECAY)
    stamps: list[float] = []
    start = time.perf_counter()
    engine.train(
        algo,
        data,
        lambda: LeNet5(),
        batch_size=S.BATCH_SIZE,
        lr=S.LR,
        tau=S.TAU,
        rounds=rounds + 1,
        seed=S.SEED,
        eval_every=0,
        callback=lambda info: stamps.append(time.perf_counter()),
    )
    timed = algo.eval_start - stamps[0]  # rounds 2 .. rounds+1; round 1 is the warm-up
    per_round = np.diff(stamps[:-1] + [algo.eval_start]).tolist()  # the last stamp comes after the evaluation
    return {
        "s_per_round": timed / rounds,
        "per_round_s": per_round,
        "warmup_round_s": stamps[0] - start,
        "timed_s": timed,
        "params": {k: v.detach().clone() for k, v in algo.state.global_params.items()},
    }


# ------------------------------------------------------------------------------------------------ plain loop


def loop_round(global_state: dict, x: torch.Tensor, y: torch.Tensor, rows: np.ndarray) -> dict:
    """One FedAvg round of the plain loop: rows (tau, n_clients, B)."""
    states = []
    for c in range(rows.shape[1]):
        model = LeNet5()
        model.load_state_dict(global_state)
        S.local_train(model, x, y, rows[:, c])
        states.append(model.state_dict())
    return {k: torch.stack([s[k] for s in states]).mean(0) for k in global_state}


def run_loop(x: torch.Tensor, y: torch.Tensor, rows: np.ndarray, rounds: int) -> dict:
    start = time.perf_counter()
    state = S.initial_model().state_dict()
    stamps = []
    for r in range(rounds + 1):
        state = loop_round(state, x, y, rows[r])
        stamps.append(time.perf_counter())
    timed = stamps[-1] - stamps[0]
    return {
        "s_per_round": timed / rounds,
        "per_round_s": np.diff(stamps).tolist(),
        "warmup_round_s": stamps[0] - start,
        "timed_s": timed,
        "params": state,
    }


# ------------------------------------------------------------------------------------------------ Flower


def build_flower_apps(rounds_total: int, rows_file: str, client_threads: int, sink: dict):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(client_threads)
        x, y, rows = S.cached_data(msg.content["config"]["rows-file"])
        cid = int(context.node_config["partition-id"])
        rnd = int(msg.content["config"]["server-round"])
        model = LeNet5()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loss = S.local_train(model, x, y, rows[rnd - 1, :, cid])
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "metrics": MetricRecord({"train_loss": loss, "num-examples": S.TAU * S.BATCH_SIZE}),
            }
        )
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        m = S.N_CLIENTS
        strategy = FlowerFedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=m, min_available_nodes=m)

        def stamp(server_round: int, arrays):  # called before round 1 and after every round
            sink.setdefault("stamps", []).append(time.perf_counter())
            return None

        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(S.initial_model().state_dict()),
            num_rounds=rounds_total,
            train_config=ConfigRecord({"rows-file": rows_file}),
            evaluate_fn=stamp,
        )
        sink["arrays"] = result.arrays

    return server_app, client_app


def run_flower(rows: np.ndarray, rounds: int, actors: int) -> dict:
    import logging

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        rows_file = str(Path(tmp) / "rows.npy")
        np.save(rows_file, rows)
        sink: dict = {}
        server_app, client_app = build_flower_apps(rounds + 1, rows_file, 1, sink)
        start = time.perf_counter()
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=S.N_CLIENTS,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"num_cpus": actors, "num_gpus": 0, "include_dashboard": False},
            },
        )
        total = time.perf_counter() - start
    st = sink["stamps"]  # [before round 1, after round 1, ..., after round rounds+1]
    timed = st[-1] - st[1]
    return {
        "s_per_round": timed / rounds,
        "per_round_s": np.diff(st[1:]).tolist(),
        "warmup_round_s": st[1] - start,
        "timed_s": timed,
        "total_with_startup_s": total,
        "actors": actors,
        "params": {k: torch.as_tensor(v) for k, v in sink["arrays"].to_torch_state_dict().items()},
    }


# ------------------------------------------------------------------------------------------------ profile


def compute_floor(x: torch.Tensor, y: torch.Tensor, rows: np.ndarray, repeat: int = 3) -> dict:
    """A round's FLOPs done by ONE ordinary LeNet5 (no per-client model, optimizer or state-dict traffic), two ways:
    ``big_batch``: tau SGD steps on all clients' rows of a step together (n_clients * B = 1,000 images per step), the
    data layout a client-batched engine works on; ``client_batches``: the round's n_clients * tau minibatches of B
    images one after another (the plain loop minus its per-client bookkeeping). Best of ``repeat`` each (s/round)."""
    tau, m, b = rows.shape[1:]
    variants = {
        "big_batch": rows[0].reshape(tau, m * b),
        "client_batches": np.swapaxes(rows[0], 0, 1).reshape(m * tau, b),
    }
    out = {}
    for name, r in variants.items():
        times = []
        for _ in range(repeat):
            model = S.initial_model()
            t0 = time.perf_counter()
            S.local_train(model, x, y, r)
            times.append(time.perf_counter() - t0)
        out[name] = {"s_per_round_best": min(times), "s_per_round_all": times}
    return out


def profile_paths(data: ClientData, x, y, rows) -> dict:
    from torch.profiler import ProfilerActivity, profile

    out = {}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_fedrepro(data, 1)
    out["fedrepro_torch_profiler"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loop_round(S.initial_model().state_dict(), x, y, rows[0])
    out["loop_torch_profiler"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    pr = cProfile.Profile()
    pr.enable()
    loop_round(S.initial_model().state_dict(), x, y, rows[0])
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
    out["loop_cprofile"] = s.getvalue()
    return out


# ------------------------------------------------------------------------------------------------ main


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per path (after one warm-up round)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads (fedrepro, loop)")
    ap.add_argument(
        "--paths", nargs="+", default=["fedrepro", "loop", "flower"], choices=["fedrepro", "loop", "flower"]
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="measure fedrepro and loop this many times, interleaved (Flower once); best of them is used",
    )
    ap.add_argument(
        "--flower-actors",
        type=int,
        nargs="+",
        default=[1, 2],
        help="Ray CPUs = concurrent Flower clients (one run each)",
    )
    ap.add_argument("--profile", action="store_true", help="add torch.profiler / cProfile of one round")
    ap.add_argument("--out", type=Path, default=S.HERE / "results" / "fedavg_frameworks.json")
    args = ap.parse_args()

    wall0 = time.perf_counter()
    ds, source = S.load_data()
    data = ClientData(ds, "cpu")
    x, y = S.features(ds)
    rows = S.engine_rows(ds, args.rounds + 1)
    print(f"data: {source}; torch {torch.__version__}; loadavg {os.getloadavg()}", flush=True)
    results, params = [], {}
    plan = [(p, t) for rep in range(args.repeat) for p in args.paths if p != "flower" for t in args.threads]
    plan += [("flower", a) for a in args.flower_actors] if "flower" in args.paths else []
    for path, threads in plan:
        with S.Load() as load:
            if path == "flower":
                torch.set_num_threads(1)
                r = run_flower(rows, args.rounds, threads)
            else:
                torch.set_num_threads(threads)
                r = run_fedrepro(data, args.rounds) if path == "fedrepro" else run_loop(x, y, rows, args.rounds)
        params[(path, threads)] = r.pop("params")
        row = {
            "path": path,
            "threads": threads,
            "rounds_per_s": 1 / r["s_per_round"],
            "rounds_per_s_best_round": 1 / min(r["per_round_s"]),
            **r,
            **load.record(),
        }
        if path == "flower":
            row["threads_note"] = f"{threads} Ray actors (num_cpus=1 per client), 1 torch thread each"
        results.append(row)
        print(
            f"{path:8s} threads={threads} {row['rounds_per_s']:.3f} rounds/s ({r['s_per_round']:.2f} s/round, "
            f"warm-up {r['warmup_round_s']:.1f} s) load {load.before[0]:.2f}->{load.after[0]:.2f}",
            flush=True,
        )

    ref = next(iter(params))
    agreement = {f"{p}/{t}": max_diff(params[ref], v) for (p, t), v in params.items()}
    ev = engine.evaluate(engine.Net(LeNet5()), expand(params[ref], data.n_clients), data, "test")
    best, best_round = {}, {}  # best measurement (mean over its timed rounds) and best single round, per path
    for row in results:
        best[row["path"]] = max(best.get(row["path"], 0.0), row["rounds_per_s"])
        best_round[row["path"]] = max(best_round.get(row["path"], 0.0), row["rounds_per_s_best_round"])
    speedups, speedups_round = {}, {}
    if "fedrepro" in best:
        speedups = {f"fedrepro_over_{p}": best["fedrepro"] / v for p, v in best.items() if p != "fedrepro"}
        speedups_round = {
            f"fedrepro_over_{p}": best_round["fedrepro"] / v for p, v in best_round.items() if p != "fedrepro"
        }
    same_threads = {}
    for t in args.threads:
        fr = [r["rounds_per_s"] for r in results if r["path"] == "fedrepro" and r["threads"] == t]
        lp = [r["rounds_per_s"] for r in results if r["path"] == "loop" and r["threads"] == t]
        if fr and lp:
            same_threads[str(t)] = max(fr) / max(lp)
    out = {
        "benchmark": "FedAvg, Table-2-shaped setting: fedrepro batched engine vs Flower simulation vs plain loop",
        "data": source,
        "setting": {
            "n_clients": S.N_CLIENTS,
            "clients_per_round": S.N_CLIENTS,
            "model": "LeNet5 (44,426 params)",
            "batch_size": S.BATCH_SIZE,
            "tau": S.TAU,
            "lr": S.LR,
            "weight_decay": S.WEIGHT_DECAY,
            "seed": S.SEED,
            "timed_rounds": args.rounds,
            "warmup_rounds": 1,
            "loop_batching": "DataLoader-free: index the preloaded float32 tensor with the engine's rows",
        },
        "machine": S.machine(),
        "versions": _versions(),
        "results": results,
        "speedups_best_rounds_per_s": speedups,
        "speedups_best_single_round": speedups_round,
        "fedrepro_over_loop_same_threads": same_threads,
        "targets": {
            "fedrepro_over_flower_ge_5": speedups.get("fedrepro_over_flower", float("nan")) >= 5,
            "fedrepro_over_loop_ge_10": speedups.get("fedrepro_over_loop", float("nan")) >= 10,
        },
        "agreement": {
            "reference": f"{ref[0]}/{ref[1]}",
            "max_abs_param_diff": agreement,
            "test_acc_reference_after_run": float(np.nanmean(ev["acc"])),
        },
        "wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    if args.profile:
        torch.set_num_threads(1)
        with S.Load() as load:
            floor = compute_floor(x, y, rows)
        out["compute_floor_1_thread"] = {**floor, **load.record()}
        print(
            "one model, a round's FLOPs (1 thread): "
            + ", ".join(f"{k} {v['s_per_round_best']:.2f} s/round" for k, v in floor.items()),
            flush=True,
        )
        out["profile"] = profile_paths(data, x, y, rows)
        for k, v in out["profile"].items():
            print(f"---- {k}\n{v}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(
        json.dumps(
            {
                k: out[k]
                for k in (
                    "speedups_best_rounds_per_s",
                    "speedups_best_single_round",
                    "fedrepro_over_loop_same_threads",
                    "agreement",
                )
            },
            indent=1,
        )
    )
    print(f"wrote {args.out} ({out['wall_s']:.0f} s)")


def _versions() -> dict:
    out = {"torch": torch.__version__}
    for mod in ("flwr", "ray"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional benchmark dependency
            out[mod] = None
    return out


if __name__ == "__main__":
    main()
