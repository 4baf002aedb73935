"""torch.compile (inductor, CPU) against the eager batched CNN step: does compiling the engine's LeNet5 step help?

    python benchmarks/cnn_compile.py [--clients 21] [--repeat 4]

One SGD step of ``--clients`` clients (one chunk of the engine's batched LeNet5 on this machine at one thread: 21 of
a 50-client round), minibatch 20, written with fedrepro.learning.batched_cnn's forward and backward (fresh
buffers, no out= arguments, so that inductor can trace it whole), timed eager and compiled (``torch.compile``,
``dynamic=False``) at one thread, interleaved, best and every one of ``--repeat`` measurements of 5 steps. Prints the
compile time, the largest parameter difference between the two and the 1-minute load before and after.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.nn import functional as F

from fedrepro.learning import batched_cnn
from fedrepro.learning.models import LeNet5

B, LR = 20, 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=21)
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LeNet5()
    K = args.clients
    params = {k: v.detach().expand(K, *v.shape).contiguous() for k, v in model.named_parameters()}
    x, y = torch.rand(K, B, 1, 28, 28), torch.randint(0, 10, (K, B))

    def step(params, x, y):
        logits, saved = batched_cnn.forward(model, params, x)
        dlogits = torch.softmax(logits, -1) - F.one_hot(y, 10).to(logits.dtype)
        g = batched_cnn.backward(model, params, saved, dlogits / B, (1, 28, 28))
        return {k: params[k] - LR * g[k] for k in params}

    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, 1 thread, {K} clients x {B} images; load {os.getloadavg()}"
    )
    t0 = time.perf_counter()
    compiled = torch.compile(step, dynamic=False)
    want, got = step(params, x, y), compiled(params, x, y)
    print(f"compile (first call): {time.perf_counter() - t0:.0f} s")
    diff = max((want[k] - got[k]).abs().max().item() for k in want)
    print(f"largest parameter difference, compiled vs eager: {diff:.1e}")
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(args.repeat):
        for name, f in (("eager", step), ("compiled", compiled)):
            f(params, x, y)
            t = time.perf_counter()
            for _ in range(5):
                f(params, x, y)
            times[name].append((time.perf_counter() - t) / 5)
    for name, ts in times.items():
        print(f"{name:9s} best {1e3 * min(ts):6.1f} ms per step; all: {', '.join(f'{1e3 * t:.1f}' for t in ts)}")
    print(
        f"compiled / eager (best): {min(times['compiled']) / min(times['eager']):.2f}x the time; load {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
