"""Metric-by-metric difference of runs of the same experiment and seed (``metrics.json`` of ``python -m fedrepro
run``), e.g. before and after an engine change; with ``--reference`` also the difference the old code itself shows
between two equally valid float orders (say, its batched engine vs its per-client loop), the yardstick for "same
math, other rounding". Not a test; prints a Markdown table.

    python benchmarks/compare_runs.py BEFORE_DIR AFTER_DIR [--reference OTHER_ORDER_DIR] [--summary SUMMARY.json]

``--summary``: a ``summary.json`` over seeds (``python -m fedrepro aggregate``) whose std per metric is printed
beside, for scale.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def numbers(d: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = float(v)
    return out


def metrics(run_dir: Path) -> dict[str, float]:
    return numbers(json.loads((run_dir / "metrics.json").read_text())["metrics"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--reference", type=Path, help="the old code's run in another float order (same seed)")
    ap.add_argument("--summary", type=Path, help="summary.json over seeds: its std per metric")
    ap.add_argument("--all", action="store_true", help="also the metrics that did not change")
    args = ap.parse_args()
    before, after = metrics(args.before), metrics(args.after)
    ref = metrics(args.reference) if args.reference else {}
    std = {}
    if args.summary:
        std = {
            k: v["std"]
            for k, v in json.loads(args.summary.read_text())["metrics"].items()
            if isinstance(v, dict) and "std" in v
        }
    head = "| metric | before | after | after - before |"
    head += " other float order - before |" if ref else ""
    head += " std over seeds |" if std else ""
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    changes, yardstick = [], []  # relative |difference| per metric, for the summary line
    for k in sorted(before):
        moved = before[k] != after.get(k) or (ref and before[k] != ref.get(k))
        if before[k] and moved:  # the metrics either float order moves (not the settings, which stay put)
            changes.append(abs(after.get(k, float("nan")) - before[k]) / abs(before[k]))
            if ref:
                yardstick.append(abs(ref.get(k, float("nan")) - before[k]) / abs(before[k]))
        if not args.all and before[k] == after.get(k) and (not ref or before[k] == ref.get(k)):
            continue
        new = after.get(k, float("nan"))
        row = f"| {k} | {before[k]:.4g} | {new:.4g} | {new - before[k]:+.3g} |"
        if ref:
            row += f" {ref.get(k, float('nan')) - before[k]:+.3g} |"
        if std:
            row += f" {std.get(k, float('nan')):.3g} |"
        print(row)
    print()
    print(f"relative |after - before| over the {len(changes)} metrics that moved: {_spread(changes)}")
    if ref:
        print(f"relative |other float order - before|: {_spread(yardstick)}")


def _spread(values: list[float]) -> str:
    import statistics

    finite = sorted(v for v in values if v == v)
    if not finite:
        return "none"
    return f"median {statistics.median(finite):.2g}, max {finite[-1]:.2g}"


if __name__ == "__main__":
    main()
