"""The engine's client-batched formulation of the CNNs (:class:`fedrepro.learning.models.ConvNet`): the same
function as the module's forward, written so that ``torch.vmap`` over clients turns it into batched matrix products.

Why: under ``vmap``, ``F.conv2d`` with per-client weights becomes one grouped convolution (groups = clients), and
oneDNN runs that, forward and backward, at about the cost of the clients' convolutions one by one. Here each
convolution is im2col + one matrix product per client, which ``vmap`` batches into ``bmm`` over clients.

One client's activations are kept batch-last, (C, H, W, B):
- im2col of a k x k convolution (stride 1) is one copy of a strided view, (C, H, W, B) -> (C k k, Ho Wo B), its
  rows in the weight's (c, kh, kw) order and its columns in (oh, ow, b) order, so the convolution is
  ``bias + W (O, C k k) @ cols`` -> (O, Ho, Wo, B), again batch-last. The copy reads contiguous runs of Wo * B
  floats. Its gradient (col2im) is k * k slice-adds (:class:`Im2col`); the data's own gradient is never formed.
  Zero padding is ``F.pad`` of H and W first.
- a (C, H, W, B) tensor is an (N = C, C = B, H, W) tensor in channels-last memory, where ``F.max_pool2d`` has a
  vectorized kernel (its channels-first kernel is ~8x slower on these shapes).
- max-pool runs before the ReLU: relu(max(z)) = max(relu(z)), and the gradient reaches the same element. If the
  window's max is > 0, both pick the first maximal element (the positive ones are unchanged by the ReLU); if not,
  the ReLU's gradient is 0 on both sides. It halves the ReLU's work and the pooling indices are the same.
- flatten in (c, h, w) order is a reshape to (C H W, B); the fully connected layers are ``bias + W @ h`` and the
  logits are the transpose, (B, n_classes).

The numbers differ from ``F.conv2d``'s by float32 summation order only (tests: the gradients of both, and the
engine's histories of every algorithm with and without ``vmap``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedrepro.learning.models import ConvNet

Params = dict[str, Tensor]


class Im2col(torch.autograd.Function):
    """(C, H, W, B) -> (C kh kw, Ho Wo B): the columns of a stride-1 convolution with a (kh, kw) kernel."""

    generate_vmap_rule = True

    @staticmethod
    def forward(h: Tensor, kh: int, kw: int) -> Tensor:
        windows = h.unfold(1, kh, 1).unfold(2, kw, 1)  # (C, Ho, Wo, B, kh, kw), a view
        return windows.permute(0, 4, 5, 1, 2, 3).reshape(h.shape[0] * kh * kw, -1)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        h, ctx.kh, ctx.kw = inputs
        ctx.shape = h.shape

    @staticmethod
    def backward(ctx, grad_cols: Tensor) -> tuple[Tensor, None, None]:
        """col2im: every column entry added back to the input element it was copied from."""
        C, H, W, B = ctx.shape
        kh, kw = ctx.kh, ctx.kw
        Ho, Wo = H - kh + 1, W - kw + 1
        g = grad_cols.reshape(C, kh, kw, Ho, Wo, B)
        grad_h = grad_cols.new_zeros(C, H, W, B)
        for i in range(kh):
            for j in range(kw):
                grad_h[:, i : i + Ho, j : j + Wo] += g[:, i, j]
        return grad_h, None, None


def conv2d(h: Tensor, weight: Tensor, bias: Tensor, padding: tuple[int, int]) -> Tensor:
    """``F.conv2d`` (stride 1, no dilation, one group) of a batch-last (C, H, W, B) tensor -> (O, Ho, Wo, B)."""
    ph, pw = padding
    if ph or pw:
        h = F.pad(h, (0, 0, pw, pw, ph, ph))
    O, _, kh, kw = weight.shape
    _, H, W, B = h.shape
    out = torch.addmm(bias[:, None], weight.reshape(O, -1), Im2col.apply(h, kh, kw))
    return out.view(O, H - kh + 1, W - kw + 1, B)


def max_pool_relu(h: Tensor, size: int) -> Tensor:
    """ReLU then ``size`` x ``size`` max-pool of a batch-last (C, H, W, B) tensor, computed as pool then ReLU."""
    pooled = F.max_pool2d(h.permute(0, 3, 1, 2), size)  # (C, B, H, W) view in channels-last memory
    return F.relu(pooled).permute(0, 2, 3, 1)


def supports(model: nn.Module) -> bool:
    """Whether :func:`logits` computes ``model``'s function: a :class:`ConvNet` whose convolutions have stride 1,
    no dilation, one group, zero padding given as numbers, and biases."""
    if not isinstance(model, ConvNet):
        return False
    convs = [getattr(model, name) for name in model.conv_layers]
    fcs = [getattr(model, name) for name in model.fc_layers]
    return all(
        isinstance(c, nn.Conv2d)
        and c.stride == (1, 1)
        and c.dilation == (1, 1)
        and c.groups == 1
        and c.padding_mode == "zeros"
        and not isinstance(c.padding, str)
        and c.bias is not None
        for c in convs
    ) and all(isinstance(f, nn.Linear) and f.bias is not None for f in fcs)


#: Bytes of the largest im2col buffer of one vmapped chunk (:func:`chunk_clients`). glibc serves allocations up to
#: its mmap threshold (at most 32 MiB) from its heap and reuses them step after step; a larger one is mapped and
#: unmapped each time, and its first touch page-faults: at 50 clients x 20 images LeNet5's first columns are 58 MB,
#: and the faults cost more than the convolutions (benchmarks/RESULTS.md). Below it, larger chunks were faster.
CHUNK_BYTES = 24 * 2**20


def chunk_clients(model: ConvNet, feature_shape: tuple[int, ...], rows: int) -> int:
    """Clients per vmapped chunk so that the largest im2col buffer of a chunk, ``rows`` images per client, stays
    within :data:`CHUNK_BYTES` (float32)."""
    _, H, W = feature_shape
    largest = 0
    for name in model.conv_layers:
        conv = getattr(model, name)
        (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
        H, W = H + 2 * ph - kh + 1, W + 2 * pw - kw + 1
        largest = max(largest, conv.in_channels * kh * kw * H * W)
        H, W = H // model.pool, W // model.pool
    return max(1, CHUNK_BYTES // (4 * largest * rows))


def logits(model: ConvNet, params: Params, x: Tensor) -> Tensor:
    """``functional_call(model, params, (x,))`` for one client, x (B, C, H, W) -> (B, n_classes)."""
    h = x.permute(1, 2, 3, 0).contiguous()
    for name in model.conv_layers:
        conv = getattr(model, name)
        h = conv2d(h, params[f"{name}.weight"], params[f"{name}.bias"], conv.padding)
        h = max_pool_relu(h, model.pool)
    h = h.reshape(-1, h.shape[-1])
    *hidden, last = model.fc_layers
    for name in hidden:
        h = F.relu(torch.addmm(params[f"{name}.bias"][:, None], params[f"{name}.weight"], h))
    return torch.addmm(params[f"{last}.bias"][:, None], params[f"{last}.weight"], h).T


__all__ = ["CHUNK_BYTES", "Im2col", "chunk_clients", "conv2d", "logits", "max_pool_relu", "supports"]
