#!/usr/bin/env bash
# Same numbers before and after an engine change, up to float rounding: every offline experiment that trains on the
# batched engine, one seed at quick scale, run three ways, then benchmarks/compare_runs.py per experiment:
#   before  the batched engine at BASE (a git worktree of that commit, this checkout's .venv)
#   after   the batched engine of this checkout
#   loop    this checkout's per-client reference loop (--set engine=loop), the same math in another float order
# "after - before" is the change; "loop - before" is what two equally valid float orders of the same code already
# differ by after the same number of SGD steps, the yardstick for it. Not a test; writes benchmarks/results/identity/.
#
#   bash benchmarks/engine_identity.sh BASE [SEED] [EXPERIMENT ...]
#   bash benchmarks/engine_identity.sh 37879b7          # the commit before the hand-written batched CNN
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: engine_identity.sh BASE_COMMIT [SEED] [EXPERIMENT ...]}
seed=${2:-0}
shift $(($# < 2 ? $# : 2))
experiments=("$@")
if [ ${#experiments[@]} -eq 0 ]; then
  experiments=(adaped.table2_fmnist adaped.table1_fmnist adaped.table4_femnist_sample fedhdp.x_femnist_sample)
fi
out=benchmarks/results/identity
worktree=$(mktemp -d "${TMPDIR:-/tmp}/fedrepro-base-XXXXXX")
trap 'git worktree remove --force "$worktree" > /dev/null 2>&1 || true' EXIT
git worktree add --detach "$worktree" "$base" > /dev/null
# the base commit's code reads this checkout's data and partitions (paths resolve from its own root)
mkdir -p "$worktree/results" data results/data
ln -s "$PWD/data" "$worktree/data"
ln -s "$PWD/results/data" "$worktree/results/data"
run() { # label pythonpath experiment [--set ...]
  local label=$1 pp=$2 exp=$3
  shift 3
  local dir="$out/$exp/$label"
  if [ -f "$dir/metrics.json" ]; then return; fi
  mkdir -p "$dir"
  echo "== $exp $label"
  /usr/bin/time -f "%e s wall, %U s user" env PYTHONPATH="$pp" .venv/bin/python -m fedrepro run "$exp" \
    --scale quick --seed "$seed" --out "$dir" --no-checkpoint "$@" > "$dir/log.txt" 2>&1 || {
    tail -20 "$dir/log.txt"
    exit 1
  }
  tail -1 "$dir/log.txt"
}
for exp in "${experiments[@]}"; do
  run before "$worktree/src" "$exp"
  run after "$PWD/src" "$exp"
  run loop "$PWD/src" "$exp" --set engine='"loop"'
done
for exp in "${experiments[@]}"; do
  echo
  echo "### $exp (seed $seed, quick scale)"
  .venv/bin/python benchmarks/compare_runs.py "$out/$exp/before" "$out/$exp/after" --reference "$out/$exp/loop"
done | tee "$out/compare.md"
