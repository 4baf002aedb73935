"""Print the paper-scale runs the results archive holds, as benchmarks/RESULTS.md records them: per archived seed the
command that made it, the machine (CPU, threads, load average at its start and end), its wall time and code version,
read from the manifests (fedrepro.archive), so the record is the runs' own, not typed. A run resumed from its
checkpoints (a killed attempt) shows the wall time of all attempts and the start, machine and load of the last.

    python benchmarks/archive_runs.py [--experiment fedhdp.noniid_mnist] [--metric acc]

``--metric NAME``: also each archived seed's values of that metric (every number under ``metrics.NAME`` of its
metrics.json, by dotted key), one column per seed, and their mean and sd: what the seeds hold before an experiment
has all its paper seeds archived and the report judges it (a table of seeds, not a verdict).
"""

from __future__ import annotations

import argparse

from fedrepro.aggregate import flatten, stats
from fedrepro.archive.store import entries
from fedrepro.config import load_global
from fedrepro.provenance import machine_text
from fedrepro.runio import read_metrics


def _load(m: dict, key: str) -> str:
    v = m.get(key)
    return "?" if not v else " / ".join(f"{x:.2f}" for x in v)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", default=None, help="one experiment (PAPER.NAME); default: all archived")
    ap.add_argument("--metric", default=None, help="with --experiment: each seed's values of metrics.METRIC")
    args = ap.parse_args()
    rows = [e for e in entries(load_global()) if args.experiment in (None, e.experiment)]
    print("| experiment | seed | command | machine | load avg 1/5/15 min, start → end | wall | code |")
    print("|---|---|---|---|---|---|---|")
    for e in rows:
        made = e.manifest["made"]
        m = made.get("machine") or {}
        cmd = f"`python -m fedrepro run {e.experiment} --scale paper --seed {e.seed}`"
        machine = machine_text(m)
        load = f"{_load(m, 'load_avg_at_start')} → {_load(m, 'load_avg')}"
        wall = made.get("wall_time_s") or 0.0
        resumed = made.get("wall_time_resumed_s")
        # a resumed run: its wall time sums the attempts; its start, machine and load are the last attempt's
        note = f" (resumed: last attempt {resumed / 60:.1f} min, its start and load shown)" if resumed else ""
        print(
            f"| {e.experiment} | {e.seed} | {cmd} | {machine} | {load} | {wall / 60:.1f} min{note} | "
            f"{made.get('code_version', '?')}, {str(made.get('started_at', '?'))[:16]} |"
        )
    if not rows:
        print("(nothing archived)")
    elif args.metric:
        print()
        _metric_table(rows, args.metric)


def _metric_table(rows, metric: str) -> None:
    per_seed = {e.seed: flatten({metric: read_metrics(e.dir)["metrics"].get(metric) or {}}) for e in rows}
    seeds = sorted(per_seed)
    keys = sorted(set().union(*per_seed.values()))
    print("| key | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd |")
    print("|---|" + "---|" * (len(seeds) + 1))
    for k in keys:
        vals = [per_seed[s].get(k) for s in seeds]
        st = stats([float("nan") if x is None else x for x in vals])  # the summaries' mean and sd of finite values
        cells = " | ".join("—" if x is None else f"{x:.2f}" for x in vals)
        mean = "—" if st["mean"] is None else f"{st['mean']:.2f}" + (f" ± {st['std']:.2f}" if st["n"] > 1 else "")
        print(f"| {k} | {cells} | {mean} ({st['n']}) |")


if __name__ == "__main__":
    main()
