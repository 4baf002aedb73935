"""Cost curves of the batched engine and the per-client loop: rounds/s and peak memory vs clients per round and vs
batch size. One command writes the figure ``benchmarks/cost_curves.png``, the table in ``benchmarks/RESULTS.md``
(between its ``cost-curves`` markers) and ``benchmarks/results/cost_curves.json``.

Not a test. FedAvg, LeNet5, tau = 10 local steps per round, synthetic LeNet5-shaped data (uint8 28x28, 10 classes,
``--train-rows`` training images per client), every client sampled every round, 1 torch thread (``--threads``).
``--model`` swaps LeNet5 for another registered CNN with its input shape (``MODEL_SHAPES``: the CIFAR CNNs on
synthetic uint8 3x32x32 data) and ``--points KxB ...`` measures only the given settings instead of the two sweeps:
printed, not written into RESULTS.md: how the CIFAR experiments' SLURM runtimes in config/adaped.yaml are
measured.
Each point is one child process (so that its peak RSS, VmHWM, is its own): one warm-up round, then timed rounds
until ``--budget`` seconds (at least one). Sweeps: clients per round K at batch 20, and batch size B at K = 50.

Memory: on CPU the engine runs the CNN step in chunks of clients whose im2col buffers stay within
``batched_cnn.CHUNK_BYTES`` per thread (``batched_cnn.chunk_clients``), so its activations do not grow with K; what
grows with K is the per-client state (data, stacked parameters). ``--chunk N`` sets the ``vmap`` chunk of the
algorithms that map their own step (``engine.train(chunk_size=N)``; FedAvg's fused cross-entropy step keeps its
own bound). The peak-RSS column shows how far that is from the machine's memory.

    python benchmarks/cost_curves.py                             # K = 10 .. 1000, B = 5 .. 200 (~30 min)
    python benchmarks/cost_curves.py --clients 10 100 --batches 20 --budget 5
    python benchmarks/cost_curves.py --model cifar10_cnn --points 10x17 6x42 --out benchmarks/results/cost_cifar10.json
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
RESULTS_MD = HERE / "RESULTS.md"
BEGIN, END = "<!-- cost-curves:begin -->", "<!-- cost-curves:end -->"

#: --model -> (feature shape of one synthetic uint8 image, classes): the shapes the experiments train them on
MODEL_SHAPES = {
    "lenet5": ((28, 28), 10),
    "cifar10_cnn": ((3, 32, 32), 10),
    "cifar100_cnn": ((3, 32, 32), 100),
    "fedhdp_cnn": ((28, 28), 62),
}


def one_point(
    clients: int,
    batch: int,
    path: str,
    train_rows: int,
    budget: float,
    chunk: int | None,
    model: str = "lenet5",
    device: str = "cpu",
) -> dict:
    """Runs in the child: time FedAvg rounds of ``model`` at (clients, batch) on ``path``; peak RSS of this
    process (and on CUDA the peak of torch's GPU allocations)."""
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from data_loading import peak_rss_mib

    from fedrepro.learning import engine
    from fedrepro.learning.data import ClientData, from_arrays
    from fedrepro.learning.fedavg import FedAvg
    from fedrepro.learning.models import build_model

    rng = np.random.default_rng(0)
    shape, n_classes = MODEL_SHAPES[model]
    in_channels, hw = (1, shape[0]) if len(shape) == 2 else shape[:2]

    def block(n):
        return rng.integers(0, 256, (n, *shape), dtype=np.uint8), rng.integers(0, n_classes, n)

    data = ClientData(
        from_arrays(
            [block(train_rows) for _ in range(clients)], [block(4) for _ in range(clients)], n_classes=n_classes
        ),
        device,
    )
    rss_data = peak_rss_mib()
    stamps: list[float] = []

    class Stop(Exception):
        pass

    def callback(info):
        if device.startswith("cuda"):  # a round ends when its kernels have run, not when they are queued
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        if len(stamps) >= 2 and (stamps[-1] - stamps[0] >= budget or len(stamps) > 50):
            raise Stop

    start = time.perf_counter()
    try:
        engine.train(
            FedAvg(),
            data,
            lambda: build_model(model, in_channels=in_channels, n_classes=n_classes, input_hw=hw),
            batch_size=batch,
            lr=0.05,
            tau=10,
            rounds=10_000,
            eval_every=0,
            vectorize=path == "engine",
            chunk_size=chunk,
            callback=callback,
            device=device,
        )
    except Stop:
        pass
    per_round = np.diff(stamps)
    return {
        "clients": clients,
        "batch": batch,
        "path": path,
        "chunk": chunk,
        "s_per_round": float(per_round.mean()),
        "rounds_per_s": float(1 / per_round.mean()),
        "timed_rounds": len(per_round),
        "warmup_round_s": stamps[0] - start,
        "peak_rss_mib": peak_rss_mib(),
        "rss_after_data_mib": rss_data,
        "threads": torch.get_num_threads(),
        "device": device,
        **({"gpu_peak_mib": torch.cuda.max_memory_allocated() / 2**20} if device.startswith("cuda") else {}),
    }


def run_point(args, clients: int, batch: int, path: str) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--point",
        str(clients),
        str(batch),
        path,
        "--train-rows",
        str(max(args.train_rows, batch)),
        "--budget",
        str(args.budget),
        "--model",
        args.model,
        "--device",
        args.device,
    ]
    if args.chunk:
        cmd += ["--chunk", str(args.chunk)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    load = os.getloadavg()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        return {
            "clients": clients,
            "batch": batch,
            "path": path,
            "error": out.stderr[-800:],
            "exit_code": out.returncode,
            "loadavg_before": list(load),
        }
    return {
        **json.loads(out.stdout.splitlines()[-1]),
        "loadavg_before": list(load),
        "loadavg_after": list(os.getloadavg()),
    }


def figure(points: list[dict], out: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for sweep, ax, key, label in (
        ("clients", axes[0], "clients", "clients per round K (batch 20)"),
        ("batch", axes[1], "batch", "batch size B (K = 50)"),
    ):
        for path, style in (("engine", "o-"), ("loop", "s--")):
            pts = sorted(
                (p for p in points if p["sweep"] == sweep and p["path"] == path and "error" not in p),
                key=lambda p: p[key],
            )
            if pts:
                ax.plot([p[key] for p in pts], [p["rounds_per_s"] for p in pts], style, label=path)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("rounds/s (tau = 10 steps)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes[2]
    for path, style in (("engine", "o-"), ("loop", "s--")):
        pts = sorted(
            (p for p in points if p["sweep"] == "clients" and p["path"] == path and "error" not in p),
            key=lambda p: p["clients"],
        )
        if pts:
            ax.plot([p["clients"] for p in pts], [p["peak_rss_mib"] / 1024 for p in pts], style, label=path)
    ax.set_xscale("log")
    ax.set_xlabel("clients per round K (batch 20)")
    ax.set_ylabel("peak RSS (GiB)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.suptitle(f"FedAvg, {model}, 1 thread: batched engine vs per-client loop", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def table(points: list[dict], meta: dict) -> str:
    lines = [
        BEGIN,
        "",
        f"`{meta['command']}` ({meta['date']}; {meta['cpu']}, {meta['threads']} thread(s), torch "
        f"{meta['torch']}; machine memory {meta['mem_total_gib']:.1f} GiB). FedAvg, {meta['model']}, tau = 10, "
        f"synthetic {'x'.join(map(str, MODEL_SHAPES[meta['model']][0]))} data, all K clients every round."
        + (f" Figure: `{meta['figure']}`." if meta["figure"] else ""),
        "",
        "| sweep | K | B | engine rounds/s | loop rounds/s | engine / loop | engine s per client-step "
        "| engine peak RSS (MiB) | loop peak RSS (MiB) | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keyed = {(p["sweep"], p["clients"], p["batch"], p["path"]): p for p in points}
    for sweep, k, b in sorted({(p["sweep"], p["clients"], p["batch"]) for p in points}):
        e, lp = keyed.get((sweep, k, b, "engine")), keyed.get((sweep, k, b, "loop"))

        def cell(p, key, fmt):
            return "error" if p is not None and "error" in p else (fmt.format(p[key]) if p else "")

        ratio = (
            f"{e['rounds_per_s'] / lp['rounds_per_s']:.2f}x"
            if e and lp and "error" not in e and "error" not in lp
            else ""
        )
        per_step = f"{e['s_per_round'] / (10 * k) * 1e3:.2f} ms" if e and "error" not in e else ""
        loads = [p["loadavg_before"][0] for p in (e, lp) if p]
        lines.append(
            f"| {sweep} | {k} | {b} | {cell(e, 'rounds_per_s', '{:.3f}')} | "
            f"{cell(lp, 'rounds_per_s', '{:.3f}')} | {ratio} | {per_step} | "
            f"{cell(e, 'peak_rss_mib', '{:.0f}')} | {cell(lp, 'peak_rss_mib', '{:.0f}')} | "
            f"{'-'.join(f'{x:.1f}' for x in loads)} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def write_table(text: str) -> None:
    md = RESULTS_MD.read_text()
    if BEGIN in md and END in md:
        md = md[: md.index(BEGIN)] + text + md[md.index(END) + len(END) :]
    else:
        md = md.rstrip("\n") + "\n\n## Cost curves (`python benchmarks/cost_curves.py`)\n\n" + text + "\n"
    RESULTS_MD.write_text(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 20, 50, 100, 200, 500, 1000])
    ap.add_argument("--batches", type=int, nargs="+", default=[5, 10, 20, 50, 100, 200])
    ap.add_argument("--paths", nargs="+", default=["engine", "loop"], choices=["engine", "loop"])
    ap.add_argument("--train-rows", type=int, default=100, help="training images per client (>= batch)")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of timed rounds per point (>= 1 round)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=None, help="engine.train(chunk_size=...)")
    ap.add_argument("--model", default="lenet5", choices=sorted(MODEL_SHAPES))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a GPU: the step's kernels, synchronized per round)")
    ap.add_argument("--points", nargs="+", metavar="KxB", help="only these settings (e.g. 10x17), not the sweeps")
    ap.add_argument("--point", nargs=3, metavar=("K", "B", "PATH"), help=argparse.SUPPRESS)  # internal: one child
    ap.add_argument("--out", type=Path, default=HERE / "results" / "cost_curves.json")
    ap.add_argument("--figure", type=Path, default=HERE / "cost_curves.png")
    ap.add_argument("--no-results-md", action="store_true", help="do not write the table into RESULTS.md")
    args = ap.parse_args()
    if args.point:
        import torch

        torch.set_num_threads(args.threads)
        k, b, path = args.point
        point = one_point(int(k), int(b), path, args.train_rows, args.budget, args.chunk, args.model, args.device)
        print(json.dumps(point))
        return

    sys.path.insert(0, str(HERE))
    from fl_setting import machine

    wall0 = time.perf_counter()
    if args.points:
        try:
            plan = [("point", k, b) for k, b in (map(int, kb.lower().split("x")) for kb in args.points)]
        except ValueError:
            ap.error(f"--points takes K x B settings such as 10x17, got {args.points}")
    else:
        plan = [("clients", k, 20) for k in args.clients] + [("batch", 50, b) for b in args.batches]
    points, done = [], {}  # (K, B, path) -> its measurement: K = 50, B = 20 lies on both sweeps, measured once
    for sweep, k, b in plan:
        for path in args.paths:
            if (k, b, path) not in done:
                done[k, b, path] = run_point(args, k, b, path)
            p = {"sweep": sweep, **done[k, b, path]}
            points.append(p)
            msg = p.get("error", "").strip().splitlines()[-1:] if "error" in p else None
            print(
                f"{sweep:7s} K={k:5d} B={b:4d} {path:6s} "
                + (
                    f"ERROR {msg}"
                    if msg is not None
                    else f"{p['rounds_per_s']:8.3f} rounds/s  peak RSS {p['peak_rss_mib']:7.0f} MiB  "
                    f"load {p['loadavg_before'][0]:.2f}"
                ),
                flush=True,
            )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = {
        **machine(args.threads),
        "command": "python benchmarks/cost_curves.py " + " ".join(sys.argv[1:]),
        "mem_total_gib": mem,
        "threads": args.threads,
        "model": args.model,
        "device": args.device,
        "figure": None if args.points else os.path.relpath(args.figure, HERE.parent),
    }
    out = {
        "benchmark": "cost curves: rounds/s and peak RSS vs clients per round and batch size",
        "meta": meta,
        "points": points,
        "wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    wrote = [args.out]
    if args.points:  # the figure and RESULTS.md's table hold the sweeps; these settings are printed
        print(table(points, meta))
    else:
        figure(points, args.figure, args.model)
        wrote.append(args.figure)
        if not args.no_results_md:
            write_table(table(points, meta))
            wrote.append(RESULTS_MD)
    print("wrote " + ", ".join(map(str, wrote)))


if __name__ == "__main__":
    main()
