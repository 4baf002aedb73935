"""Print a forensic sweep's outcome per reading and row, as benchmarks/RESULTS.md records them.

    python benchmarks/forensic_readings.py ppsgd.forensic_fig1a [--scale paper] [--seed 0] [--values]

Reads the sweep's run under results/ (made here or restored from the archive: ``python -m fedrepro archive restore
--experiment PAPER.EXP --seed 0 --out results/PAPER/EXP/paper/seed0``): its history holds one record per reading
and row. Prints Markdown: one line per reading (the config's reading first, then the grid's axes), one column per
row, each cell the row's outcome under that reading (with ``--values``, and for a row judged on a number, also the
seeds' mean rebuilt value ± its standard error, the seed count, and the tolerance it was judged by), and per row how
many readings reproduce it. FedHDP's MNIST
sweeps have their own view with the rebuilt values (benchmarks/fedhdp_verdicts.py --forensic NAME --readings).
"""

from __future__ import annotations

import argparse
import sys

from fedrepro import paths
from fedrepro.config import load_global
from fedrepro.errors import FedreproError
from fedrepro.report import verdict as v
from fedrepro.runio import HISTORY, read_history


def cell(rec: dict, values: bool) -> str:
    """A row's outcome under one reading; with ``values`` and a numeric judgement, its numbers too."""
    if not values or not rec["numeric"]:
        return rec["outcome"]
    return (
        f"{rec['outcome']}: {rec['rebuilt']:.2f} ± {rec['se']:.2f} (n={int(rec['n'])}) vs {rec['printed']:g}, "
        f"tol {rec['tol']:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="PAPER.NAME of a forensic sweep, e.g. ppsgd.forensic_fig1a")
    ap.add_argument("--scale", default="paper", choices=["paper", "quick"])
    ap.add_argument("--seed", type=int, default=0, help="the sweep's run (its seeds are parameters; default 0)")
    ap.add_argument("--values", action="store_true", help="each cell also gives the rebuilt mean ± se (n), tol")
    args = ap.parse_args()
    paper, _, name = args.experiment.partition(".")
    cfg = load_global()
    run = paths.run_dir(cfg, paper, name, args.scale, args.seed)
    shown = paths.relative(cfg, "run_dir", paper=paper, exp=name, scale=args.scale, seed=args.seed)
    if not (run / HISTORY).is_file():
        restore = f"python -m fedrepro archive restore --experiment {args.experiment} --seed {args.seed} --out {shown}"
        sys.exit(f"{shown}: no {HISTORY} (build the sweep, or restore an archived one: `{restore}`)")
    try:
        h = read_history(run)
    except FedreproError as exc:
        sys.exit(str(exc))
    rows = list(dict.fromkeys(h["row"]))
    flag = " --values" if args.values else ""
    print(f"`python benchmarks/forensic_readings.py {args.experiment} --scale {args.scale}{flag}` (the run in {shown})")
    print()
    print("| reading | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for reading, group in h.sort_values("reading", kind="stable").groupby("reading", sort=True):
        cells = {rec["row"]: cell(rec, args.values) for rec in group.to_dict("records")}
        text = "the config's reading" if reading == 0 else group["reading_text"].iloc[0]
        print(f"| {text} | " + " | ".join(cells.get(r, "—") for r in rows) + " |")
    print()
    for r in rows:
        judged = h[(h["row"] == r) & (h["reading"] != 0)]
        good = int((judged["outcome"] == v.REPRODUCED).sum())
        print(f"- {r}: reproduced under {good} of {len(judged)} grid readings")


if __name__ == "__main__":
    main()
