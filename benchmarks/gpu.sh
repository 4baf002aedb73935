#!/usr/bin/env bash
# The GPU timings of benchmarks/RESULTS.md ("GPU: ..." sections), as one script for a lent GPU machine.
#
#   bash benchmarks/gpu.sh [OUTDIR]      # default benchmarks/results/gpu
#
# In order of what the compute plan (config/compute.yaml) needs most, each step writing its JSON as it ends, so a
# run stopped at a time limit keeps what it finished:
#   1. the client step of each model at the (K, B) of the experiments whose cost is extrapolated from it
#      (cost_curves.py --points), on CUDA and, in the same run, on one CPU thread of the same machine;
#   2. the engine benchmark's FedAvg/AdaPeD rounds on the Fashion-MNIST partition, with its per-op profile;
#   3. paper-scale runs: adaped.fig2a_mnist seed 0 on CUDA and on one CPU thread; adaped.table2_mnist at 5 of its 50
#      epochs on CUDA.
# Needs the project's Python dependencies, Debian's Fashion-MNIST in /usr/share/datasets/fashion-mnist and the
# MNIST files under data/mnist (python -m fedrepro data fetch mnist).
set -uo pipefail
out=${1:-benchmarks/results/gpu}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$py -c "import torch, os; print('torch', torch.__version__, torch.cuda.get_device_name(), os.cpu_count(), 'cpus')" |
  tee -a "$out/gpu.txt"

step() { # model, points...: CUDA (engine and per-client loop), then one CPU thread (engine)
  local model=$1
  shift
  $py "$here/cost_curves.py" --device cuda --model "$model" --points "$@" --budget "${BUDGET:-5}" \
    --out "$out/cost_${model}_cuda.json" | grep -v '^|\|^<!--\|^$'
  $py "$here/cost_curves.py" --device cpu --threads 1 --model "$model" --points "$@" --paths engine --budget "${BUDGET:-5}" \
    --out "$out/cost_${model}_cpu.json" | grep -v '^|\|^<!--\|^$'
}
step cifar10_cnn 10x17 6x42
step cifar100_cnn 10x25
step fedhdp_cnn 52x20
step lenet5 5x20 30x8 50x20

$py "$here/engine.py" --device cuda --threads 1 --profile --rounds 3 --repeat 1 --out "$out/engine_cuda.json" |
  tail -n 40

run() { # experiment, device, extra args...: one paper-scale seed, wall time and its metrics
  local exp=$1 dev=$2 start=$SECONDS
  shift 2
  OMP_NUM_THREADS=1 $py -m fedrepro run "$exp" --scale paper --seed 0 --set device="$dev" "$@" \
    --out "$out/run_${exp}_$dev" --no-checkpoint >"$out/run_${exp}_$dev.log" 2>&1
  echo "$exp paper seed 0 $* on $dev: rc $? wall $((SECONDS - start)) s" | tee -a "$out/gpu.txt"
}
run adaped.fig2a_mnist cuda
run adaped.fig2a_mnist cpu
run adaped.table2_mnist cuda --set epochs=5
