"""Print where the trainings of one experiment's seed runs diverged, as benchmarks/RESULTS.md records it.

    python benchmarks/diverged_runs.py adaped.table2_mnist [--scale paper]

Reads each finished seed run's history under results/ (made here or restored from the archive) and, per method and
setting (its privacy level and learning rate, where the history has them), prints the first round whose training
loss is not finite (the ``round_losses`` trace of fedrepro.learning.engine.train), the rounds of the run and the
last evaluation's test accuracy. Only trainings that diverged are listed; the last line counts them.
"""

from __future__ import annotations

import argparse
import math
import sys

from fedrepro import paths
from fedrepro.config import load_global
from fedrepro.errors import FedreproError
from fedrepro.runio import read_history

SETTINGS = ("epsilon", "lr_grid")  # the columns a history splits one method's trainings by, where it has them


def first_non_finite(round_losses: list[list[float]]) -> tuple[int | None, int]:
    """(the first round whose loss is not finite, or None; the number of rounds) of one training's evaluation rows'
    ``round_losses`` in order."""
    losses = [x for row in round_losses for x in row]
    bad = next((i + 1 for i, x in enumerate(losses) if not math.isfinite(x)), None)
    return bad, len(losses)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="PAPER.NAME, e.g. adaped.table2_mnist")
    ap.add_argument("--scale", default="paper", choices=["paper", "quick"])
    args = ap.parse_args(argv)
    paper, _, exp = args.experiment.partition(".")
    try:
        cfg = load_global()
        base = paths.summary_path(cfg, paper, exp, args.scale).parent
        runs = sorted(  # finished runs only: one in progress has no history yet
            (p.parent for p in base.glob("seed*/history.parquet")),
            key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else -1,
        )
        if not runs:
            print(f"{base}: no seed runs (build or restore {args.experiment} at {args.scale} scale)", file=sys.stderr)
            return 1
        command = f"python benchmarks/diverged_runs.py {args.experiment} --scale {args.scale}"
        print(f"`{command}` ({len(runs)} seed run{'' if len(runs) == 1 else 's'})")
        print()
        print("| seed | method | setting | first non-finite round | rounds | last test accuracy (%) |")
        print("|---|---|---|---|---|---|")
        diverged = trainings = 0
        for run in runs:
            h = read_history(run)
            if "round_losses" not in h:
                print(f"{run}/history.parquet: no round_losses column (not an engine training)", file=sys.stderr)
                return 1
            cols = [c for c in SETTINGS if c in h]
            keys = ["method", *cols]
            for key, g in h.sort_values("round").groupby(keys, sort=True, dropna=False):
                trainings += 1
                bad, rounds = first_non_finite(list(g["round_losses"]))
                if bad is None:
                    continue
                diverged += 1
                setting = ", ".join(f"{c} {v:g}" for c, v in zip(cols, key[1:]) if v == v) or "-"  # v == v: not NaN
                acc = 100 * float(g["test_acc"].iloc[-1])
                print(f"| {run.name[4:]} | {key[0]} | {setting} | {bad} | {rounds} | {acc:.2f} |")
        print()
        print(f"{diverged} of {trainings} trainings diverged")
    except FedreproError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
