"""How far FedAvg through PPSGD's loop drifts from PPSGD's own global-learning rows on Fig. 1d's CNN (README "Compare
your method"). Not a test: both are run round by round on one batch sequence without noise, PPSGD-exp with
alpha_c = inf (:func:`fedrepro.papers.ppsgd.cnn.round_step`) and FedAvg with clip-only dp on the protocol's global model
and loss (:mod:`fedrepro.papers.ppsgd.method`), and the largest parameter difference is printed every few rounds.
Each round is the same update up to the order of a float32 sum (tests/papers/ppsgd/test_method.py); how far that
order grows over a run is what this measures.

    python benchmarks/ppsgd_method_drift.py [--partition results/data/femnist_sample_digits_m30] [--rounds 60]
        [--step 0.5] [--clip 1.0] [--seed 123] [--every 20]

The partition must be built first (`python -m fedrepro data partition femnist_sample_digits_m30 --out ...`).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from fedrepro.learning.dp import SharedNoiseMechanism
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.net import Net
from fedrepro.papers.ppsgd import cnn, method
from fedrepro.papers.ppsgd.clients import load_partition, rows_of
from fedrepro.papers.ppsgd.sampler import run_batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partition", default="results/data/femnist_sample_digits_m30")
    ap.add_argument("--n-classes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--step", type=float, default=0.5)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--offset", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--every", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)

    cl = load_partition(args.partition, args.n_classes)
    K = cl.y_train.shape[1]
    rows_state = cnn.init_state(cl.n_users, K, np.random.default_rng([args.seed, 2]))
    net = Net(cnn.GlobalModel(rows_state.W, rows_state.w), loss=method.squared_loss(args.offset, K, half_sum=False))
    algo = FedAvg(weight_decay=0.0, dp=SharedNoiseMechanism(args.clip, 0.0))
    state = algo.init_state(net, cl.n_users, torch.Generator())
    images = torch.from_numpy(np.array(cl.x_train)).reshape(-1, 28, 28)
    targets = torch.from_numpy(cl.y_train - args.offset)
    labels = torch.from_numpy(cl.y_train.argmax(1))
    p = {"m": 10, "users_per_round": 10, "epochs": 1}
    print("round  max |W difference|  max |w difference|")
    for r, (users, rows) in enumerate(run_batches(cl.train_off, p, args.seed)):
        if r >= args.rounds:
            break
        idx = torch.from_numpy(rows.ravel())
        X, Y = images[idx].reshape(*rows.shape, 28, 28), targets[idx].reshape(*rows.shape, K)
        cnn.round_step(rows_state, users, X, Y, args.step, 0.0, 0.0, args.clip, torch.Generator())
        order = np.argsort(users, kind="stable")
        u, rw = users[order], rows[order]
        sel = torch.from_numpy(u)
        algo.start_round(state, sel)
        algo.local_step(
            state, torch.from_numpy(rows_of(cl.x_train, rw, np.float32)), labels[torch.from_numpy(rw)], sel, args.step
        )
        algo.sync(state, sel)
        if r % args.every == 0 or r == args.rounds - 1:
            dW = max(float((state.global_params[k] - v).abs().max()) for k, v in rows_state.W.items())
            dw = float((state.global_params["w"] - rows_state.w).abs().max())
            print(f"{r:5d}  {dW:18.3g}  {dw:18.3g}")


if __name__ == "__main__":
    main()
