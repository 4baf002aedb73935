"""Seconds per round of FedHDP's non-IID MNIST protocol (Aldaghri et al., Table 3 top / Table 8) on the engine's
paths, in one run: where a paper-scale seed's time goes and what each lever of the engine buys.

Not a test. One round = the training of one method for one round at paper scale: K = 100 of the 2,000 clients of
``results/data/mnist_fedhdp_noniid`` (build it first: ``python -m fedrepro data partition mnist_fedhdp_noniid --out
results/data/mnist_fedhdp_noniid``), 50 local steps of batch 20 of the 784-50-10 network for the global-model copy
and for each of Ditto's 3 lambda sets, then the server's aggregation (FedHDP with r = 0.01, adaptive clipping,
noise). A paper-scale seed is 7 trained methods x 500 such rounds plus 10 evaluations (its eighth, DP-FedAvg, is
read off HDP-FedAvg's training: ``fedrepro.papers.fedhdp.experiments.training.shared_trainings``).

Paths (``--paths``):
  vmap       the per-client step under ``torch.vmap`` (``gemm=False``: the engine before the MLP formulation)
  batched    the batched MLP formulation (``fedrepro.learning.batched_mlp``), every step over all 100 clients

(Running each period a few clients at a time through all of its steps, to keep their models in cache, was measured
with this script at commit b63bd12 on an AMD EPYC VM and was slower at every chunk size: benchmarks/RESULTS.md. The
engine now does it for methods that allow it (``engine.train``'s ``block_bytes``, default ``engine.BLOCK_BYTES``);
``--blocks`` weighs the block size on the machine at hand.)

``--src DIR`` times another checkout's code on the same paths (the ``src`` directory of a worktree of an older
commit: ``git worktree add /tmp/before 3a68e32`` then ``--src /tmp/before/src --paths vmap``): the before and after of
an engine change in one run, on one machine.

``--jobs 2`` times the same path in two processes at once, as the workflow runs two seeds on two cores (the cores
then share memory bandwidth and the last-level cache); ``--jobs 1`` alone on the machine; ``--threads`` per job. Each
measurement: one warm-up round, then ``--rounds`` timed rounds; the load average before and after is recorded.

``--processes-vs-threads`` answers how a run should spend two threads (fedrepro.processes): one process of two
threads against two processes of one thread each, on the batched path, as method-rounds per second (a job's rounds
over its median round time, summed over the jobs) and their ratio.

    python benchmarks/fedhdp_mnist.py                                  # both paths, 1 and 2 jobs of 1 thread
    python benchmarks/fedhdp_mnist.py --paths batched --jobs 1 --threads 2
    python benchmarks/fedhdp_mnist.py --processes-vs-threads --rounds 3
    python benchmarks/fedhdp_mnist.py --beside-busy --rounds 3
    python benchmarks/fedhdp_mnist.py --first-layer
    python benchmarks/fedhdp_mnist.py --blocks 0 4 8 16 32 --rounds 3

``--blocks MIB ...`` times the batched path on one thread (``--threads``) with the period's local steps taken in
client blocks of about MIB MiB of parameters each (0: every step over all 100 clients, as before blocks), one
configuration after the other, in one process and then in two at once (``--jobs``), and prints each one's
method-rounds per second against the first size's.

``--beside-busy`` answers whether a run given two threads is ever slower than one given one thread while another
CPU-bound process competes for the cores (#42: under load ~4.7 one process of two spinning OpenMP threads took 1.40
s a round against 0.46 on one thread). With ``--busy`` competitors (default 1; 0 for the quiet machine) running at
the same priority (one thread each, multiplying 512 x 512 matrices in a loop, started before and stopped after each
configuration), it times the batched path as a run would spend its threads: one process of one thread; two
processes of one thread (what ``fedrepro.processes`` does with two threads); and one process of two threads, under
OpenMP's default wait policy and under ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep: what fedrepro's command line
sets unless the environment names a policy). Each as method-rounds per second, summed over its processes, and its
ratio to the one-thread run.

``--against SRC`` times this checkout's batched path against another commit's ``src`` in one run (other, this,
this, other, for each ``--jobs``), with each one's rate of the dense step's FLOP (every input of the first layer, at
every step: the engine now computes less, so a rate above the SGEMM peak means only that) against the machine's
one-thread SGEMM peak: the before and after of an engine change (``--block-mib``: this checkout's client blocks; the
other runs with its default).

``--profile-step`` prints torch.profiler's table (self time) of 20 side-by-side local steps of Ditto's four sets,
K = 100 clients, one thread (``batched_mlp.sgd_steps_side_by_side``, after 5 untimed): where a step's time goes.

``--first-layer`` weighs the lever issue #42 named for a seed near the floor: the four model sets a Ditto method
trains (the global-model copy and the 3 lambda sets) read the same minibatch, so their first layers (784 -> 50, ~99%
of the FLOPs) could be one GEMM of width 200 instead of four of width 50, forward and in the fused SGD step. It times
both on one thread, per local step of the K = 100 clients, with GFLOP/s and the bytes of weights each pass must move,
against the machine's SGEMM peak measured in the same process (a 2048^3 GEMM) and a streaming copy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PARTITION = ROOT / "results" / "data" / "mnist_fedhdp_noniid"


def one(path: str, rounds: int, threads: int, block_mib: float | None = None) -> dict:
    """Time ``rounds`` rounds of the protocol on ``path`` in this process (after one warm-up round)."""
    import numpy as np
    import torch

    import fedrepro
    from fedrepro.data import fedformat
    from fedrepro.learning import engine
    from fedrepro.learning.data import ClientData
    from fedrepro.learning.models import MLP
    from fedrepro.papers.fedhdp.fedhdp import FedHDP

    torch.set_num_threads(threads)
    ds = fedformat.load(PARTITION)
    data = ClientData(ds)
    private = ~np.asarray(ds.client_meta("opt_out"), dtype=bool)
    clip = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 5.0}
    times = []

    def clock(info: dict) -> None:
        times.append(time.perf_counter())

    kw = dict(batch_size=20, lr=0.5, tau=50, clients_per_round=100, seed=0, eval_every=0, callback=clock)
    algorithm = FedHDP(private=private, r=0.01, noise_multiplier=1.5, clip=clip, lams=[0.005, 0.05, 0.25])
    load = os.getloadavg()[0]
    # a warm-up round, the timed rounds, and a last one whose time would include the final evaluation
    if block_mib is not None:
        kw["block_bytes"] = int(block_mib * 2**20)
    engine.train(algorithm, data, lambda: MLP(784, 10, (50,)), rounds=rounds + 2, gemm=path != "vmap", **kw)
    per_round = np.diff(times)[:-1]
    return {
        "path": path,
        "threads": threads,
        "s_per_round": float(np.median(per_round)),
        "rounds": [float(t) for t in per_round],
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "fedrepro": str(Path(fedrepro.__file__).parent),
        "block_mib": block_mib,
    }


def measure(
    path: str,
    rounds: int,
    jobs: int,
    threads: int,
    src: Path | None = None,
    env: dict | None = None,
    block_mib: float | None = None,
) -> list[dict]:
    """``jobs`` processes timing ``path`` at once, ``threads`` threads each, on ``src``'s fedrepro (default: this
    checkout's), with ``env`` added to their environment; ``block_mib``: the engine's client blocks (None: its
    default)."""
    cmd = [sys.executable, __file__, "--child", path, "--rounds", str(rounds), "--threads", str(threads)]
    if block_mib is not None:
        cmd += ["--block-mib", str(block_mib)]
    env = dict(os.environ, **(env or {}), **({"PYTHONPATH": str(src)} if src else {}))
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(jobs)]
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"{path}: child failed with status {p.returncode}")
        out.append(dict(json.loads(stdout.strip().splitlines()[-1]), jobs=jobs, src=str(src or ROOT / "src")))
    return out


def processes_vs_threads(rounds: int, src: Path | None, out: Path) -> None:
    """Two threads spent as one process of two or as two processes of one, timed one after the other."""
    results, rate = [], {}
    for jobs, threads in ((1, 2), (2, 1)):
        runs = measure("batched", rounds, jobs, threads, src)
        results += runs
        rate[jobs] = sum(1.0 / r["s_per_round"] for r in runs)
        loads = ", ".join(f"{r['load_before']:.2f} -> {r['load_after']:.2f}" for r in runs)
        medians = ", ".join(f"{r['s_per_round']:.2f}" for r in runs)
        print(
            f"{jobs} process(es) x {threads} thread(s): median s per method-round {medians}; "
            f"{rate[jobs]:.3f} method-rounds per s (load {loads})",
            flush=True,
        )
    print(f"two processes / one process of two threads: {rate[2] / rate[1]:.2f}x the method-rounds per second")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": results, "ratio": rate[2] / rate[1]}, indent=1))
    print(f"wrote {out}")


def blocks(sizes: list[float], rounds: int, jobs: list[int], threads: int, src: Path | None, out: Path) -> None:
    """The batched path with the period's local steps in client blocks of each size (MiB), one configuration after
    the other, in ``jobs`` processes at once (two: as two seeds share the cores and the last-level cache)."""
    results = []
    for n in jobs:
        base = None
        for mib in sizes:
            runs = measure("batched", rounds, n, threads, src, {"OMP_WAIT_POLICY": "PASSIVE"}, mib)
            results += runs
            rate = sum(1.0 / r["s_per_round"] for r in runs)
            base = base or rate
            medians = ", ".join(f"{r['s_per_round']:.3f}" for r in runs)
            loads = ", ".join(f"{r['load_before']:.2f} -> {r['load_after']:.2f}" for r in runs)
            what = " (all clients together)" if not mib else ""
            print(
                f"jobs={n} x {threads} thread(s), blocks of {mib:g} MiB{what}: median s per method-round {medians}; "
                f"{rate:.3f} method-rounds per s, {rate / base:.2f}x the first (load {loads})",
                flush=True,
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": results}, indent=1))
    print(f"wrote {out}")


# the competitor of --beside-busy: one thread of GEMMs, CPU-bound like another seed's run
BUSY = """
import torch
torch.set_num_threads(1)
a = torch.rand(512, 512)
while True:
    a = torch.mm(a, a).clamp_(0, 1)
"""


def beside_busy(rounds: int, busy: int, src: Path | None, out: Path) -> None:
    """Method-rounds per second of each way to spend the threads, each beside ``busy`` busy one-thread processes."""
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    configs = (
        ("1 process x 1 thread", 1, 1, passive),
        ("2 processes x 1 thread (PASSIVE)", 2, 1, passive),
        ("1 process x 2 threads (OpenMP default wait)", 1, 2, {}),
        ("1 process x 2 threads (PASSIVE)", 1, 2, passive),
    )
    results, rate = [], {}
    for name, jobs, threads, env in configs:
        competitors = [
            subprocess.Popen([sys.executable, "-c", BUSY], env=dict(os.environ, OMP_NUM_THREADS="1"))
            for _ in range(busy)
        ]
        try:
            time.sleep(2.0 if busy else 0.0)  # the competitors running before the first timed round
            runs = measure("batched", rounds, jobs, threads, src, env)
        finally:
            for c in competitors:
                c.kill()
                c.wait()
        results += [dict(r, config=name, busy=busy) for r in runs]
        rate[name] = sum(1.0 / r["s_per_round"] for r in runs)
        loads = ", ".join(f"{r['load_before']:.2f} -> {r['load_after']:.2f}" for r in runs)
        medians = ", ".join(f"{r['s_per_round']:.2f}" for r in runs)
        base = rate[configs[0][0]]
        print(
            f"{name}: median s per method-round {medians}; {rate[name]:.3f} method-rounds per s, "
            f"{rate[name] / base:.2f}x one thread (load {loads})",
            flush=True,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"busy": busy, "runs": results, "method_rounds_per_s": rate}, indent=1))
    print(f"wrote {out}")


def against(
    other: Path, rounds: int, jobs_list: list[int], threads: int, out: Path, block_mib: float | None = None
) -> None:
    """This checkout's batched path against ``other`` (another commit's ``src``), in one run: for each job count,
    other, this, this, other (so a drift of the machine's speed weighs on both alike); the median s per
    method-round of each and the achieved GFLOP/s of one process against the machine's one-thread SGEMM peak.
    ``block_mib``: this checkout's client blocks (None: its default; the other's are always its default)."""
    import numpy as np
    from paper_scale import mlp_flop_per_example, sgemm_peak_gflops

    K, steps, sets, B = 100, 50, 4, 20  # one method-round of one(): FedHDP's global-model copy and 3 lambda sets
    flop = K * steps * sets * B * mlp_flop_per_example([784, 50, 10])
    peak = sgemm_peak_gflops()
    print(
        f"one method-round: {flop / 1e9:.1f} GFLOP of the dense step; one thread's SGEMM peak {peak:.1f} GFLOP/s",
        flush=True,
    )
    codes, blocks = {"other": other, "this": None}, {"other": None, "this": block_mib}
    results: list[dict] = []
    for jobs in jobs_list:
        runs: dict[str, list[dict]] = {"other": [], "this": []}
        for name in ("other", "this", "this", "other"):
            runs[name] += measure("batched", rounds, jobs, threads, codes[name], block_mib=blocks[name])
        medians = {}
        for name, rs in runs.items():
            per_round = [t for r in rs for t in r["rounds"]]
            medians[name] = float(np.median(per_round))
            loads = ", ".join(f"{r['load_before']:.2f}" for r in rs)
            results.append({"code": name, "jobs": jobs, "threads": threads, "runs": rs})
            print(
                f"jobs={jobs} threads={threads} {name:5s} ({_shown(rs[0]['src'])}): {medians[name]:.2f} s per "
                "method-round, "
                f"{flop / medians[name] / 1e9:.1f} dense GFLOP/s a process "
                f"({100 * flop / medians[name] / 1e9 / peak:.0f}% of peak); "
                f"rounds {', '.join(f'{t:.2f}' for t in per_round)}; load before {loads}",
                flush=True,
            )
        print(f"jobs={jobs}: this / other = {medians['this'] / medians['other']:.2f}x the time", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"flop_per_method_round": flop, "sgemm_peak_gflops": peak, "runs": results}, indent=1))
    print(f"wrote {out}")


def profile_step(steps: int = 20) -> None:
    """torch.profiler's self times over ``steps`` side-by-side steps of the four sets (module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from fedrepro.learning import batched_mlp
    from fedrepro.learning.models import MLP

    torch.set_num_threads(1)
    model, K, gen = MLP(784, 10, (50,)), 100, torch.Generator().manual_seed(0)
    base = {n: v.detach().expand(K, *v.shape).clone() for n, v in model.named_parameters()}
    sets = batched_mlp.side_by_side(model, [{k: v.clone() for k, v in base.items()} for _ in range(4)])
    x, y = torch.rand(K, 20, 784, generator=gen), torch.randint(0, 10, (K, 20), generator=gen)
    anchor = {n: v.detach().clone() for n, v in model.named_parameters()}
    decays = [(0.0, None)] + [(0.0, (torch.full((K,), 0.05), anchor))] * 3  # FedHDP: no weight decay
    for _ in range(5):
        batched_mlp.sgd_steps_side_by_side(model, sets, x, y, 0.01, decays)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            batched_mlp.sgd_steps_side_by_side(model, sets, x, y, 0.01, decays)
    print(f"load {os.getloadavg()}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


def _shown(src: str) -> str:
    """A source directory as printed: relative to this checkout where it lies inside it (no machine's path)."""
    path = Path(src)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else src


def first_layer(repeat: int = 30) -> dict:
    """The first layer of the 4 Ditto sets, per set and fused, on one thread (see the module's docstring)."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    K, B, IN, OUT, SETS = 100, 20, 784, 50, 4
    gen = torch.Generator().manual_seed(0)
    h = torch.rand(K, B, IN, generator=gen)
    sets = [torch.randn(K, OUT, IN, generator=gen) * 0.01 for _ in range(SETS)]
    fused = torch.cat(sets, 1)  # (K, 4 x 50, 784): the same weights, one tensor
    bias = [torch.zeros(K, 1, OUT) for _ in range(SETS)]
    bias4 = torch.zeros(K, 1, SETS * OUT)
    dz = [torch.randn(K, B, OUT, generator=gen) * 0.01 for _ in range(SETS)]
    dz4 = torch.cat(dz, 2)

    def median_ms(fn) -> float:
        fn()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e3

    big = torch.rand(2048, 2048, generator=gen)
    peak = 2 * 2048**3 / median_ms(lambda: torch.mm(big, big)) / 1e6  # GFLOP/s
    src, dst = torch.rand(64 * 2**20 // 4, generator=gen), torch.empty(64 * 2**20 // 4)
    stream = 2 * src.numel() * 4 / median_ms(lambda: dst.copy_(src)) / 1e6  # GB/s read + write
    per_set = {
        "forward": median_ms(lambda: [torch.baddbmm(b, h, w.transpose(1, 2)) for b, w in zip(bias, sets)]),
        "step": median_ms(lambda: [w.baddbmm_(d.transpose(1, 2), h, alpha=-1e-6) for w, d in zip(sets, dz)]),
    }
    one_gemm = {
        "forward": median_ms(lambda: torch.baddbmm(bias4, h, fused.transpose(1, 2))),
        "step": median_ms(lambda: fused.baddbmm_(dz4.transpose(1, 2), h, alpha=-1e-6)),
    }
    flop = 2 * K * B * IN * OUT * SETS  # one pass (forward or step) of the 4 sets
    weights = K * OUT * IN * SETS * 4  # bytes: the forward reads them, the step reads and writes them
    out = {"sgemm_peak_gflops": peak, "stream_gb_s": stream, "flop_per_pass": flop, "weight_bytes": weights}
    print(f"one thread: SGEMM peak {peak:.1f} GFLOP/s (2048^3), streaming copy {stream:.1f} GB/s (read + write)")
    print(
        f"first layer of the 4 Ditto sets, K = {K} clients x B = {B}: {flop / 1e6:.0f} MFLOP and "
        f"{weights / 2**20:.0f} MiB of weights a pass"
    )
    for name, res in (("4 GEMMs of width 50", per_set), ("1 GEMM of width 200", one_gemm)):
        out[name] = res
        for p, ms in res.items():
            moved, rate = weights * (1 if p == "forward" else 2), flop / ms / 1e6
            print(
                f"  {name}, {p:7s}: {ms:6.2f} ms, {rate:5.1f} GFLOP/s ({100 * rate / peak:3.0f}% of peak), "
                f"{moved / ms / 1e6:5.1f} GB/s of weights"
            )
    total = {k: sum(v.values()) for k, v in (("per_set", per_set), ("fused", one_gemm))}
    out["fused_over_per_set"] = total["fused"] / total["per_set"]
    print(
        f"forward + step, fused / per set: {total['fused']:.2f} / {total['per_set']:.2f} ms = "
        f"{out['fused_over_per_set']:.2f}x the time"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", nargs="+", default=["vmap", "batched"], choices=["vmap", "batched"])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads of each job")
    ap.add_argument("--src", type=Path, help="time this fedrepro source directory instead (an older commit's)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fedhdp_mnist.json")
    ap.add_argument("--processes-vs-threads", action="store_true", help="2 threads: 1 process of 2 vs 2 processes of 1")
    ap.add_argument("--beside-busy", action="store_true", help="1 vs 2 threads beside --busy busy processes")
    ap.add_argument("--busy", type=int, default=1, help="busy one-thread processes beside --beside-busy (default 1)")
    ap.add_argument("--first-layer", action="store_true", help="the 4 Ditto sets' first layer: per set vs fused")
    ap.add_argument("--blocks", type=float, nargs="+", metavar="MIB", help="client block sizes to time (0: none)")
    ap.add_argument("--against", type=Path, metavar="SRC", help="this checkout vs SRC (another commit's src)")
    ap.add_argument("--profile-step", action="store_true", help="profile 20 side-by-side steps of the 4 sets")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--block-mib", type=float, help="with --against: this checkout's client blocks (MiB; 0: none)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.rounds, args.threads, args.block_mib)))
        return
    if args.profile_step:
        profile_step()
        return
    if args.first_layer:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_name("fedhdp_first_layer.json").write_text(json.dumps(first_layer(), indent=1))
        return
    if not (PARTITION / "manifest.json").is_file():
        build = f"python -m fedrepro data partition {PARTITION.name} --out {PARTITION}"
        raise SystemExit(f"{PARTITION} is missing: {build}")
    if args.against:
        out = args.out.with_name("fedhdp_against.json")
        against(args.against, args.rounds, args.jobs, args.threads, out, args.block_mib)
        return
    if args.processes_vs_threads:
        processes_vs_threads(args.rounds, args.src, args.out)
        return
    if args.blocks:
        blocks(args.blocks, args.rounds, args.jobs, args.threads, args.src, args.out.with_name("fedhdp_blocks.json"))
        return
    if args.beside_busy:
        beside_busy(args.rounds, args.busy, args.src, args.out.with_name(f"fedhdp_beside_busy{args.busy}.json"))
        return
    results = []
    for jobs in args.jobs:
        for path in args.paths:
            for r in measure(path, args.rounds, jobs, args.threads, args.src):
                results.append(r)
                print(
                    f"{path:8s} jobs={jobs} threads={r['threads']}: {r['s_per_round']:6.2f} s per round "
                    f"(rounds {', '.join(f'{t:.2f}' for t in r['rounds'])}; load {r['load_before']:.2f} -> "
                    f"{r['load_after']:.2f})",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
