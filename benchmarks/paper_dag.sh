#!/usr/bin/env bash
# Wall time of the whole CPU-feasible DAG at paper scale on 2 cores (issue #9): every experiment the default target
# builds offline, at the papers' settings, 5 seeds, with the figures, tables and report.
#
# NOT run by the other benchmarks and not part of CI: it takes about a day on a 2-core machine (estimate in
# benchmarks/RESULTS.md) and uses both cores the whole time. Run it on an otherwise idle machine:
#
#     bash benchmarks/paper_dag.sh                     # the whole DAG
#     bash benchmarks/paper_dag.sh --keep-going        # extra arguments go to snakemake
#
# It resumes like any Snakemake run (already built targets are skipped; for a clean measurement start from an
# empty results/ or add --forceall). Output: benchmarks/results/paper_dag.json (wall time, jobs planned, load
# average before/after, machine) and the full snakemake log in benchmarks/results/paper_dag.log.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
mkdir -p benchmarks/results
out=benchmarks/results/paper_dag.json
log=benchmarks/results/paper_dag.log

# the jobs it is going to run (dry run), per rule
snakemake -n --cores 2 --config scale=paper --quiet rules "$@" > benchmarks/results/paper_dag_plan.txt 2>&1 || true
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s.%N)
set +e
snakemake --cores 2 --config scale=paper "$@" > "$log" 2>&1
rc=$?
set -e
end=$(date +%s.%N)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python - "$out" "$start" "$end" "$rc" "$load_before" "$load_after" <<'EOF'
import json, os, platform, sys, time
out, start, end, rc, lb, la = sys.argv[1:]
plan = open("benchmarks/results/paper_dag_plan.txt").read()
json.dump({"command": "snakemake --cores 2 --config scale=paper", "exit_code": int(rc),
           "wall_s": float(end) - float(start), "wall_h": (float(end) - float(start)) / 3600,
           "loadavg_before": [float(x) for x in lb.split()], "loadavg_after": [float(x) for x in la.split()],
           "plan": plan, "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
           "date": time.strftime("%Y-%m-%d %H:%M")}, open(out, "w"), indent=1)
print(f"exit {rc}, wall {(float(end) - float(start)) / 3600:.2f} h -> {out}")
EOF
exit "$rc"
