"""Benchmark of the batched federated engine (fedrepro.learning.engine) against the machine's limit and against the
per-client Python loop of the same math (``train(..., vectorize=False)``), in one run.

Not a test. Table-2-shaped setting (Ozkara et al. 2023): m = 50 clients, all sampled (K = m), LeNet5, tau = 10,
batch size 20 (1,200 training images per client -> 60 iterations per epoch). Data: the Fashion-MNIST partition
``results/data/fashion_mnist_pathological_m50`` when it exists, else synthetic uint8 28x28 arrays of the same
size (stated in the output; ``fl_setting.load_data``). Results go to benchmarks/results/engine.json (not committed).

What it measures, in this order:
1. **Peak**: single-precision GEMM GFLOP/s of this machine, ``torch.mm`` of two 2048 x 2048 float32 matrices, best
   of 10, at each thread count (2 n^3 FLOPs per product).
2. **FLOPs of a round**: ``torch.utils.flop_counter.FlopCounterMode`` around the algorithm's local steps of one
   round: every matrix product and convolution the round executes, forward and backward, 2 FLOPs per
   multiply-add; the data's own gradient is not computed, so not counted; ReLU, pooling, the loss, the SGD update
   and the sampling are not counted (they are not FLOP-bound). For FedAvg with LeNet5 this is 1.517 MFLOP per image
   (fwd 0.563 + bwd 0.954), 15.2 GFLOP per round; it is the same on both paths (checked and recorded). The
   compiled kernel's products (fedrepro.learning.native_cnn) are not PyTorch ops: the counter counts the PyTorch
   formulation of the same step.
3. **Rounds**: for each algorithm, thread count and path (``engine``: the batched engine, with the compiled CNN
   kernel where it applies; ``torch``: the batched engine with the PyTorch formulation of that step instead;
   ``loop``: the per-client loop): one warm-up round, then
   ``--rounds`` timed rounds of training (evaluation excluded), measured ``--repeat`` times interleaved; the best
   and the median measurement are kept, each with ``os.getloadavg()`` before and after. Achieved GFLOP/s = FLOPs of
   a round / s per round; the ratio to the peak at the same thread count; engine / loop at equal threads.
4. ``--profile``: torch.profiler of one batched round of each of ``--algorithms`` (1 thread) in the PyTorch
   formulation (``torch`` among ``--paths``) and with the compiled kernel (``engine``, its calls as ``native_cnn.*``
   rows: opaque, their FLOPs not counted), per op: self time, FLOPs and GFLOP/s, and the bound the GEMMs alone
   would give (what remains when every other op took no time).

Timings on a shared machine: ``--quiet-load L`` (default 0.5) waits up to ``--wait`` seconds before each
measurement for the 1-minute load average to fall below L, and records what it was either way.

    python benchmarks/engine.py                              # peak, fedavg + adaped, 1 and 2 threads
    python benchmarks/engine.py --algorithms fedavg --profile
    python benchmarks/engine.py --device cuda --threads 1    # on a GPU machine (peak: the GPU's SGEMM)
    python benchmarks/engine.py --device cuda --threads 1 --gemm on --out benchmarks/results/engine_cuda_gemm.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fl_setting as S  # noqa: E402  (the setting's data and machine record, shared with fedavg_frameworks.py)

from fedrepro.learning import engine, native_cnn  # noqa: E402
from fedrepro.learning.data import ClientData  # noqa: E402
from fedrepro.learning.fedavg import FedAvg  # noqa: E402
from fedrepro.learning.models import LeNet5  # noqa: E402
from fedrepro.papers.adaped.adaped import AdaPeD  # noqa: E402

HERE = Path(__file__).resolve().parent
ALGORITHMS = {"fedavg": FedAvg, "adaped": AdaPeD}
# path -> vectorize; "torch": the batched engine with the PyTorch formulation of the CNN's fused step instead of the
# compiled kernel (fedrepro.learning.native_cnn), which "engine" takes where it applies
PATHS = {"engine": True, "torch": True, "loop": False}


def sgemm_gflops(threads: int, device: str = "cpu", n: int = 2048, repeat: int = 10) -> float:
    """Best-of-``repeat`` float32 GEMM rate (GFLOP/s) of ``torch.mm`` on two n x n matrices."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    c = torch.empty(n, n, device=device)
    best = float("inf")
    for _ in range(repeat + 1):
        _sync(device)
        t = time.perf_counter()
        torch.mm(a, b, out=c)
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class EvaluationStarts(Exception):
    """Raised by an algorithm with ``stop_at_eval`` set when training ends and evaluation would start."""


def instrumented(cls: type) -> type:
    """``cls`` that stamps the start of the final evaluation (or stops there) and can count its local steps' FLOPs."""

    class Instrumented(cls):
        flops: int = 0
        count = stop_at_eval = False

        def local_step(self, *args):
            if not self.count:
                return super().local_step(*args)
            with FlopCounterMode(display=False) as counter:
                out = super().local_step(*args)
            self.flops += counter.get_total_flops()
            return out

        def deployed_params(self, state, ctx=None):
            self.eval_start, self.eval_cpu = time.perf_counter(), time.process_time()
            if self.stop_at_eval:
                raise EvaluationStarts
            return super().deployed_params(state, ctx)

    return Instrumented


GEMM = {"auto": None, "on": True, "off": False}  # --gemm -> engine.train(gemm=...)


def train(
    algorithm: str,
    data: ClientData,
    *,
    vectorize: bool,
    rounds: int,
    batch_size: int,
    tau: int,
    device: str,
    gemm: bool | None = None,
    count: bool = False,
    stop_at_eval: bool = False,
    callback=None,
):
    algo = instrumented(ALGORITHMS[algorithm])()
    algo.count, algo.stop_at_eval = count, stop_at_eval
    try:
        engine.train(
            algo,
            data,
            lambda: LeNet5(),
            batch_size=batch_size,
            lr=0.05,
            tau=tau,
            rounds=rounds,
            eval_every=0,
            device=device,
            vectorize=vectorize,
            gemm=gemm,
            callback=callback,
        )
    except EvaluationStarts:
        pass
    return algo


def round_flops(algorithm: str, data: ClientData, **kw) -> dict[str, int]:
    """FLOPs of one round's local steps on each path (FlopCounterMode). The compiled kernel's products are not
    PyTorch ops, so the counter cannot see them: the engine path counts the PyTorch formulation of the same step."""
    with native_cnn.disabled():
        flops = {
            path: train(algorithm, data, vectorize=vec, rounds=1, count=True, **kw).flops for path, vec in PATHS.items()
        }
    return flops


def path_kernel(path: str):
    """The context a path's rounds run in: the PyTorch formulation for ``torch``."""
    return native_cnn.disabled() if path == "torch" else contextlib.nullcontext()


def time_rounds(algorithm: str, data: ClientData, *, vectorize: bool, rounds: int, device: str, **kw) -> dict:
    """After a warm-up round, wall seconds per round of ``rounds`` rounds (training only) and this process's CPU
    seconds per round (the same rounds; less sensitive to other processes than wall time; summed over threads)."""
    stamps: list[tuple[float, float]] = []

    def stamp(info=None):
        _sync(device)
        stamps.append((time.perf_counter(), time.process_time()))

    stamp()
    algo = train(
        algorithm, data, vectorize=vectorize, rounds=rounds + 1, device=device, callback=stamp, stop_at_eval=True, **kw
    )
    stamps.append((algo.eval_start, algo.eval_cpu))  # the last round ends where the evaluation starts
    wall, cpu = np.diff(np.array(stamps[1:]), axis=0).T  # rounds 2 .. rounds+1 (round 1 is the warm-up)
    return {
        "s_per_round": float(wall.mean()),
        "per_round_s": wall.tolist(),
        "cpu_s_per_round": float(cpu.mean()),
        "warmup_round_s": stamps[1][0] - stamps[0][0],
    }


def wait_for_quiet(limit: float, wait_s: float) -> list[float]:
    """Poll the 1-minute load average until it is below ``limit`` or ``wait_s`` seconds passed; returns the load."""
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        time.sleep(min(15.0, max(0.0, deadline - time.monotonic())))
    return list(os.getloadavg())


def profile_round(
    data: ClientData,
    *,
    batch_size: int,
    tau: int,
    device: str,
    gemm: bool | None = None,
    algorithm: str = "fedavg",
    top: int = 18,
) -> dict:
    """Per-op profile of one batched round of ``algorithm`` (after a warm-up round): self time, FLOPs, GFLOP/s."""
    from torch.profiler import ProfilerActivity, profile

    kw = dict(batch_size=batch_size, tau=tau, device=device, gemm=gemm, stop_at_eval=True)
    train(algorithm, data, vectorize=True, rounds=1, **kw)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as prof:  # training only
        t = time.perf_counter()
        train(algorithm, data, vectorize=True, rounds=1, **kw)
        train_s = time.perf_counter() - t
    rows = []
    for e in prof.key_averages():
        if e.self_cpu_time_total <= 0 or e.key.startswith(("ProfilerStep", "autograd::engine")):
            continue
        rows.append({"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3, "gflop": e.flops / 1e9})
    rows.sort(key=lambda r: -r["self_ms"])
    by_shape = []  # the matrix products one by one: which shapes hold the GEMM rate down
    for e in prof.key_averages(group_by_input_shape=True):
        if e.flops > 0 and e.self_cpu_time_total > 0 and ("mm" in e.key or "conv" in e.key):
            ms = e.self_cpu_time_total / 1e3
            by_shape.append(
                {"op": e.key, "shapes": str(e.input_shapes), "calls": e.count, "self_ms": ms, "gflop": e.flops / 1e9}
            )
            by_shape[-1]["gflop_per_s"] = by_shape[-1]["gflop"] / (ms / 1e3)
    by_shape.sort(key=lambda r: -r["self_ms"])
    total_ms = sum(r["self_ms"] for r in rows)
    gemm_ms = sum(r["self_ms"] for r in rows if r["gflop"] > 0)
    gflop = sum(r["gflop"] for r in rows)
    for r in rows:
        r["share"] = r["self_ms"] / total_ms
        r["gflop_per_s"] = r["gflop"] / (r["self_ms"] / 1e3) if r["gflop"] else None
    return {
        "round_wall_s_incl_profiler": train_s,
        "self_ms_total": total_ms,
        "gflop": gflop,
        "gemm_ms": gemm_ms,
        "other_ms": total_ms - gemm_ms,
        "gemm_only_gflop_per_s": gflop / (gemm_ms / 1e3) if gemm_ms else None,
        "achieved_gflop_per_s": gflop / (total_ms / 1e3),
        "ops": rows[:top],
        "gemm_by_shape": by_shape,
    }


def print_profile(p: dict, algorithm: str = "fedavg", path: str = "torch") -> None:
    formulation = "PyTorch formulation" if path == "torch" else "compiled kernel"
    print(
        f"profile of one batched {algorithm} round (1 thread, {formulation}): {p['self_ms_total']:.0f} ms self time, "
        f"{p['gflop']:.2f} GFLOP -> {p['achieved_gflop_per_s']:.1f} GFLOP/s; GEMM ops {p['gemm_ms']:.0f} ms "
        f"({p['gemm_only_gflop_per_s']:.1f} GFLOP/s), everything else {p['other_ms']:.0f} ms"
    )
    print(f"  {'op':42s} {'calls':>6s} {'ms':>8s} {'share':>6s} {'GFLOP':>7s} {'GFLOP/s':>8s}")
    for r in p["ops"]:
        rate = f"{r['gflop_per_s']:8.1f}" if r["gflop_per_s"] else " " * 8
        print(f"  {r['op'][:42]:42s} {r['calls']:6d} {r['self_ms']:8.1f} {r['share']:6.1%} {r['gflop']:7.3f} {rate}")
    print("  matrix products by shape:")
    for r in p["gemm_by_shape"]:
        rate = f"{r['self_ms']:8.1f} ms {r['gflop_per_s']:6.1f} GFLOP/s"
        print(f"  {r['op']:12s} {r['shapes'][:70]:70s} {r['calls']:5d} {rate}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per measurement (after one warm-up round)")
    ap.add_argument("--repeat", type=int, default=2, help="measurements per configuration, interleaved")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    ap.add_argument("--batch-size", type=int, default=S.BATCH_SIZE)
    ap.add_argument("--tau", type=int, default=S.TAU)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--gemm",
        choices=list(GEMM),
        default="auto",
        help="the engine's im2col + matmul CNN formulation (auto: on CPU only)",
    )
    ap.add_argument("--profile", action="store_true", help="per-op profile of one batched round of each algorithm")
    ap.add_argument("--profile-only", action="store_true", help="the peak and the profile, no timed rounds")
    ap.add_argument("--quiet-load", type=float, default=0.5, help="wait for the 1-min load to fall below this")
    ap.add_argument("--wait", type=float, default=300.0, help="seconds to wait for it before each measurement")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engine.json")
    args = ap.parse_args()
    profiled = args.algorithms
    if args.profile_only:
        args.repeat, args.profile, args.algorithms = 0, True, []

    wall0 = time.perf_counter()
    ds, source = S.load_data(S.N_CLIENTS, 1200, 200)
    data = ClientData(ds, args.device)
    kw = dict(batch_size=args.batch_size, tau=args.tau, device=args.device, gemm=GEMM[args.gemm])
    print(f"data: {source}; device {args.device}; torch {torch.__version__}", flush=True)

    peak = {}  # measured again after the rounds; the higher of the two is kept (both recorded)
    for threads in args.threads:
        load = wait_for_quiet(args.quiet_load, args.wait)
        peak[str(threads)] = {"gflop_per_s": sgemm_gflops(threads, args.device), "loadavg": load}
        print(
            f"peak: SGEMM 2048^2 float32, {threads} thread(s): {peak[str(threads)]['gflop_per_s']:.1f} GFLOP/s "
            f"(load {load[0]:.2f})",
            flush=True,
        )

    torch.set_num_threads(1)
    flops = {a: round_flops(a, data, **kw) for a in args.algorithms}
    for a, f in flops.items():
        print(f"{a}: {f['engine'] / 1e9:.2f} GFLOP per round (loop path: {f['loop'] / 1e9:.2f})", flush=True)

    results = []
    for rep in range(args.repeat):
        for algorithm in args.algorithms:
            for threads in args.threads:
                for path in args.paths:
                    torch.set_num_threads(threads)
                    before = wait_for_quiet(args.quiet_load, args.wait)
                    with path_kernel(path):
                        r = time_rounds(algorithm, data, vectorize=PATHS[path], rounds=args.rounds, **kw)
                    after = list(os.getloadavg())
                    rate = flops[algorithm][path] / r["s_per_round"] / 1e9
                    results.append(
                        {
                            "algorithm": algorithm,
                            "threads": threads,
                            "path": path,
                            "repeat": rep,
                            **r,
                            "rounds_per_s": 1 / r["s_per_round"],
                            "gflop_per_s": rate,
                            "of_peak": rate / peak[str(threads)]["gflop_per_s"],
                            "loadavg_before": before,
                            "loadavg_after": after,
                        }
                    )
                    print(
                        f"{algorithm:7s} threads={threads} {path:6s} {r['s_per_round']:6.3f} s/round "
                        f"{rate:6.1f} GFLOP/s ({rate / peak[str(threads)]['gflop_per_s']:5.1%} of peak), "
                        f"CPU {r['cpu_s_per_round']:6.3f} s/round, load {before[0]:.2f}->{after[0]:.2f}",
                        flush=True,
                    )

    for threads in args.threads:
        again = sgemm_gflops(threads, args.device)
        peak[str(threads)]["after_rounds_gflop_per_s"] = again
        if again > peak[str(threads)]["gflop_per_s"]:
            peak[str(threads)]["gflop_per_s"] = again
            for r in results:
                if r["threads"] == threads:
                    r["of_peak"] = r["gflop_per_s"] / again
    summary = {}
    for algorithm in args.algorithms:
        for threads in args.threads:
            cell = {}
            for path in args.paths:
                runs = [r for r in results if (r["algorithm"], r["threads"], r["path"]) == (algorithm, threads, path)]
                best = min(runs, key=lambda r: r["s_per_round"])
                cell[path] = {
                    "best_s_per_round": best["s_per_round"],
                    "median_s_per_round": statistics.median(r["s_per_round"] for r in runs),
                    "best_cpu_s_per_round": min(r["cpu_s_per_round"] for r in runs),
                    "best_gflop_per_s": best["gflop_per_s"],
                    "best_of_peak": best["of_peak"],
                    "loadavg_of_best": best["loadavg_before"],
                }
            if {"engine", "loop"} <= cell.keys():
                cell["engine_over_loop_best"] = cell["loop"]["best_s_per_round"] / cell["engine"]["best_s_per_round"]
                cell["engine_over_loop_median"] = (
                    cell["loop"]["median_s_per_round"] / cell["engine"]["median_s_per_round"]
                )
                cell["engine_over_loop_cpu"] = (
                    cell["loop"]["best_cpu_s_per_round"] / cell["engine"]["best_cpu_s_per_round"]
                )
            summary.setdefault(algorithm, {})[str(threads)] = cell
    out = {
        "benchmark": "fedrepro.learning.engine (batched) vs the per-client loop, against the SGEMM peak",
        "command": " ".join(sys.argv),
        "data": source,
        "setting": {
            "n_clients": data.n_clients,
            "clients_per_round": data.n_clients,
            "model": "LeNet5 (44,426)",
            "batch_size": args.batch_size,
            "tau": args.tau,
            "timed_rounds": args.rounds,
            "repeat": args.repeat,
            "gemm": args.gemm,
        },
        "flops": {
            "per_round": flops,
            "how": "FlopCounterMode over the local steps of one round: matmul and "
            "convolution FLOPs (2 per multiply-add), forward and backward, as executed",
        },
        "peak_sgemm": peak,
        "machine": S.machine(),
        "results": results,
        "summary": summary,
        "targets": {
            f"{a}/{t}": {
                "engine_over_loop_ge_3": c.get("engine_over_loop_best", 0) >= 3,
                "engine_ge_25pct_of_peak": c.get("engine", {}).get("best_of_peak", 0) >= 0.25,
            }
            for a, cells in summary.items()
            for t, c in cells.items()
        },
    }
    if args.profile:
        torch.set_num_threads(1)
        out["profile"] = {}
        for algorithm, path in [(a, p) for a in profiled for p in ("torch", "engine") if p in args.paths]:
            load = wait_for_quiet(args.quiet_load, args.wait)
            with native_cnn.disabled() if path == "torch" else contextlib.nullcontext():
                prof = {**profile_round(data, algorithm=algorithm, **kw), "loadavg_before": load}
            out["profile"][f"{algorithm}/{path}"] = prof
            print_profile(prof, algorithm, path)
    out["wall_s"] = time.perf_counter() - wall0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for a, cells in summary.items():
        for t, c in cells.items():
            if "engine_over_loop_best" in c:
                print(
                    f"{a} threads={t}: engine {c['engine']['best_s_per_round']:.3f} s/round "
                    f"({c['engine']['best_gflop_per_s']:.1f} GFLOP/s, {c['engine']['best_of_peak']:.1%} of peak), "
                    f"loop {c['loop']['best_s_per_round']:.3f} s/round ({c['loop']['best_gflop_per_s']:.1f} "
                    f"GFLOP/s) -> engine/loop {c['engine_over_loop_best']:.2f}x (CPU time: "
                    f"{c['engine_over_loop_cpu']:.2f}x)"
                )
            if {"engine", "torch"} <= c.keys():
                print(
                    f"{a} threads={t}: the PyTorch formulation {c['torch']['best_s_per_round']:.3f} s/round "
                    f"({c['torch']['best_gflop_per_s']:.1f} GFLOP/s) -> engine/torch "
                    f"{c['torch']['best_s_per_round'] / c['engine']['best_s_per_round']:.2f}x"
                )
    print(f"wrote {args.out} ({out['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
