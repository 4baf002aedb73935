#!/usr/bin/env bash
# SLURM test of profiles/slurm: install Debian's SLURM + MUNGE, start a one-node cluster on localhost (private MUNGE
# key and socket, state and logs in one temp dir; slurm.conf at the default /etc/slurm/slurm.conf, because the
# plugin's job step drops SLURM_CONF from the environment of the srun it starts inside each job), build a small part
# of the DAG through the profile (snakemake-executor-plugin-slurm), build the same targets locally, and compare.
#
# Targets (6 jobs of 3 rules, quick scale, paper adaped only): results/privacy/adaped/{epsilon,curves}.csv (two
# accounting experiments, their aggregates, privacy_tables) and results/adaped/fig1a/quick/seed1/metrics.json (a
# seeded Monte Carlo run at seed 1: checks that seed, scale and parameters reach the remote job).
# Comparison rule: the two results trees hold the same files; JSON and YAML are equal after dropping the keys
# `wall_time_s` (run timing, the only host/time-dependent field; `versions` must match: same venv), with numbers
# equal to rel 1e-9 / abs 1e-15 (both sides run one thread on this machine: exact equality is expected, the
# tolerance only absorbs a different BLAS reduction order, and the script reports whether it was exact); parquet
# and CSV files are equal column by column under the same rule.
#
# No accounting database: the plugin's `--slurm-status-command squeue` mode polls slurmctld, which keeps finished
# jobs for MinJobAge = 300 s (the plugin needs >= 3 x the first status-check delay, 10 s here), so neither slurmdbd
# nor a MariaDB server is needed (the first status check comes 10 s after a submission, then 20 s, 30 s later...:
# with 2 CPUs and ~20-30 s per job the SLURM run takes ~2-3 minutes). Idempotent; run as root or with sudo. It refuses to run where a slurm.conf it did
# not write exists (a real SLURM installation). Every daemon it starts is stopped, the temp dir and its slurm.conf
# removed on exit (trap), whatever happens; installed packages stay.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

echo "== slurm test: packages"
need=()
for pkg in slurm-wlm munge; do dpkg -s "$pkg" > /dev/null 2>&1 || need+=("$pkg"); done
if [ ${#need[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
if ! .venv/bin/python -c "import snakemake_executor_plugin_slurm" 2> /dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[slurm]'
fi
# shellcheck disable=SC1091
. .venv/bin/activate
setup_done=$(date +%s)

SLURM_CONF=/etc/slurm/slurm.conf
MARKER="# written by fedrepro .ci/slurm_test.sh (temporary, removed on exit)"
if [ -e "$SLURM_CONF" ] && ! head -n1 "$SLURM_CONF" | grep -qF "$MARKER"; then
  echo "$SLURM_CONF exists and was not written by this test: not touching a real SLURM installation"
  exit 1
fi
T=$(mktemp -d /tmp/fedrepro-slurm.XXXXXX)
chmod 755 "$T"   # munged refuses a socket directory others can write to
mkdir -p "$T"/{munge,state,spool,run,log,local,slurm}
DAEMON_PIDS=()

cleanup() {
  rc=$?
  set +e
  if [ -f "$T/run/slurmctld.pid" ]; then
    scancel --quiet --user "$(id -un)" > /dev/null 2>&1   # jobs of an aborted run (none after a normal one)
  fi
  for pidfile in "$T/run/slurmd.pid" "$T/run/slurmctld.pid" "$T/munge/munged.pid"; do
    [ -f "$pidfile" ] && DAEMON_PIDS+=("$(cat "$pidfile")")
  done
  for pid in "${DAEMON_PIDS[@]}"; do $SUDO kill "$pid" 2> /dev/null; done
  for _ in $(seq 50); do
    alive=0
    for pid in "${DAEMON_PIDS[@]}"; do kill -0 "$pid" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for pid in "${DAEMON_PIDS[@]}"; do kill -0 "$pid" 2> /dev/null && $SUDO kill -9 "$pid" 2> /dev/null; done
  if [ $rc != 0 ]; then
    echo "== slurm test FAILED (rc=$rc); daemon logs:"
    tail -n 30 "$T"/log/*.log 2> /dev/null
    find "$T/slurm/slurm_logs" -name '*.log' -exec tail -n 20 {} + 2> /dev/null
  fi
  if [ -f "$SLURM_CONF" ] && head -n1 "$SLURM_CONF" | grep -qF "$MARKER"; then $SUDO rm -f "$SLURM_CONF"; fi
  $SUDO rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python - "$@" << 'EOF'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
EOF
}

echo "== slurm test: munged"
mungekey --create --keyfile="$T/munge/munge.key" > /dev/null 2>&1 \
  || dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$T/munge/munge.key"
$SUDO munged --force --socket="$T/munge/munge.socket.2" --key-file="$T/munge/munge.key" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/log/munged.log" --seed-file="$T/munge/munged.seed"
munge --socket="$T/munge/munge.socket.2" -n | unmunge --socket="$T/munge/munge.socket.2" > /dev/null

echo "== slurm test: slurm.conf, slurmctld, slurmd"
HOST=$(hostname -s)
CPUS=$(( $(nproc) < 2 ? $(nproc) : 2 ))
MEM_MB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))   # 90%: slurmd drains a node that has less
$SUDO mkdir -p "$(dirname "$SLURM_CONF")"
$SUDO tee "$SLURM_CONF" > /dev/null << EOF
$MARKER
ClusterName=fedreproci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.socket.2
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
MpiDefault=none
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
$SUDO slurmctld -f "$SLURM_CONF" -c
$SUDO slurmd -f "$SLURM_CONF" -c
state=""
for _ in $(seq 120); do
  state=$(sinfo -h -N -o %t 2> /dev/null | head -n1 || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
sinfo -N -o "%N %t %c %m"
[ "$state" = idle ] || { echo "node not idle: ${state:-no answer}"; scontrol show node; exit 1; }
cluster_up=$(date +%s)

TARGETS=(privacy/adaped/epsilon.csv privacy/adaped/curves.csv adaped/fig1a/quick/seed1/metrics.json)
run_targets() {   # $1: out dir; then snakemake options
  local out=$1
  shift
  snakemake --nolock "$@" \
    --config scale=quick "only_papers=[adaped]" results_dir="$out/results" figures_dir="$out/figures" \
    logs_dir="$out/logs" \
    -- "${TARGETS[@]/#/$out/results/}"
}

echo "== slurm test: targets through profiles/slurm"
# The profile as a cluster user runs it, plus what this throwaway cluster needs: no account, squeue status
# checks (no accounting database), a short first status check, plugin logs inside the temp dir.
run_targets "$T/slurm" --profile profiles/slurm --jobs 2 \
  --slurm-no-account --slurm-status-command squeue --slurm-init-seconds-before-status-checks 10 \
  --slurm-logdir "$T/slurm/slurm_logs" --slurm-keep-successful-logs
# Every job ran under SLURM: one plugin log (one sbatch) per job log the rules write.
n_jobs=$(find "$T/slurm/logs" -name '*.log' | wc -l)
n_sbatch=$(find "$T/slurm/slurm_logs" -name '*.log' | wc -l)
echo "jobs: $n_jobs, SLURM jobs: $n_sbatch"
[ "$n_jobs" -ge 6 ] && [ "$n_sbatch" = "$n_jobs" ] || { echo "expected every job (>= 6) to run under SLURM"; exit 1; }
# The rules' declared resources reached sbatch (finished jobs stay visible for MinJobAge): run_experiment's from
# fedrepro.plan.experiment_resources for the scale the job runs at (config/config.yaml's per-scale defaults; at paper
# scale what config/compute.yaml derives from the experiment's cost), the small rules' fixed ones (1000 MB, 15 min),
# 1 CPU each.
squeue --states=all -h -o "%k|%m|%l|%C" | sort | uniq -c
bad=$(squeue --states=all -h -o "%k|%m|%l|%C" | python -c '
import re, sys
from fedrepro.config import load_global, load_paper
from fedrepro.plan import experiment_resources

def slurm_time(minutes):
    d, rest = divmod(int(minutes), 24 * 60)
    h, m = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else (f"{h}:{m:02d}:00" if h else f"{m}:00")

cfg = load_global()
for line in sys.stdin:
    name, mem, limit, cpus = line.strip().split("|")
    job = re.fullmatch(r"rule_run_experiment_wildcards_([a-z]+)_(.+)_(quick|paper)_(\d+)", name)
    if job:
        paper, exp, scale = job.group(1), job.group(2), job.group(3)
        r = experiment_resources(cfg, load_paper(cfg, paper)["experiments"][exp], scale, f"{paper}.{exp}")
        want = (str(r["mem_mb"]) + "M", slurm_time(r["runtime"]), str(r["threads"]))
    elif name.startswith("rule_run_experiment_"):
        want = None
    else:
        want = ("1000M", "15:00", "1")
    if want is None or (mem, limit, cpus) != want:
        print(line.strip(), "expected", want)
')
[ -z "$bad" ] || { echo "jobs submitted with other resources than declared: $bad"; exit 1; }
slurm_done=$(date +%s)

echo "== slurm test: same targets locally"
run_targets "$T/local" --cores 2
local_done=$(date +%s)

echo "== slurm test: compare"
python - "$T/slurm/results" "$T/local/results" << 'EOF'
import json, math, sys
from pathlib import Path

import pandas as pd
import yaml

a_root, b_root = map(Path, sys.argv[1:3])
# when and where a run ran (its wall time, start, machine and load): a SLURM job and a local run differ there by design
DROP = {"wall_time_s", "started_at", "machine"}
exact = True


def same(x, y, where):
    global exact
    if isinstance(x, dict) and isinstance(y, dict):
        kx, ky = set(x) - DROP, set(y) - DROP
        if kx != ky:
            raise AssertionError(f"{where}: keys differ: {sorted(kx ^ ky)}")
        for k in sorted(kx, key=str):
            same(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            raise AssertionError(f"{where}: lengths {len(x)} != {len(y)}")
        for i, (u, v) in enumerate(zip(x, y)):
            same(u, v, f"{where}[{i}]")
    elif isinstance(x, float) and isinstance(y, (int, float)) or isinstance(y, float) and isinstance(x, int):
        if x != y and not (math.isnan(x) and math.isnan(y)):
            exact = False
            if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15):
                raise AssertionError(f"{where}: {x!r} != {y!r}")
    elif x != y:
        raise AssertionError(f"{where}: {x!r} != {y!r}")


def table(path):
    df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    return {str(c): df[c].tolist() for c in df.columns if c not in DROP} | {"<columns>": [str(c) for c in df.columns]}


files_a = sorted(p.relative_to(a_root) for p in a_root.rglob("*") if p.is_file())
files_b = sorted(p.relative_to(b_root) for p in b_root.rglob("*") if p.is_file())
if files_a != files_b:
    raise SystemExit(f"different files: slurm-only {sorted(set(files_a) - set(files_b))}, "
                     f"local-only {sorted(set(files_b) - set(files_a))}")
for rel in files_a:
    pa, pb = a_root / rel, b_root / rel
    if rel.suffix == ".json":
        same(json.loads(pa.read_text()), json.loads(pb.read_text()), str(rel))
    elif rel.suffix in (".yaml", ".yml"):
        same(yaml.safe_load(pa.read_text()), yaml.safe_load(pb.read_text()), str(rel))
    elif rel.suffix in (".parquet", ".csv"):
        same(table(pa), table(pb), str(rel))
    elif pa.read_bytes() != pb.read_bytes():
        raise SystemExit(f"{rel}: contents differ")
print(f"{len(files_a)} files equal ({'exactly' if exact else 'to rel 1e-9'}) after dropping {sorted(DROP)}:")
for rel in files_a:
    print("  ", rel)
EOF
end=$(date +%s)
echo "== slurm test passed: setup $((setup_done - start))s, cluster start $((cluster_up - setup_done))s," \
  "SLURM run $((slurm_done - cluster_up))s, local run $((local_done - slurm_done))s, total $((end - start))s"
