"""How long Snakemake takes to plan the default workflow (`snakemake -n`: reading the configs, building the DAG) at two
commits, alternately in one run so that the ratio survives a shared machine.

    python benchmarks/dag_build.py --before 019ac54 [--after HEAD] [--repeat 3]

Each commit is checked out into a temporary git worktree whose data/ and results/ are this checkout's (linked), so
only the code (and what the commit tracks: configs, the archive) differs; the script says whether both plan the same
jobs (compare commits with the same archive and configs for a like-for-like number). Prints each median, the ratio
and the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def plan(checkout: Path) -> tuple[float, list[str]]:
    """Seconds of one `snakemake -n` in ``checkout`` and the jobs it plans (rule and output lines, sorted)."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    start = time.perf_counter()
    r = subprocess.run([SNAKEMAKE, "-n"], cwd=checkout, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"snakemake -n failed in {checkout}: {r.stderr[-2000:]}")
    jobs = sorted(
        line.strip()
        for line in (r.stdout + r.stderr).splitlines()
        if line.startswith(("rule ", "localrule ")) or line.strip().startswith("output:")
    )
    return took, jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the earlier commit to compare with")
    ap.add_argument("--after", default="HEAD", help="the later commit (default: HEAD)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {label: Path(tmp) / label for label in ("before", "after")}
        for label, rev in (("before", args.before), ("after", args.after)):
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(trees[label]), rev],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            for name in ("data", "results", ".venv"):  # the same inputs and outputs: only the code differs
                if (ROOT / name).exists():
                    (trees[label] / name).symlink_to(ROOT / name)
        try:
            times: dict[str, list[float]] = {"before": [], "after": []}
            jobs = {}
            load = os.getloadavg()
            for _ in range(args.repeat):
                for label, checkout in trees.items():
                    took, jobs[label] = plan(checkout)
                    times[label].append(took)
            load_end = os.getloadavg()
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    same = jobs["before"] == jobs["after"]
    before, after = statistics.median(times["before"]), statistics.median(times["after"])
    print(
        f"snakemake -n, default workflow, {args.repeat} alternating repeats; load avg 1/5/15 min "
        f"{' / '.join(f'{x:.2f}' for x in load)} -> {' / '.join(f'{x:.2f}' for x in load_end)}"
    )
    print(f"  {args.before}: median {before:.1f} s ({', '.join(f'{t:.1f}' for t in times['before'])})")
    print(f"  {args.after}: median {after:.1f} s ({', '.join(f'{t:.1f}' for t in times['after'])})")
    print(f"  ratio {before / after:.1f}x; same jobs planned: {'yes' if same else 'no'} ({len(jobs['after'])} lines)")


if __name__ == "__main__":
    main()
