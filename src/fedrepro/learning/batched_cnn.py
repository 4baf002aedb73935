"""The engine's client-batched CNN (:class:`fedrepro.learning.models.ConvNet`): the module's function and its
parameter gradient written out as batched matrix products over clients, forward and backward by hand.

Why: under ``vmap``, ``F.conv2d`` with per-client weights becomes one grouped convolution (groups = clients) that
oneDNN runs at about the cost of the clients' convolutions one by one, and autograd under ``vmap`` adds a copy or
a fill for most ops. Here every convolution is im2col + one ``baddbmm`` over the clients, the backward is four
``bmm`` per layer, and nothing else touches the data but the pooling, the ReLU masks and the im2col copies
(benchmarks/RESULTS.md has the per-op profile).

Layout: one client's activations are batch-last, (C, H, W, B); a batch of clients adds a leading axis.
- im2col of a k x k convolution (stride 1) is one copy of a strided view, (K, C, H, W, B) -> (K, C k k, Ho Wo B),
  rows in the weight's (c, kh, kw) order, columns in (oh, ow, b) order, so the convolution is
  ``bias + W (K, O, C k k) @ cols`` -> (K, O, Ho, Wo, B), batch-last again. Its adjoint (col2im, the data's
  gradient of every convolution but the first) is k * k slice-adds. Zero padding is ``F.pad`` of H and W first.
- a (K O, H, W, B) tensor is a (N = K O, C = B, H, W) tensor in channels-last memory, where
  ``max_pool2d_with_indices`` (and its backward) has a vectorized kernel.
- max-pool runs before the ReLU: relu(max(z)) = max(relu(z)), and the gradient reaches the same element. If the
  window's max is > 0 both pick the first maximal element (the positive ones are unchanged by the ReLU); if not,
  the ReLU's gradient is 0 on both sides. It halves the ReLU's work and the pooling indices are the same.
- flatten in (c, h, w) order is a reshape to (K, C H W, B); the fully connected layers are ``bias + W @ h``, and
  the logits are the transpose, (K, B, n_classes).

Two entry points share :func:`forward` and :func:`backward`:
- :func:`ce_grads`: every client's cross-entropy gradient on its minibatch (optionally the SGD step itself), in
  chunks of clients (:data:`CHUNK_BYTES`), the large buffers reused from chunk to chunk (:class:`Workspace`). The
  engine's ``client_grads`` / ``client_sgd`` (FedAvg, Local, Ditto, Per-FedAvg, the DP baselines) take this path.
- :func:`logits`: one client's logits as an ``autograd.Function`` whose ``vmap`` rule runs :func:`forward` for
  all mapped clients at once and whose backward is a second Function, batched the same way, running
  :func:`backward`. Algorithms with their own losses (AdaPeD, pFedMe, QuPeD, FML) call it through ``Net.logits``
  under ``vmap`` with ``grad`` / ``vjp`` unchanged. First derivatives only: differentiating the gradient again
  raises.
Where the compiled kernel applies (:mod:`fedrepro.learning.native_cnn`: float32 on the CPU, unpadded convolutions)
both entry points run there instead: the fused step, and the logits' forward and backward.

The numbers differ from ``F.conv2d``'s by float32 summation order only (tests: forward and gradients against the
module in float64, and the engine's histories of every algorithm with and without ``vmap``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedrepro.learning import native_cnn
from fedrepro.learning.models import ConvNet

Params = dict[str, Tensor]
#: (name, shape, like) -> an uninitialized tensor of ``shape`` with ``like``'s dtype and device
Alloc = Callable[[str, tuple[int, ...], Tensor], Tensor]


def _fresh(name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
    return like.new_empty(shape)


class Workspace:
    """Named buffers reused from chunk to chunk and step to step (a flat tensor per name, grown on demand).

    Why: a chunk's im2col buffers are several MB; allocated afresh, each is mapped and page-faulted in again
    whenever the allocator has handed the memory back to the system (measured on the 2-core VM with glibc's
    default settings: 166 -> 110 ms per 50-client LeNet5 step once the memory was kept). A buffer is only valid
    until the same name is asked for again: :func:`ce_grads` uses one per chunk, never for what it returns."""

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def __call__(self, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
        n = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[name] = like.new_empty(n)
        return buf[:n].view(shape)


def forward(model: ConvNet, params: Params, x: Tensor, alloc: Alloc = _fresh) -> tuple[Tensor, list[Tensor]]:
    """Logits (K, B, n_classes) of K clients, ``params`` name -> (K, *shape), x (K, B, *feature_shape); and what
    :func:`backward` needs: per convolution its columns, pooling indices and output (K, O, Hp, Wp, B), then the
    input of every fully connected layer (K, features, B)."""
    K, B = x.shape[:2]
    h = alloc("input", (K, *x.shape[2:], B), x)
    h.copy_(x.permute(0, 2, 3, 4, 1))  # (K, C, H, W, B)
    saved: list[Tensor] = []
    p = model.pool
    for i, (name, (C, _, _, Ho, Wo, Hp, Wp)) in enumerate(zip(model.conv_layers, model.geometry(x.shape[2:]))):
        conv = getattr(model, name)
        (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
        if ph or pw:
            h = F.pad(h, (0, 0, pw, pw, ph, ph))
        cols = alloc(f"cols{i}", (K, C, kh, kw, Ho, Wo, B), x)
        cols.copy_(h.unfold(2, kh, 1).unfold(3, kw, 1).permute(0, 1, 5, 6, 2, 3, 4))
        cols = cols.view(K, C * kh * kw, Ho * Wo * B)
        w = params[f"{name}.weight"]
        O = w.shape[1]
        z = torch.baddbmm(
            params[f"{name}.bias"].unsqueeze(2), w.reshape(K, O, -1), cols, out=alloc(f"z{i}", (K, O, Ho * Wo * B), x)
        )
        zv = z.view(K * O, Ho, Wo, B).permute(0, 3, 1, 2)  # (N, C, H, W) view in channels-last memory
        pooled, idx = torch.ops.aten.max_pool2d_with_indices(zv, [p, p], [p, p])
        h = pooled.relu_().permute(0, 2, 3, 1).view(K, O, Hp, Wp, B)
        saved += [cols, idx.view(K, O, B, Hp, Wp), h]
    a = h.reshape(K, -1, B)
    *hidden, last = model.fc_layers
    for name in hidden:
        saved.append(a)
        a = torch.baddbmm(params[f"{name}.bias"].unsqueeze(2), params[f"{name}.weight"], a).relu_()
    saved.append(a)
    logits = torch.baddbmm(params[f"{last}.bias"].unsqueeze(2), params[f"{last}.weight"], a)
    return logits.transpose(1, 2), saved


def backward(
    model: ConvNet,
    params: Params,
    saved: list[Tensor],
    dlogits: Tensor,
    feature_shape: tuple[int, ...],
    alloc: Alloc = _fresh,
    out: Params | None = None,
) -> Params:
    """The gradient of every parameter (K, *shape) from the logits' gradient (K, B, n_classes) and
    :func:`forward`'s ``saved``; into ``out`` (name -> (K, *shape)) when given. The data's gradient is not
    formed."""
    K, B = dlogits.shape[:2]
    grads = out if out is not None else {k: v.new_empty(v.shape) for k, v in params.items()}
    nconv = len(model.conv_layers)
    g = dlogits.transpose(1, 2)  # (K, n_classes, B)
    for name, a in zip(reversed(model.fc_layers), reversed(saved[3 * nconv :])):
        torch.bmm(g, a.transpose(1, 2), out=grads[f"{name}.weight"])
        torch.sum(g, 2, out=grads[f"{name}.bias"])
        g = torch.bmm(params[f"{name}.weight"].transpose(1, 2), g).mul_(a > 0)  # a: a ReLU's output
    p = model.pool
    for i, (C, H, W, Ho, Wo, Hp, Wp) in reversed(list(enumerate(model.geometry(feature_shape)))):
        name = model.conv_layers[i]
        conv = getattr(model, name)
        (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
        cols, idx = saved[3 * i], saved[3 * i + 1]
        w = params[f"{name}.weight"]
        O = w.shape[1]
        pooled_grad = g.view(K * O, Hp, Wp, B).permute(0, 3, 1, 2)
        # the pooling's input only gives the kernel its shape and memory format: an untouched tensor suffices
        shape_of_z = torch.empty_strided(
            (K * O, B, Ho, Wo), (Ho * Wo * B, 1, Wo * B, B), dtype=dlogits.dtype, device=dlogits.device
        )
        dz = alloc(f"dz{i}", (K * O, Ho, Wo, B), dlogits).permute(0, 3, 1, 2)
        torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
            pooled_grad, shape_of_z, [p, p], [p, p], [0, 0], [1, 1], False, idx.flatten(0, 1), grad_input=dz
        )
        dz = dz.permute(0, 2, 3, 1).view(K, O, Ho * Wo * B)
        torch.bmm(dz, cols.transpose(1, 2), out=grads[f"{name}.weight"].view(K, O, -1))
        torch.sum(dz, 2, out=grads[f"{name}.bias"])
        if i == 0:
            break
        dcols = torch.bmm(
            w.reshape(K, O, -1).transpose(1, 2), dz, out=alloc(f"dcols{i}", (K, C * kh * kw, Ho * Wo * B), dlogits)
        )
        dcols = dcols.view(K, C, kh, kw, Ho, Wo, B)
        dh = alloc(f"dh{i}", (K, C, H, W, B), dlogits).zero_()
        for r in range(kh):
            for c in range(kw):
                dh[:, :, r : r + Ho, c : c + Wo] += dcols[:, :, r, c]
        if ph or pw:
            dh = dh[:, :, ph : H - ph, pw : W - pw]
        g = dh.reshape(K, -1, B).mul_(saved[3 * i - 1].reshape(K, -1, B) > 0)  # the previous block's ReLU
    return grads


def ce_grads(
    model: ConvNet,
    params: Params,
    x: Tensor,
    y: Tensor,
    chunk: int | None = None,
    sgd: tuple[float, float] | None = None,
) -> tuple[Params, Tensor]:
    """Every client's gradient of its minibatch's mean cross-entropy and the losses: x (K, B, ...), y (K, B) ->
    (grads name -> (K, *shape), losses (K,)), the same as ``vmap(grad_and_value(cross_entropy(module(x), y)))``.
    Clients are taken ``chunk`` at a time (default :func:`chunk_clients`), each chunk's forward and backward
    together, so that its buffers stay in cache; the large ones are reused from chunk to chunk.

    ``sgd=(lr, weight_decay)``: return the parameters after one SGD step instead of the gradients,
    ``p - lr (g + weight_decay p)`` with the arithmetic of :func:`fedrepro.learning.net.sgd`, done chunk by chunk
    while the chunk's gradients are in cache.

    Where the compiled kernel applies (:func:`fedrepro.learning.native_cnn.usable`: float32 on the CPU, unpadded
    convolutions) and no ``chunk`` is asked for, the step runs there instead, each client's network in its cache."""
    if chunk is None and native_cnn.usable(model, params, x, y):
        return native_cnn.ce_grads(model, params, x, y, sgd)
    K, B = y.shape
    feature_shape = tuple(x.shape[2:])
    chunk = chunk or chunk_clients(model, feature_shape, B)
    out = {k: v.new_empty(v.shape) for k, v in params.items()}
    losses = x.new_empty(K)
    ws = _workspace(x.device)
    for a in range(0, K, chunk):
        part = slice(a, a + chunk)
        p = {k: v[part] for k, v in params.items()}
        n = len(next(iter(p.values())))
        logits, saved = forward(model, p, x[part], ws)
        log_q = torch.log_softmax(logits, -1)
        losses[part] = log_q.gather(-1, y[part, :, None]).mean((1, 2)).neg_()
        dlogits = log_q.exp_()
        dlogits.scatter_add_(-1, y[part, :, None], dlogits.new_full((1, 1, 1), -1.0).expand(n, B, 1))
        if sgd is None:
            backward(model, p, saved, dlogits.div_(B), feature_shape, ws, {k: v[part] for k, v in out.items()})
            continue
        g = {k: ws(f"grad.{k}", v.shape, v) for k, v in p.items()}
        backward(model, p, saved, dlogits.div_(B), feature_shape, ws, g)
        lr, weight_decay = sgd
        step = torch._foreach_mul(list(p.values()), weight_decay)  # weight_decay p
        torch._foreach_add_(step, list(g.values()))  # g + weight_decay p
        torch._foreach_mul_(step, lr)
        for (k, v), s in zip(p.items(), step):
            torch.sub(v, s, out=out[k][part])
    return out, losses


_WORKSPACES: dict[torch.device, Workspace] = {}


def _workspace(device: torch.device) -> Workspace:
    """One workspace per device and process: the engine runs one training loop at a time."""
    return _WORKSPACES.setdefault(torch.device(device), Workspace())


# ------------------------------------------------------------------------------------ per-client logits, vmapped


def _leading(batch: int, t: Tensor, dim: int | None) -> Tensor:
    """``t`` with its mapped axis first (an unmapped ``t`` is expanded, not copied)."""
    return t.expand(batch, *t.shape) if dim is None else t.movedim(dim, 0)


def _forward(model: ConvNet, native: bool, params: Params, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """:func:`forward`, or its compiled kernel's (``native``: what it saves is one tensor)."""
    if native:
        logits, saved = native_cnn.forward(model, params, x)
        return logits, [saved]
    return forward(model, params, x)


def _backward(
    model: ConvNet, native: bool, params: Params, saved: list[Tensor], dlogits: Tensor, feature_shape: tuple[int, ...]
) -> Params:
    if native:
        return native_cnn.backward(model, params, saved[0], dlogits, feature_shape)
    return backward(model, params, saved, dlogits, feature_shape)


class _Logits(torch.autograd.Function):
    """One client's logits (under ``vmap``: every mapped client's, by :func:`forward` or, ``native``, by the
    compiled kernel's); the extra outputs are what the backward needs, not differentiable."""

    @staticmethod
    def forward(model: ConvNet, names: tuple[str, ...], native: bool, x: Tensor, *params: Tensor) -> tuple[Tensor, ...]:
        logits, saved = _forward(model, native, {k: t.unsqueeze(0) for k, t in zip(names, params)}, x.unsqueeze(0))
        return logits[0], *(s[0] for s in saved)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        model, names, native, x, *params = inputs
        ctx.model, ctx.names, ctx.native, ctx.feature_shape = model, names, native, tuple(x.shape[1:])
        ctx.mark_non_differentiable(*output[1:])
        ctx.save_for_backward(*params, *output[1:])

    @staticmethod
    def backward(ctx, dlogits: Tensor, *_) -> tuple[Tensor | None, ...]:
        grads = _ParamGrads.apply(ctx.model, ctx.names, ctx.native, ctx.feature_shape, dlogits, *ctx.saved_tensors)
        return None, None, None, None, *grads

    @staticmethod
    def vmap(info, in_dims, model, names, native, x, *params):
        n = info.batch_size
        p = {k: _leading(n, t, d) for k, t, d in zip(names, params, in_dims[4:])}
        logits, saved = _forward(model, native, p, _leading(n, x, in_dims[3]).contiguous())
        return (logits, *saved), (0,) * (1 + len(saved))


class _ParamGrads(torch.autograd.Function):
    """:func:`backward` of one client (under ``vmap``: of every mapped client at once)."""

    @staticmethod
    def forward(model, names, native, feature_shape, dlogits, *tensors):
        params = {k: t.unsqueeze(0) for k, t in zip(names, tensors)}
        saved = [t.unsqueeze(0) for t in tensors[len(names) :]]
        grads = _backward(model, native, params, saved, dlogits.unsqueeze(0), feature_shape)
        return tuple(grads[k][0] for k in names)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(
            "batched_cnn: the CNN's gradient is computed by hand and cannot be differentiated again; "
            "use Net(..., gemm=False) for second derivatives"
        )

    @staticmethod
    def vmap(info, in_dims, model, names, native, feature_shape, dlogits, *tensors):
        n, k = info.batch_size, len(names)
        mapped = [_leading(n, t, d) for t, d in zip(tensors, in_dims[5:])]
        params = dict(zip(names, mapped[:k]))
        grads = _backward(model, native, params, mapped[k:], _leading(n, dlogits, in_dims[4]), feature_shape)
        return tuple(grads[name] for name in names), (0,) * k


def logits(model: ConvNet, params: Params, x: Tensor) -> Tensor:
    """``functional_call(model, params, (x,))`` for one client, x (B, C, H, W) -> (B, n_classes); under ``vmap``
    batched over the mapped clients, with ``grad`` / ``vjp`` to the parameters (not to ``x``). Forward and backward
    run in the compiled kernel where it applies (:func:`fedrepro.learning.native_cnn.usable`), decided here once for
    both."""
    native = native_cnn.usable(model, params, x)
    return _Logits.apply(model, tuple(params), native, x, *params.values())[0]


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


#: Bytes of the largest im2col buffer of one chunk of clients, per intra-op thread (:func:`ce_grads` and the
#: engine's ``vmap`` chunks). Measured on the 2-core VM (LeNet5, 50 clients x 20 images, one fused SGD step, with
#: :func:`fedrepro.learning.engine.keep_freed_memory`): at 1 thread 2 clients a chunk took 109 ms, 3-50 clients
#: 89-100 ms (within the noise); at 2 threads 2 clients 93 ms, 5 clients 69 ms, 25-50 clients 49-62 ms, the
#: larger products splitting better over the threads. The bound only caps memory at large K.
CHUNK_BYTES = 24 * 2**20


def chunk_clients(model: ConvNet, feature_shape: tuple[int, ...], rows: int) -> int:
    """Clients per chunk so that the largest im2col buffer of a chunk, ``rows`` images per client, stays within
    :data:`CHUNK_BYTES` per thread (float32)."""
    largest = max(C * k * Ho * Wo for (C, _, _, Ho, Wo, _, _), k in _kernel_areas(model, feature_shape))
    return max(1, CHUNK_BYTES * torch.get_num_threads() // (4 * largest * rows))


def _kernel_areas(model: ConvNet, feature_shape: tuple[int, ...]):
    areas = [math.prod(getattr(model, n).kernel_size) for n in model.conv_layers]
    return zip(model.geometry(feature_shape), areas)


__all__ = [
    "CHUNK_BYTES",
    "Workspace",
    "backward",
    "ce_grads",
    "chunk_clients",
    "forward",
    "logits",
    "supports",
]
