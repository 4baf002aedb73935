"""Column-by-column difference of two replication reports (``results/report/replication.csv``), e.g. a default run
before and after a refactoring that must leave the report unchanged. Not a test; prints, per column, how many rows
differ and a few examples, and the rows only one report has.

    python benchmarks/compare_reports.py BEFORE.csv AFTER.csv [--citations] [--examples N]

``--citations``: read a citation of the replication inventories as the same text whichever way it is spelled
(``notes §7.2``, ``../shared/notes/adaped.md``, ``docs/notes/adaped.md``), so that what is left is every other
difference.
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import Counter
from pathlib import Path


def rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def citation_free(text: str) -> str:
    """``text`` with every spelling of an inventory citation made one."""
    text = re.sub(r"(?:\.\./shared/|docs/)notes/\w+\.md's", "the notes'", text)
    text = re.sub(r"(?:\.\./shared/|docs/)notes/\w+\.md", "notes", text)
    return re.sub(r"\bnotes \w+\.md", "notes", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--citations", action="store_true", help="ignore how inventory citations are spelled")
    ap.add_argument("--examples", type=int, default=3)
    args = ap.parse_args()
    a, b = rows(args.before), rows(args.after)
    same = citation_free if args.citations else (lambda s: s)
    print(f"rows: {len(a)} before, {len(b)} after")
    print(f"only before: {sorted(set(a) - set(b))}; only after: {sorted(set(b) - set(a))}")
    counts: Counter = Counter()
    examples: dict[str, list] = {}
    for key in sorted(set(a) & set(b)):
        for col in sorted(set(a[key]) | set(b[key])):
            x, y = a[key].get(col, ""), b[key].get(col, "")
            if x != y and same(x) != same(y):
                counts[col] += 1
                examples.setdefault(col, []).append((key, x, y))
    if not counts:
        print("no other difference" if args.citations else "identical")
    for col, n in counts.most_common():
        print(f"{col}: {n} rows differ")
        for key, x, y in examples[col][: args.examples]:
            print(f"  {key}\n    before: {x[:160]}\n    after:  {y[:160]}")


if __name__ == "__main__":
    main()
