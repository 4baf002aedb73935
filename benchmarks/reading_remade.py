"""Compare a forensic sweep's reading, as archived at an earlier commit, with the experiment's runs now: after a reading
is adopted in the config, the experiment's new seeds train exactly what the sweep's points trained, so each row's
rebuilt value must come out the same (the engine is deterministic for a given seed, alone or beside other methods).

    python benchmarks/reading_remade.py --sweep forensic_noniid_clip --commit cbf2763 --reading 1

Reads the sweep's archived history (``git show <commit>:archive/<paper>/<sweep>/paper/seed0/history.parquet``: one
row per registry row and reading, its rebuilt mean over the sweep's seeds) and what the report reads now
(fedrepro.report.status.evaluate_paper, the swept experiment at paper scale: restored from the archive or made here),
and prints per method the rows compared, how many agree to 1e-9 and the largest difference. A method whose reading
the config did not adopt differs, as it should.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from collections import defaultdict

import pandas as pd

from fedrepro.config import REPO_ROOT, load_global, load_paper
from fedrepro.report.status import evaluate_paper

SAME = 1e-9
METHOD = r"\.([A-Za-z-]+\+Ditto|FedHDP_r=[0-9.]*[0-9])\."  # a FedHDP row's method: T8.lam0.005.<method>.Acc_g


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paper", default="fedhdp")
    ap.add_argument("--sweep", required=True, help="the forensic experiment, e.g. forensic_noniid_clip")
    ap.add_argument("--commit", required=True, help="a commit whose archive holds the sweep's run")
    ap.add_argument("--reading", type=int, required=True, help="the reading's number in the sweep's history")
    args = ap.parse_args(argv)
    where = f"archive/{args.paper}/{args.sweep}/paper/seed0/history.parquet"
    got = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{args.commit}:{where}"], capture_output=True)
    if got.returncode != 0:
        print(f"{args.commit}:{where}: not in git ({got.stderr.decode().strip()})", file=sys.stderr)
        return 1
    hist = pd.read_parquet(io.BytesIO(got.stdout))
    at = hist[hist["reading"] == args.reading]
    if at.empty:
        print(f"{args.commit}:{where}: no reading {args.reading}", file=sys.stderr)
        return 1
    cfg = load_global()
    swept = f"{args.paper}.{load_paper(cfg, args.paper)['experiments'][args.sweep]['params']['experiment']}"
    cfg = load_global(overrides={"default_scales": {swept: "paper"}})
    now = {r.target.id: r for r in evaluate_paper(cfg, args.paper) if r.target.experiment == swept}
    per_method: dict[str, list[float]] = defaultdict(list)
    missing = []
    for row, old in zip(at["row"], at["rebuilt"]):
        r = now.get(row)
        if r is None or r.rebuilt is None or r.scale != "paper":
            missing.append(row)
            continue
        method = re.search(METHOD, row)
        per_method[method.group(1) if method else row].append(abs(float(r.rebuilt) - float(old)))
    text = at["reading_text"].iloc[0]
    print(f"`python benchmarks/reading_remade.py --sweep {args.sweep} --commit {args.commit} --reading {args.reading}`")
    print(f"({swept} at paper scale now against {args.sweep}'s reading {args.reading} as archived at {args.commit}:")
    print(f"{text})")
    print()
    print(f"| method | rows | the same (to {SAME:g}) | largest difference |")
    print("|---|---|---|---|")
    for method, diffs in per_method.items():
        print(f"| {method} | {len(diffs)} | {sum(d <= SAME for d in diffs)} | {max(diffs):.3g} |")
    if missing:
        print(f"\n{len(missing)} rows not rebuilt at paper scale now: {', '.join(missing[:5])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
