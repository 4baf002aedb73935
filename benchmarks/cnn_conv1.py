"""LeNet5's first convolution (1 -> 6 channels, 5x5, 28x28 input) for a chunk of clients, each with its own weights:
the engine's form (``fedrepro.learning.batched_cnn``: im2col, one ``baddbmm`` forward, one ``bmm`` for the weight
gradient) against the other forms PyTorch offers, forward and weight gradient, one thread, in one process.

Not a test. Why: #42's LeNet5 round is short of 2x pfl's two processes, and the profile (``benchmarks/engine.py
--profile``) puts conv1's two products first among the matrix products at the lowest GFLOP/s (6 output rows). Each
form's output is checked against the engine form's (forward and weight gradient, float32 summation order) before it is
timed; times are the best of ``--repeat`` calls after one untimed.

Forms:
  engine      im2col copy (K, 25, Ho Wo B), ``baddbmm`` (K, 6, 25) @ cols; weight gradient ``bmm`` dz @ cols^T
  transposed  im2col as (K, Ho Wo B, 25) rows, ``baddbmm`` cols @ W^T; weight gradient ``bmm`` dz^T-major @ cols
  per-client  oneDNN ``F.conv2d`` and ``convolution_backward`` (weight and bias) client by client, NCHW
  grouped     one ``F.conv2d`` over all clients, groups = K (what ``vmap`` of ``F.conv2d`` makes)
  split-S     the engine's weight gradient with the reduction (Ho Wo B) cut into S pieces, one ``matmul`` then a sum
  einsum      the engine's weight gradient as ``torch.einsum``

    python benchmarks/cnn_conv1.py                 # K = 21 (a one-thread chunk of AdaPeD's Table-2 step), B = 20
    python benchmarks/cnn_conv1.py --clients 50
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.nn import functional as F


def best_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=21)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    K, B, O, k, H = args.clients, args.batch, 6, 5, 28
    Ho = H - k + 1
    N = Ho * Ho * B
    x = torch.rand(K, 1, H, H, B)  # the engine's batch-last layout (K, C, H, W, B)
    w, b = torch.randn(K, O, k * k) * 0.2, torch.randn(K, O, 1) * 0.1
    dz = torch.randn(K, O, N)  # the gradient at conv1's output, (K, O, Ho Wo B)

    # engine: as batched_cnn.forward / backward
    cols = torch.empty(K, 1, k, k, Ho, Ho, B)

    def im2col():
        cols.copy_(x.unfold(2, k, 1).unfold(3, k, 1).permute(0, 1, 5, 6, 2, 3, 4))

    c = cols.view(K, k * k, N)
    z, gw = torch.empty(K, O, N), torch.empty(K, O, k * k)
    im2col()
    forms = {
        "engine": (lambda: (im2col(), torch.baddbmm(b, w, c, out=z)), lambda: torch.bmm(dz, c.transpose(1, 2), out=gw)),
    }
    ref_z, ref_gw = torch.baddbmm(b, w, c), torch.bmm(dz, c.transpose(1, 2))

    # transposed: rows (oh, ow, b), columns the 25 taps
    colsT = torch.empty(K, Ho, Ho, B, k, k)
    xs = x[:, 0]
    dzT = dz.transpose(1, 2).contiguous()  # (K, N, O): the layout this form's forward leaves

    def fwd_t():
        colsT.copy_(xs.unfold(1, k, 1).unfold(2, k, 1))
        return torch.baddbmm(b.transpose(1, 2), colsT.view(K, N, k * k), w.transpose(1, 2))

    forms["transposed"] = (fwd_t, lambda: torch.bmm(dzT.transpose(1, 2), colsT.view(K, N, k * k)))

    # per-client and grouped oneDNN convolutions, NCHW
    xc = x[:, 0].permute(0, 3, 1, 2).contiguous().unsqueeze(2)  # (K, B, 1, H, W)
    wc = w.view(K, O, 1, k, k)
    dzc = dz.view(K, O, Ho, Ho, B).permute(0, 4, 1, 2, 3).contiguous()  # (K, B, O, Ho, Wo)

    def per_client_fwd():
        return torch.stack([F.conv2d(xc[i], wc[i], b[i, :, 0]) for i in range(K)])

    def per_client_wgrad():
        return torch.stack(
            [
                torch.ops.aten.convolution_backward(
                    dzc[i], xc[i], wc[i], [O], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, True]
                )[1]
                for i in range(K)
            ]
        )

    forms["per-client"] = (per_client_fwd, per_client_wgrad)
    xg, wg, bg = xc[:, :, 0].transpose(0, 1).contiguous(), wc.reshape(K * O, 1, k, k), b.reshape(K * O)
    dzg = dzc.transpose(0, 1).reshape(B, K * O, Ho, Ho)

    def grouped_wgrad():
        return torch.ops.aten.convolution_backward(
            dzg, xg, wg, [K * O], [1, 1], [0, 0], [1, 1], False, [0, 0], K, [False, True, True]
        )[1]

    forms["grouped"] = (lambda: F.conv2d(xg, wg, bg, groups=K), grouped_wgrad)
    for S in (4, 16):
        cs = c.view(K, k * k, S, N // S).transpose(1, 2).contiguous()
        ds = dz.view(K, O, S, N // S).transpose(1, 2).contiguous()
        forms[f"split-{S}"] = (None, lambda cs=cs, ds=ds: torch.matmul(ds, cs.transpose(-1, -2)).sum(1))
    forms["einsum"] = (None, lambda: torch.einsum("kon,ktn->kot", dz, c))

    # each form's numbers against the engine's, in the engine's layout
    def as_engine_z(name, out):
        if name == "transposed":
            return out.transpose(1, 2)
        if name == "per-client":
            return out.permute(0, 2, 3, 4, 1).reshape(K, O, N)
        if name == "grouped":
            return out.view(B, K, O, Ho, Ho).permute(1, 2, 3, 4, 0).reshape(K, O, N)
        return z

    for name, (fwd, wgrad) in forms.items():
        if fwd is not None and name != "engine":
            torch.testing.assert_close(as_engine_z(name, fwd()), ref_z, rtol=1e-4, atol=1e-4)
        got = wgrad().reshape(K, O, k * k)
        torch.testing.assert_close(got, ref_gw, rtol=1e-4, atol=1e-3)

    flop = 2 * K * O * k * k * N  # per product, forward or weight gradient
    print(f"conv1 of {K} clients x {B} images, 1 thread, torch {torch.__version__}, load {os.getloadavg()}")
    print(f"each product {flop / 1e6:.1f} MFLOP; every form's numbers checked against the engine form's")
    print(f"{'form':12s} {'forward ms':>10s} {'GFLOP/s':>8s} {'weight grad ms':>14s} {'GFLOP/s':>8s} {'sum ms':>7s}")
    for name, (fwd, wgrad) in forms.items():
        f_ms = best_ms(fwd, args.repeat) if fwd is not None else float("nan")
        g_ms = best_ms(wgrad, args.repeat)
        f_rate = flop / f_ms / 1e6 if fwd is not None else float("nan")
        total = f"{f_ms + g_ms:7.2f}" if fwd is not None else f"{'-':>7s}"
        print(f"{name:12s} {f_ms:10.2f} {f_rate:8.1f} {g_ms:14.2f} {flop / g_ms / 1e6:8.1f} {total}")
    print("engine forward includes its im2col copy; transposed forward its own im2col; per-client, grouped: none")


if __name__ == "__main__":
    main()
