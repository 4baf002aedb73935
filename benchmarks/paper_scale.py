"""Measured paper-scale times: each offline experiment at ``--scale paper``, one seed, timed in full or for a
stated fraction, with the extrapolation and its scaling model written beside the measurement.

Not a test. Results go to benchmarks/results/paper_scale.json (not committed) and a table to stdout.

Which experiments: every experiment of the four papers whose datasets are available here (the workflow's own
test, ``fedrepro.data.sources.is_available``), at its paper-scale parameters (``resolve_experiment(..., "paper")``).
Each runs as ``python -m fedrepro run ID --scale paper --seed 0 --set KNOB=k --out <tmp>`` in a child process
(the kinds pin torch / BLAS to one thread), its CPU time and peak RSS read from ``os.wait4``.

Scaling model (``FRACTION_KNOBS``): an experiment whose cost grows with one parameter (epochs, rounds, iterations)
is run at two small values k1 < k2 of it, and its time is the line t(k) = a + b k through the two points: ``a`` is
what does not grow (imports, data loading, setup, the final evaluation) and ``b`` the cost per unit (an epoch's
training with its periodic evaluations, which recur at a fixed rate). t(k_paper) is the extrapolation. The other
experiments run in full (``--full-limit`` seconds each; one that takes longer is reported as a lower bound). A run
of the whole paper scale takes ``seeds`` such runs (one if the kind is deterministic) -> CPU hours; the workflow runs
them one thread each, ``--cores`` at a time.

``--in-full`` times the listed experiments in full instead (a whole seed, up to ``--full-limit`` seconds); then each
line also gives the run's own wall clock, which CPU-s / cores understates where a run's processes leave a core idle
(a FedHDP seed's methods, split over two processes, end unevenly). ``--set KEY=VALUE`` runs every listed experiment
with that parameter changed (e.g. ``rounds=50``: a tenth of a FedHDP seed, every method and both processes);
``--src DIR`` runs another checkout's code (the ``src`` of a worktree of an older commit), so that two commands,
alternated, give a change's before and after on one machine. A FedHDP experiment's line is followed by the training
FLOP of a round and of a seed (every method and every model set a Ditto method trains, the first layer over the
inputs its packed columns take or over the rows it keeps as coefficients, ``fedhdp_round_flop``) and by the floor
they set on this machine: the seed's FLOP at one thread's SGEMM peak (a 2048^3 product, measured at the start) times
``--cores``, and the fraction of that peak the measured seed reached. With ``FEDREPRO_THREADS=2`` a FedHDP run trains
its methods in two processes, an AdaPeD table run its trainings (method, epsilon, lr), as the workflow's rule does
when it gives a job two threads.

    python benchmarks/paper_scale.py                          # everything that is offline (hours)
    python benchmarks/paper_scale.py --only adaped.table2_fmnist adaped.table1_fmnist
    FEDREPRO_THREADS=2 python benchmarks/paper_scale.py --only fedhdp.noniid_mnist --in-full --full-limit 7200
    FEDREPRO_THREADS=2 python benchmarks/paper_scale.py --only fedhdp.noniid_mnist --in-full --set rounds=50 \
        [--src /tmp/before/src]
    python benchmarks/paper_scale.py --list                   # what it would run, and how
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _eval_periods(p: dict) -> tuple[float, float]:
    """adaped_fl_training: one and two evaluation periods, in epochs (its ``eval_every`` counts rounds of ``tau``
    iterations), so that both fractional runs include their share of the periodic evaluations."""
    # resolved parameters (schema defaults filled in); iters_per_epoch null: derived from the data, about 60
    period = max(1, math.ceil(p["eval_every"] * p["tau"] / (p["iters_per_epoch"] or 60)))
    return period, 2 * period


#: kind -> (the parameter its cost grows with, the two values k1 < k2 it is run at, or a function of the params)
FRACTION_KNOBS: dict[str, tuple[str, tuple[float, float] | Callable[[dict], tuple[float, float]]]] = {
    "adaped_fl_training": ("epochs", _eval_periods),
    "fedhdp_training": ("rounds", (10, 20)),  # eval_every 50: the slope leaves out a seed's 9 periodic evaluations
    "ppsgd_synthetic": ("niter", (10, 20)),
    "ppsgd_linear": ("epochs", (1, 2)),
    "ppsgd_cnn": ("epochs", (1, 2)),
    "histograms_synthetic": ("T", (5, 10)),
}


def mlp_flop_per_example(dims: list[int]) -> int:
    """FLOP of one SGD step of one example through an MLP of layer widths ``dims`` (input first), as the engine's
    batched step computes it (fedrepro.learning.batched_mlp): the forward and the weight gradient of every layer
    (2 in out each), the data gradient of every layer but the first (nothing needs the input's); biases, the
    softmax and the ReLUs are left out (< 1%)."""
    pairs = list(zip(dims[:-1], dims[1:]))
    return sum(4 * i * o for i, o in pairs) + sum(2 * i * o for i, o in pairs[1:])


def fedhdp_round_flop(params: dict, metrics: dict, width: float = 1.0, rows: float | None = None) -> dict | None:
    """The training FLOP of one round of a FedHDP experiment (every method the run trains, every model set a Ditto
    method trains: the global model's local copy and one personal set per lambda), from its parameters and the run's
    metrics (clients per round, local steps, the model's parameter count, the opt-out clients); None where they do
    not say. A method whose training is another's (``shared_trainings``: DP-FedAvg beside a clipped HDP-FedAvg) is
    not trained. ``width``: the mean fraction of the first layer's inputs that a step's products take where the sets
    step side by side on packed columns (:func:`packed_width`; fedrepro.learning.batched_mlp.pack_columns); 1: every
    input. ``rows``: where the packed sets keep a round's changes to their first layers as coefficients of the
    clients' training rows (batched_mlp.Dual), the expected number of rows R a round holds for each client
    (:func:`packed_shape`): a step's first-layer products then take R columns (2 R out a example and set, the
    coefficients' update is no product), and a round adds, per client, the rows' products with the starting weights
    and the materialized change (4 R width out a set), their Gram matrix (2 R^2 width) and their products with the
    anchor (2 R in out). FedHDP at r = 0 personalizes only its opt-out clients: the local copies of all K clients
    step packed alone (as above, one set and no anchor), the personal sets of the K n_opt_out / n_clients expected
    opt-out ones one at a time over every input."""
    from fedrepro.papers.fedhdp.experiments.training import personalizes_opt_out_only, shared_trainings, trained

    model = params.get("model", {})
    if model.get("name") != "mlp" or not {"clients_per_round", "local_steps", "n_params"} <= set(metrics):
        return None
    dims = [model["in_features"], *model.get("hidden", [])]
    below = sum((i + 1) * o for i, o in zip(dims[:-1], dims[1:]))
    classes = (metrics["n_params"] - below) // (dims[-1] + 1)  # the output layer's width, from the parameter count
    per_example = mlp_flop_per_example([*dims, classes])
    out1 = (dims + [classes])[1]
    first = 4 * dims[0] * out1  # the first layer's forward and weight gradient
    packed = per_example - (1 - width) * first if len(dims) > 1 else per_example
    lams = len(params.get("lams") or [])
    K, steps, B = metrics["clients_per_round"], metrics["local_steps"], params["batch_size"]
    by_rows = rows is not None and len(dims) > 1
    if by_rows:
        packed = per_example - first + 2 * rows * out1
    columns = width * dims[0]

    def once(sets: int, anchor: bool) -> float:  # a round's products of a client's rows: look_up_rows, unpack_columns
        if not by_rows:
            return 0.0
        return sets * 4 * rows * columns * out1 + 2 * rows**2 * columns + anchor * 2 * rows * dims[0] * out1

    opt_out = metrics.get("n_opt_out", 0) / metrics["n_clients"] if metrics.get("n_clients") else 0.0
    shared = shared_trainings(params)
    methods = [s for n, s in trained(params).items() if n not in shared]
    alone = [s for s in methods if personalizes_opt_out_only(s)]
    together = len(methods) - len(alone)
    per_round = together * K * (steps * (1 + lams) * B * packed + once(1 + lams, True)) + len(alone) * K * (
        steps * B * (packed + lams * opt_out * per_example) + once(1, False)
    )
    how = (
        f"{together} methods x {K} clients x ({steps} steps x {1 + lams} model sets x {B} examples x "
        f"{packed / 1e3:.1f} kFLOP"
    )
    if rows is not None:
        how += f" (the first layer over the {rows:.1f} rows of a client, {100 * width:.1f}% of its inputs packed)"
        how += f" + {once(1 + lams, True) / 1e6:.1f} MFLOP a round of its rows' products)"
    else:
        how += ")" if width == 1 else f" (the first layer over {100 * width:.1f}% of its inputs))"
    if alone:
        how += (
            f" + {len(alone)} at r = 0 x {K} clients x ({steps} steps x {B} examples x ({packed / 1e3:.1f} kFLOP "
            f"the global model's copy + {lams} x {opt_out:.3f} opt-out x {per_example / 1e3:.1f} kFLOP the "
            f"personal sets) + {once(1, False) / 1e6:.1f} MFLOP a round)"
        )
    return {"flop_per_round": per_round, "flop_per_seed": per_round * params["rounds"], "how": how}


def packed_shape(partition: str, K: int, draws: int = 2000) -> tuple[float, float | None]:
    """What a packed step takes (batched_mlp.pack_columns, look_up_rows) on ``partition``'s clients, ``K`` a round,
    averaged over ``draws`` rounds of K clients drawn at random: the fraction of the first layer's inputs (the widest
    support among them, rounded up to 16 columns; 1 where that exceeds PACK_MAX: the columns are not packed), and the
    rows R a round holds for each client (the most training rows among them) where every round keeps its changes as
    the rows' coefficients (R at most DUAL_MAX of the packed width), else None."""
    import numpy as np

    from fedrepro import paths
    from fedrepro.config import load_global
    from fedrepro.data import fedformat
    from fedrepro.learning.batched_mlp import DUAL_MAX, PACK_MAX
    from fedrepro.learning.data import ClientData

    data = ClientData(fedformat.load(paths.partition_dir(load_global(), partition)))
    sizes, counts = data.nonzero_features("train").sum(1).numpy(), data.counts("train")
    n_in = math.prod(data.feature_shape)
    rng = np.random.default_rng(0)
    fractions, rows = [], []
    for _ in range(draws):
        chosen = rng.choice(len(sizes), K, replace=False)
        width = min(n_in, -(-int(sizes[chosen].max()) // 16) * 16)
        packs = width <= PACK_MAX * n_in
        fractions.append(width / n_in if packs else 1.0)
        R = int(counts[chosen].max())
        rows.append(R if packs and R <= DUAL_MAX * width else None)
    return float(np.mean(fractions)), None if None in rows else float(np.mean(rows))


def sgemm_peak_gflops() -> float:
    """One thread's SGEMM rate on a 2048^3 product, median of 5 (the machine's practical floor for these models)."""
    import statistics

    import torch

    torch.set_num_threads(1)
    a = torch.rand(2048, 2048)
    torch.mm(a, a)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, a)
        times.append(time.perf_counter() - t0)
    return 2 * 2048**3 / statistics.median(times) / 1e9


def plan(only: list[str] | None, in_full: bool = False) -> list[dict]:
    """The offline paper-scale experiments and how each is timed (``in_full``: every one in full)."""
    from fedrepro.config import load_global, load_paper, paper_seeds, resolve_experiment
    from fedrepro.data.sources import is_available

    cfg = load_global()
    out = []
    for paper in cfg["papers"]:
        entries = load_paper(cfg, paper)["experiments"]
        for name in entries:
            exp = resolve_experiment(cfg, f"{paper}.{name}", "paper")
            if only and exp.id not in only:
                continue
            if not all(is_available(cfg, d) for d in exp.datasets):
                continue
            knob = FRACTION_KNOBS.get(exp.kind)
            entry = {
                "id": exp.id,
                "kind": exp.kind,
                "partitions": list(exp.partitions),
                # the experiment's own paper seeds where it sets them (the workflow's rule), else config.yaml's
                "seeds": 1 if exp.deterministic else len(paper_seeds(cfg, entries[name], "paper")),
                "params": json.loads(json.dumps(exp.params, default=str)) if exp.kind == "fedhdp_training" else None,
            }
            if knob is not None and knob[0] in exp.params and not in_full:
                name, values = knob
                values = values(exp.params) if callable(values) else values
                entry.update(knob=name, paper_value=exp.params[name], fractions=list(values))
            out.append(entry)
    return out


def ensure_partitions(names: list[str]) -> None:
    """Fetch the datasets the partitions read (``python -m fedrepro data fetch``) and build the partitions
    (``python -m fedrepro data partition``) when missing."""
    from fedrepro import paths
    from fedrepro.config import load_global, load_partitions
    from fedrepro.data import fedformat
    from fedrepro.data.sources import stamp_path

    cfg = load_global()
    specs = load_partitions(cfg)
    for dataset in sorted({specs[n]["dataset"] for n in names}):
        if not stamp_path(cfg, dataset).is_file():
            print(f"fetching dataset {dataset}", flush=True)
            subprocess.run([sys.executable, "-m", "fedrepro", "data", "fetch", dataset], check=True, cwd=ROOT)
    for name in names:
        d = paths.partition_dir(cfg, name)
        if not fedformat.is_complete(d):
            print(f"building partition {name} -> {d}", flush=True)
            subprocess.run(
                [sys.executable, "-m", "fedrepro", "data", "partition", name, "--out", str(d)], check=True, cwd=ROOT
            )


def timed_run(exp_id: str, overrides: dict, limit: float, src: Path | None = None) -> dict:
    """One seed-0 paper-scale run in a child process: wall and CPU seconds, peak RSS, load before and after.

    Peak RSS: on Linux the child's ``ru_maxrss`` from ``os.wait4`` is at least this process's own peak at the
    fork (the kernel carries the pre-exec address space's high-water mark over the exec), so a child below that
    floor reads as the floor. Then the child's own VmHWM, polled every 0.2 s while it runs, is used instead (it can
    miss growth in the last 0.2 s); ``peak_rss_source`` says which."""
    from data_loading import vm_hwm_mib  # benchmarks/, this script's directory

    with tempfile.TemporaryDirectory(prefix="fedrepro-paper-scale-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "fedrepro",
            "run",
            exp_id,
            "--scale",
            "paper",
            "--seed",
            "0",
            "--out",
            tmp,
            "--no-checkpoint",
        ]
        for k, v in overrides.items():
            cmd += ["--set", f"{k}={json.dumps(v)}"]
        load_before = os.getloadavg()
        floor_mib, polled_mib = vm_hwm_mib() or 0.0, 0.0
        start = time.perf_counter()
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            env = os.environ | ({"PYTHONPATH": str(src.resolve())} if src else {})
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
            timed_out = False
            while True:  # reap it ourselves: os.wait4 gives this child's own CPU time and peak RSS
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                polled_mib = max(polled_mib, vm_hwm_mib(proc.pid) or 0.0)
                if not timed_out and time.perf_counter() - start > limit:
                    proc.kill()
                    timed_out = True
                time.sleep(0.2)
            wall = time.perf_counter() - start
            err.seek(0)
            stderr = err.read()
        exit_code = os.waitstatus_to_exitcode(status)
        written = Path(tmp) / "metrics.json"
        metrics = json.loads(written.read_text()).get("metrics", {}) if written.is_file() else {}
    wait4_mib = usage.ru_maxrss / 1024
    own = wait4_mib > floor_mib + 1  # above the inherited floor: the child's own peak
    return {
        "overrides": overrides,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": wait4_mib if own else polled_mib,
        "peak_rss_source": "wait4" if own else f"polled VmHWM (wait4 floored at this process's {floor_mib:.0f} MiB)",
        "exit_code": exit_code,
        "timed_out": timed_out,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "stderr_tail": stderr[-600:] if exit_code else "",
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
    }


def measure(entry: dict, full_limit: float, overrides: dict, src: Path | None = None) -> dict:
    if "knob" not in entry:
        run = timed_run(entry["id"], overrides, full_limit, src)
        per_seed = run["cpu_s"]
        model = "timed in full" + (f" (stopped at {full_limit:.0f} s: a lower bound)" if run["timed_out"] else "")
        return {
            **entry,
            "runs": [run],
            "model": model,
            "per_seed_cpu_s": per_seed,
            "lower_bound": run["timed_out"],
            "ok": run["exit_code"] == 0 or run["timed_out"],
        }
    k1, k2 = entry["fractions"]
    runs = [timed_run(entry["id"], overrides | {entry["knob"]: k}, full_limit, src) for k in (k1, k2)]
    t1, t2 = runs[0]["cpu_s"], runs[1]["cpu_s"]
    b = (t2 - t1) / (k2 - k1)
    a = t1 - b * k1
    k = entry["paper_value"]
    return {
        **entry,
        "runs": runs,
        "fixed_cpu_s": a,
        "cpu_s_per_unit": b,
        "model": f"t({entry['knob']}) = {a:.1f} s + {b:.2f} s x {entry['knob']}, fit through "
        f"{entry['knob']} = {k1:g}, {k2:g}; extrapolated to {entry['knob']} = {k:g}",
        "per_seed_cpu_s": a + b * k,
        "lower_bound": False,
        "ok": all(r["exit_code"] == 0 for r in runs),
    }


def _load(run: dict) -> str:
    """The 1-minute load average before and after a timed run."""
    return f"{run['loadavg_before'][0]:.2f} -> {run['loadavg_after'][0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", help="experiment ids (default: every offline one)")
    ap.add_argument("--full-limit", type=float, default=1800.0, help="seconds a run timed in full may take")
    ap.add_argument("--cores", type=int, default=2, help="jobs run at a time by the workflow (wall = CPU / cores)")
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    ap.add_argument(
        "--in-full", action="store_true", help="time every listed experiment in full (up to --full-limit), no fit"
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a parameter of every run (YAML)")
    ap.add_argument("--src", type=Path, help="run this fedrepro source directory instead (an older commit's)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "paper_scale.json")
    args = ap.parse_args()
    from fedrepro.config import deep_merge, parse_overrides
    from fedrepro.errors import ConfigError

    try:
        overrides = parse_overrides(args.set)  # as `python -m fedrepro run --set` reads them
    except ConfigError as exc:
        ap.error(str(exc))
    if args.src and not (args.src / "fedrepro").is_dir():
        ap.error(f"--src {args.src}: no fedrepro package there (give a checkout's src directory)")

    entries = plan(args.only, args.in_full)
    if args.list:
        for e in entries:
            how = f"{e['knob']} = {e['fractions']} of {e['paper_value']}" if "knob" in e else "in full"
            print(f"{e['id']:34s} {e['kind']:30s} x{e['seeds']} seeds, timed {how}")
        return
    ensure_partitions(sorted({p for e in entries for p in e["partitions"]}))
    results = []
    # the FLOP are this checkout's count: not printed for another checkout's code
    peak = sgemm_peak_gflops() if any(e["params"] for e in entries) and not args.src else None
    if peak is not None:
        print(f"one thread's SGEMM peak here: {peak:.1f} GFLOP/s (2048^3)", flush=True)
    for e in entries:
        r = measure(e, args.full_limit, overrides, args.src)
        params = e["params"] and deep_merge(e["params"], overrides)
        flop = None
        if params and peak is not None:
            metrics = r["runs"][-1]["metrics"]
            width, rows = (
                packed_shape(params["partition"], metrics["clients_per_round"])
                if "clients_per_round" in metrics
                else (1.0, None)
            )
            flop = fedhdp_round_flop(params, metrics, width, rows)
        results.append(r)
        total_h = r["per_seed_cpu_s"] * r["seeds"] / 3600
        if "knob" not in e:
            run = r["runs"][0]
            r["model"] += f"; measured wall {run['wall_s'] / 60:.1f} min, load {_load(run)}"
        if overrides or args.src:  # what the line's "seed" is not
            changed = ", ".join(args.set)
            r["model"] += "".join([f"; with {changed}" if changed else "", f"; code of {args.src}" if args.src else ""])
        print(
            f"{r['id']:34s} {r['per_seed_cpu_s']:9.0f} CPU-s per seed{'+' if r['lower_bound'] else ' '} "
            f"x{r['seeds']} = {total_h:7.2f} CPU-h  [{r['model']}]"
            f"{'' if r['ok'] else '  FAILED: ' + r['runs'][-1]['stderr_tail']}",
            flush=True,
        )
        if flop is not None:
            # the FLOP a seed's training computes against what the cores could do at the SGEMM peak: the floor of
            # this engine's arithmetic on this machine, and the fraction of it this run reached
            floor_s = flop["flop_per_seed"] / (peak * 1e9 * args.cores)
            wall_s = r["per_seed_cpu_s"] / args.cores
            r.update(flop, sgemm_peak_gflops=peak, floor_wall_s=floor_s, floor_fraction=floor_s / wall_s)
            print(
                f"{'':34s} {flop['flop_per_round'] / 1e9:.0f} GFLOP a round ({flop['how']}), "
                f"{flop['flop_per_seed'] / 1e12:.0f} TFLOP a seed: at the SGEMM peak on {args.cores} cores "
                f">= {floor_s / 60:.1f} min; {wall_s / 60:.1f} min wall at {args.cores} cores (CPU-s / cores) is "
                f"{100 * floor_s / wall_s:.0f}% of that peak",
                flush=True,
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"results": results}, indent=1) + "\n")
    total = sum(r["per_seed_cpu_s"] * r["seeds"] for r in results if r["ok"]) / 3600
    sys.path.insert(0, str(HERE))
    from fl_setting import machine

    out = {
        "benchmark": "paper-scale CPU time per offline experiment (one seed, measured or extrapolated)",
        "command": " ".join(sys.argv),
        "overrides": overrides,
        "src": str(args.src) if args.src else None,
        "machine": machine(1),
        "results": results,
        "total_cpu_h": total,
        "cores": args.cores,
        "total_wall_h_at_cores": total / args.cores,
        "note": "wall = CPU / cores assumes the jobs keep all cores busy (the workflow runs one-thread jobs "
        "side by side); the longest single job bounds it from below",
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"total {total:.1f} CPU-h -> >= {total / args.cores:.1f} h wall on {args.cores} cores; wrote {args.out}")


if __name__ == "__main__":
    main()
