"""Print the verdicts of one experiment's printed rows at paper scale, as benchmarks/RESULTS.md records them.

    python benchmarks/experiment_verdicts.py adaped.table2_mnist [--evidence]

Reads what the report reads (fedrepro.report.status.evaluate_paper, the experiment at paper scale: its summary and
seed runs under results/, restored from the archive or made here) and prints Markdown: where the runs came from, per
printed row the printed value, the rebuilt mean ± sd over n seeds (one decimal finer than printed, as the report
writes them), the tolerance and the verdict (with the report's
reason where the row is not reproduced), and the status counts. FedHDP's MNIST tables have their own script
(benchmarks/fedhdp_verdicts.py: by kind of row, and the variance floor). ``--evidence`` adds each row's evidence as
the report gives it, with the experiment's forensic sweeps read at paper scale (built or restored under results/).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from fedrepro.config import load_global, load_paper
from fedrepro.errors import ConfigError
from fedrepro.report import verdict as v
from fedrepro.report.fmt import fmt_pm, fmt_value, printed
from fedrepro.report.status import evaluate_paper

STATUSES = (v.REPRODUCED, v.INCONCLUSIVE, v.DEVIATES, v.NOT_COMPARABLE, v.STALE, v.INVALID, v.NOT_RUN)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", help="PAPER.NAME, e.g. adaped.table2_mnist")
    ap.add_argument(
        "--evidence",
        action="store_true",
        help="also print each row's evidence as the report gives it (the forensic sweeps of the experiment read at "
        "paper scale, the paper's unexplained listing)",
    )
    args = ap.parse_args(argv)
    paper = args.experiment.split(".", 1)[0]
    try:
        scales = {args.experiment: "paper"}
        if args.evidence:
            scales |= {f"{paper}.{name}": "paper" for name in sweeps_of(load_global(), args.experiment)}
        cfg = load_global(overrides={"default_scales": scales})
        rows = evaluate_paper(cfg, paper)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    rows = [r for r in rows if r.target.experiment == args.experiment and r.target.printed]
    if not rows:
        print(f"{args.experiment}: no printed rows in the registry (config/targets/{paper}.csv)", file=sys.stderr)
        return 1
    n = next((r.n for r in rows if r.n), None)
    source = next((r.source for r in rows if r.source), "") or "made here (results/)"
    seeds = f", {n} seeds" if n else ""  # rows judged by checks (claims) carry no n: the source names the seeds
    print(f"`python benchmarks/experiment_verdicts.py {args.experiment}`: at paper scale{seeds}; runs: {source}")
    print()
    print("| row | setting | printed | rebuilt mean ± sd (n) | tol | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        t = r.target
        rebuilt = f"{fmt_pm(r.rebuilt, r.rebuilt_std, t.value_text)} ({r.n})" if r.rebuilt is not None else "—"
        cells = [
            t.id,
            f"{t.table_row} {t.table_col}".strip() or t.metric,
            printed(t.value_text, t.pm_text) or "(a claim)",
            rebuilt,
            fmt_value(r.tol, t.value_text) or "—",
            r.status if r.status == v.REPRODUCED or not r.reason else f"{r.status}: {r.reason}",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    c = Counter(r.status for r in rows)
    print(f"**{len(rows)} printed rows:** " + ", ".join(f"{c[s]} {s}" for s in STATUSES if c[s]))
    if args.evidence:
        print()
        for r in rows:
            for e in r.evidence:
                print(f"- **{r.target.id}** ({r.status}): {e}")
    return 0


def sweeps_of(cfg, experiment: str) -> list[str]:
    """The forensic sweeps (by name) of the experiment's paper that sweep it."""
    paper, name = experiment.split(".", 1)
    entries = load_paper(cfg, paper)["experiments"]
    return [n for n, e in entries.items() if e["kind"] == "forensic_sweep" and e["params"].get("experiment") == name]


if __name__ == "__main__":
    sys.exit(main())
