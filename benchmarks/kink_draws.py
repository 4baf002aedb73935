"""How often a random draw of test_batched_grads_equal_loop's data sits on a kink, and what that does to the test.

The test compares every client's gradient from the batched CNN (fedrepro.learning.batched_cnn) with a per-client
autograd loop, both float32, to 1e-6. Per draw (a LeNet5 made under seed ``base + i``, then the test's own client
perturbation, images and labels under seed 0) this prints the largest gradient difference and the data's kink margin
(tests/helpers/learning_helpers.kink_margin: the float64 forward's smallest distance from a ReLU's 0 or a pooling
tie), every draw that fails the test's 1e-6 or has a margin under 1e-7, and the counts.

    python benchmarks/kink_draws.py [--draws 300] [--base 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "helpers"))

from learning_helpers import kink_margin  # noqa: E402

from fedrepro.learning import engine  # noqa: E402
from fedrepro.learning.models import LeNet5  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--base", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    fails, near = [], []
    print("| draw | largest gradient difference | kink margin |")
    print("|---|---|---|")
    for i in range(args.draws):
        torch.manual_seed(args.base + i)
        model = LeNet5()
        torch.manual_seed(0)
        net = engine.Net(model)
        params = {k: v + 0.05 * torch.randn_like(v) for k, v in net.replicate(5).items()}
        x, y = torch.rand(5, 8, 1, 28, 28), torch.randint(0, 10, (5, 8))
        grads, _ = engine.client_grads(net, params, x, y)
        ref, _ = engine.loop_grads(model, params, x, y)
        err = max((grads[k] - ref[k]).abs().max().item() for k in grads)
        margin = kink_margin(model, params, x)
        if err > 1e-6 or margin < 1e-7:
            print(f"| {i} | {err:.1e} | {margin:.1e} |")
        fails += [margin] if err > 1e-6 else []
        near += [margin] if margin < 1e-7 else []
    print()
    print(
        f"{len(fails)} of {args.draws} draws fail the test's 1e-6 (their margins: "
        f"{', '.join(f'{m:.1e}' for m in fails) or 'none'}); {len(near)} have a margin under 1e-7"
    )


if __name__ == "__main__":
    main()
