"""How far an archived run's replay drifts on this machine, against how far another seed of the same experiment is:
the measurement behind the archive replay's two bounds (fedrepro.archive.replay: each loss within REPLAY_RTOL, the
median within REPLAY_MEDIAN_RTOL).

Per archived seed of the experiment it replays the first R rounds here and prints, over every engine run's losses,
the relative difference to the archived ones (largest, median, how many above the median bound), where the run was
made and where it is replayed; then the same against every other archived seed's losses (the closest other seed:
what a run attributed to the wrong seed would show).

    python benchmarks/replay_drift.py --experiment adaped.table4_femnist_sample [--rounds 2]
    python benchmarks/replay_drift.py --experiment adaped.table1_fmnist --per-run 0

``--per-run SEED`` prints instead, for that archived seed, each engine run's relative difference per round (which
method drifts, and from which round).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedrepro.archive.replay import REPLAY_MEDIAN_RTOL, REPLAY_RTOL, relative_difference, replayed_traces, traces
from fedrepro.archive.store import entries
from fedrepro.config import load_global
from fedrepro.provenance import machine
from fedrepro.runio import read_history


def relative(a: dict, b: dict, rounds: int) -> np.ndarray:
    """The replay's relative differences over every engine run's first ``rounds`` losses both hold."""
    out = [relative_difference(a[k][:rounds], b[k][:rounds]) for k in a if k in b]
    return np.concatenate(out) if out else np.zeros(0)


def per_run(cfg, entry, rounds: int) -> None:
    """For one archived seed: each engine run's relative difference to its replay, round by round."""
    archived, here = traces(read_history(entry.dir)), replayed_traces(cfg, entry, rounds)
    made = (entry.manifest["made"].get("machine") or {}).get("cpu", "?")
    print(f"{entry.experiment} seed {entry.seed}, made on {made}, replayed on {machine()['cpu']}\n")
    print("| engine run | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |")
    print("|---|" + "---|" * rounds)
    for key, want in archived.items():
        d = relative_difference(want[:rounds], here[key][:rounds]) if key in here else []
        label = ", ".join(f"{k}={v}" for k, v in key)
        print(f"| {label} | " + " | ".join(f"{x:.1e}" for x in d) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", required=True, help="PAPER.NAME, an experiment the archive holds")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-run", type=int, metavar="SEED", help="each engine run's difference per round, one seed")
    args = ap.parse_args()
    cfg, r = load_global(), args.rounds
    group = [e for e in entries(cfg) if e.experiment == args.experiment]
    if args.per_run is not None:
        entry = next((e for e in group if e.seed == args.per_run), None)
        if entry is None:
            seeds = sorted(e.seed for e in group)
            raise SystemExit(f"--per-run {args.per_run}: the archive holds no such seed of {args.experiment} ({seeds})")
        per_run(cfg, entry, r)
        return
    archived = {e.seed: traces(read_history(e.dir)) for e in group}
    print(
        f"{args.experiment}: the first {r} rounds of {len(group)} archived seeds replayed on {machine()['cpu']}; "
        f"bounds: each loss {REPLAY_RTOL:g}, median {REPLAY_MEDIAN_RTOL:g}\n"
    )
    print(
        "| seed | made on | replay: largest | median | losses over the median bound "
        "| closest other seed: median | smallest |"
    )
    print("|---|---|---|---|---|---|---|")
    for e in group:
        here = replayed_traces(cfg, e, r)
        d = relative(archived[e.seed], here, r)
        others = {s: relative(t, here, r) for s, t in archived.items() if s != e.seed}
        closest = min(others, key=lambda s: np.median(others[s])) if others else None
        near = (
            f"{np.median(others[closest]):.1e} (seed {closest}) | {min(x.min() for x in others.values()):.1e}"
            if closest is not None
            else "– | –"
        )
        made = (e.manifest["made"].get("machine") or {}).get("cpu", "?")
        print(
            f"| {e.seed} | {made} | {d.max():.1e} | {np.median(d):.1e} | {int((d > REPLAY_MEDIAN_RTOL).sum())} of "
            f"{d.size} | {near} |"
        )


if __name__ == "__main__":
    main()
