"""The engine's client-batched fully connected network (:class:`fedrepro.learning.models.MLP`): every client's
cross-entropy gradient, and the SGD step itself, written out as batched matrix products over clients.

Why: under ``vmap``, ``grad`` of ``functional_call`` runs a ReLU network on 20-row minibatches as a chain of
small per-op kernels with autograd's bookkeeping between them, ~0.3-1 ms per client step of FedHDP's 784-50-10
network on the 2-core VM, ~10-25x the cost of the same arithmetic as three ``baddbmm`` / ``bmm`` per layer over
all clients (benchmarks/RESULTS.md, "FedHDP non-IID MNIST"). Nothing here is specific to a paper.

Layout: client-major, row-major, as the module computes it: activations (K, B, features), weights (K, out, in).
For one client, with h_0 = x flattened, z_l = h_{l-1} W_l^T + b_l, h_l = relu(z_l) and the logits z_L:

    forward    z_l = baddbmm(b_l, h_{l-1}, W_l^T)                     (K, B, out_l)
    backward   dz_L = (softmax(z_L) - onehot(y)) / B                  mean cross-entropy over the minibatch
               dW_l = dz_l^T h_{l-1},  db_l = sum_B dz_l              (K, out_l, in_l), (K, out_l)
               dz_{l-1} = (dz_l W_l) * 1[h_{l-1} > 0]                 (the data gradient of the first layer is
                                                                       never formed: nothing needs it)

The SGD step (``sgd=(lr, weight_decay)``) folds the weight gradient into the product that forms it:
``W - lr (dW + wd W) = baddbmm((1 - lr wd) W, dz^T, h, alpha=-lr)``, so the gradient of the large first layer is
never written out. ``prox=(lam, anchor)`` adds Ditto's proximal term lam_k (W - anchor) to the gradient of client
k (Li et al. 2021; FedHDP Alg. 2): ``W (1 - lr (wd + lam_k)) + lr lam_k anchor`` before the product.

Ditto's sets step side by side (:func:`side_by_side`, :func:`sgd_steps_side_by_side`), and, where a client's
inputs are zero outside its support (MNIST's pixels), on first layers packed by the clients' supports
(:func:`pack_columns`, :func:`sgd_steps_packed`, :func:`unpack_columns`). Where each client has few training rows
against the packed width (FedHDP's MNIST clients: ~27 rows, ~460 columns), a round's changes to the first layer are
kept as coefficients of those rows (:class:`Dual`, :func:`look_up_rows`): a minibatch's rows are some of them, so
its products are read off their products with the round's starting weights and with each other.

The numbers differ from the module's by float32 summation order only (tests: gradients and steps against autograd
in float64, and the engine's histories with and without this path).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedrepro.learning.models import MLP

Params = dict[str, Tensor]


def supports(model: nn.Module) -> bool:
    """Whether this module computes ``model``'s function: an :class:`MLP` whose layers all have biases."""
    return isinstance(model, MLP) and all(layer.bias is not None for layer in (*model.hidden, model.out))


def layer_names(model: MLP) -> list[tuple[str, str]]:
    """(weight, bias) parameter names of each layer, input side first."""
    names = [f"hidden.{i}" for i in range(len(model.hidden))] + ["out"]
    return [(f"{n}.weight", f"{n}.bias") for n in names]


def logits(model: MLP, params: Params, x: Tensor) -> Tensor:
    """One client's logits (params without the client axis, x (B, ...)): the module's function, vmappable."""
    h = x.flatten(1)
    layers = layer_names(model)
    for w, b in layers[:-1]:
        h = F.relu(F.linear(h, params[w], params[b]))
    w, b = layers[-1]
    return F.linear(h, params[w], params[b])


def forward(model: MLP, params: Params, x: Tensor, start: int = 0) -> tuple[Tensor, list[Tensor]]:
    """Logits (K, B, C) of stacked params for x (K, B, ...) and every layer's input (h_0 .. h_{L-1}). ``start``:
    x is already h_{start-1} (the layers below it were computed elsewhere) and the inputs list starts there."""
    h = x.flatten(2)
    inputs = []
    layers = layer_names(model)
    for i, (w, b) in enumerate(layers[start:], start):
        inputs.append(h)
        z = torch.baddbmm(params[b].unsqueeze(1), h, params[w].transpose(1, 2))
        h = z.clamp_min_(0) if i < len(layers) - 1 else z
    return h, inputs


def ce_grads(
    model: MLP,
    params: Params,
    x: Tensor,
    y: Tensor,
    sgd: tuple[float, float] | None = None,
    prox: tuple[Tensor, Params] | None = None,
    inplace: bool = False,
) -> tuple[Params, Tensor]:
    """Every client's gradient of its minibatch's mean cross-entropy and the losses: x (K, B, ...), y (K, B) ->
    (grads name -> (K, *shape), losses (K,)), the same as ``vmap(grad_and_value(cross_entropy(module(x), y)))``.

    ``sgd=(lr, weight_decay)``: return the parameters after one SGD step instead of the gradients,
    ``p - lr (g + weight_decay p)``; with ``prox=(lam (K,), anchor)`` (anchor: one parameter set, no client axis)
    ``p - lr (g + weight_decay p + lam_k (p - anchor))``. ``inplace``: the step overwrites ``params`` (and returns
    them): for a caller that owns them and drops the old values, it saves writing a second copy of every client's
    parameters per step (measured: a step of 100 clients of the 784-50-10 network 3.6 -> 2.8 ms on 2 threads).
    Otherwise the inputs are not modified."""
    if prox is not None and sgd is None:
        raise ValueError("prox needs sgd: the proximal term is part of the step")
    out, inputs = forward(model, params, x)
    result, losses, _ = _backward(model, params, out, inputs, y, sgd, prox, inplace)
    return {k: result[k] for k in params}, losses


def _backward(
    model: MLP,
    params: Params,
    out: Tensor,
    inputs: list[Tensor],
    y: Tensor,
    sgd: tuple[float, float] | None,
    prox: tuple[Tensor, Params] | None,
    inplace: bool,
    stop: int = 0,
) -> tuple[Params, Tensor, Tensor | None]:
    """The backward pass from the logits ``out`` down to layer ``stop``: (each of those layers' gradients, or its
    parameters after the step, the losses, and the gradient of z_{stop-1}: None for stop = 0). ``inputs[i]`` is
    layer i's input h_{i-1}."""
    K, B = y.shape
    # over dim 1 of the (K, C, B) view: PyTorch's CPU kernel over a last dim of a few classes runs ~4x slower
    log_q = torch.log_softmax(out.transpose(1, 2), 1).transpose(1, 2)
    losses = log_q.gather(-1, y[:, :, None]).mean((1, 2)).neg_()
    dz = log_q.exp_()
    dz.scatter_add_(-1, y[:, :, None], dz.new_full((1, 1, 1), -1.0).expand(K, B, 1))
    dz.div_(B)
    result: Params = {}
    layers = layer_names(model)
    for i in range(len(layers) - 1, stop - 1, -1):
        w, b = layers[i]
        W, h = params[w], inputs[i]
        # the data gradient first: it reads W before the step overwrites or replaces it
        dz_below = torch.bmm(dz, W).mul_(h > 0) if i > 0 else None
        db = dz.sum(1)
        if sgd is None:
            result[w], result[b] = torch.bmm(dz.transpose(1, 2), h), db
        else:
            result[w] = _step(W, sgd, prox, w, inplace, product=(dz.transpose(1, 2), h))
            result[b] = _step(params[b], sgd, prox, b, inplace, grad=db)
        dz = dz_below
    return result, losses, dz


def side_by_side(model: MLP, sets: list[Params]) -> list[Params]:
    """Parameter sets of the same clients (stacked over the same K), their first layers' weights copied side by
    side into one (K, S x out, in) tensor and their biases into one (K, S x out): set s holds rows s x out to
    (s + 1) x out of each, as views, so :func:`sgd_steps_side_by_side` can take the layer of all S sets as one
    GEMM. The other parameters are the sets' own; the given tensors are not modified."""
    w, b = layer_names(model)[0]
    n = sets[0][w].shape[1]
    weights, biases = torch.cat([p[w] for p in sets], 1), torch.cat([p[b] for p in sets], 1)
    cols = [slice(s * n, (s + 1) * n) for s in range(len(sets))]
    return [{**p, w: weights[:, c], b: biases[:, c]} for p, c in zip(sets, cols)]


def _as_one(tensors: list[Tensor]) -> Tensor | None:
    """The tensors (views of the same shape and strides) as one view, concatenated along dim 1, where they lie
    side by side in one storage as :func:`side_by_side` (and slices of its clients' rows) leaves them; else None."""
    t0 = tensors[0]
    step = t0.shape[1] * t0.stride(1)
    for s, t in enumerate(tensors):
        same = t.shape == t0.shape and t.stride() == t0.stride() and t.dtype == t0.dtype
        if not (same and t.untyped_storage().data_ptr() == t0.untyped_storage().data_ptr()):
            return None
        if t.storage_offset() != t0.storage_offset() + s * step:
            return None
    return t0.as_strided((t0.shape[0], len(tensors) * t0.shape[1], *t0.shape[2:]), t0.stride())


def sgd_steps_side_by_side(
    model: MLP,
    sets: list[Params],
    x: Tensor,
    y: Tensor,
    lr: float,
    decays: list[tuple[float, tuple[Tensor, Params] | None]],
) -> list[Tensor] | None:
    """One SGD step of each of S parameter sets of the same K clients on the same minibatch x (K, B, ...), y (K, B),
    in place: set s as ``ce_grads(sgd=(lr, weight_decay_s), prox=prox_s, inplace=True)`` with ``decays[s] =
    (weight_decay_s, prox_s)``, each set's losses returned. Their first layer (784 -> 50 of FedHDP's network: ~99%
    of its FLOPs; Ditto's sets read the same minibatch) is taken as one GEMM of width S x out, forward and in the
    step, where :func:`side_by_side` laid the sets out; otherwise nothing is done and None returned.

    The same arithmetic as the sets' own steps, in another order: each set's decay and pull to its anchor,
    ``p (1 - lr wd_s) - lr lam_s (p - anchor_s)``, is applied before the shared product subtracts ``lr g``
    (tests: equal to the sets' own steps in float64)."""
    layers = layer_names(model)
    if len(layers) < 2:
        return None
    w1, b1 = layers[0]
    weights, biases = _as_one([p[w1] for p in sets]), _as_one([p[b1] for p in sets])
    if weights is None or biases is None:
        return None
    n = sets[0][w1].shape[1]
    h0 = x.flatten(2)
    h1 = torch.baddbmm(biases.unsqueeze(1), h0, weights.transpose(1, 2)).clamp_min_(0)  # (K, B, S x out)
    dz1 = torch.empty_like(h1)
    losses = []
    for s, (p, (wd, prox)) in enumerate(zip(sets, decays)):
        cols = slice(s * n, (s + 1) * n)
        out, inputs = forward(model, p, h1[:, :, cols], start=1)
        _, loss, dz = _backward(model, p, out, [h0, *inputs], y, (lr, wd), prox, inplace=True, stop=1)
        dz1[:, :, cols] = dz
        _step(p[b1], (lr, wd), prox, b1, True, grad=dz.sum(1))
        _step(p[w1], (lr, wd), prox, w1, True)  # the decay and the pull; the shared product below adds - lr g
        losses.append(loss)
    weights.baddbmm_(dz1.transpose(1, 2), h0, alpha=-lr)
    return losses


#: a set's stored first layer is rescaled into its true values once its scale falls below this (Packed.scale)
REBASE = 2.0**-14
#: columns are packed only where the widest selected client's support is at most this fraction of the inputs
PACK_MAX = 0.8
#: a packed step's products take the clients' training rows (Dual) where there are at most this fraction of its width
DUAL_MAX = 0.5


@dataclass
class Packed:
    """The first layer of S parameter sets laid side by side (:func:`side_by_side`), each client's input columns
    permuted so that its support, the inputs its training examples can make nonzero, comes first (:func:`pack_columns`).
    Set s's true weights are ``scale[s] * stored + shift[s] * anchor_s``, in client k's column order ``perm[k]``:
    Ditto's pull to the anchor and a weight decay scale the whole layer, so they are kept as two numbers instead of a
    pass over the weights at every step. A step forms its products over the first ``width`` columns only: outside a
    client's support its inputs are zero, so its loss gradient is too (FedHDP's MNIST clients: about half of the 784
    pixels)."""

    weights: Tensor  # (K, S x out, F): the sets' first-layer weights, as side_by_side laid them out
    perm: Tensor  # (K, F): client k's columns in this order
    width: int  # every client's support lies in perm[:, :width]
    scale: list[float]
    shift: list[float]
    anchors: list[Tensor | None]  # set s's anchor (out, F), in the inputs' own order, once a step pulled to one
    # each client's R training rows, packed (K, R, width), and an anchor A (out, F) with their products x A^T
    # (K, R, out) (:func:`look_up_rows`): a step given its minibatch's ``rows`` takes its inputs and their x A^T
    # from these instead of gathering the packed columns and forming x A^T, where a set's anchor is that A
    inputs_rows: Tensor | None = None
    anchor_rows: tuple[Tensor, Tensor] | None = None
    dual: Dual | None = None  # the weights' changes kept as coefficients of the clients' rows (look_up_rows)


@dataclass
class Dual:
    """Stored first-layer weights of the round kept as V = V0 - C^T X (:func:`look_up_rows`): V0 the stored weights
    when the round's steps began (left unchanged until :func:`unpack_columns`), X (K, R, width) each client's R
    training rows in packed column order (``Packed.inputs_rows``), C (K, R, S x out) the coefficients the steps add
    to. A step's loss gradient dz^T x changes V only in the span of its minibatch's rows, which are rows of X, so it
    adds lr dz (/ c) to those rows' coefficients; its inputs' products are x V^T = x V0^T - (x X^T) C, read off
    ``base`` = X V0^T and ``gram`` = X X^T. A step then takes products over the R rows instead of the width."""

    gram: Tensor  # (K, R, R): X X^T
    base: Tensor  # (K, R, S x out): X V0^T
    coef: Tensor  # (K, R, S x out): C


def pack_columns(model: MLP, sets: list[Params], support: Tensor) -> Packed | None:
    """The first layers of ``sets`` (laid out by :func:`side_by_side`) packed in place by their clients' supports
    (``support``: (K, F) bool, the inputs each client's examples can make nonzero): step them with
    :func:`sgd_steps_packed` and read them again after :func:`unpack_columns`. None (nothing done) where the layers are
    not laid side by side, or where the widest support, rounded up to 16 columns, exceeds :data:`PACK_MAX` of the
    inputs (too little to leave out)."""
    w1, _ = layer_names(model)[0]
    weights = _as_one([p[w1] for p in sets])
    if weights is None or support.shape != (weights.shape[0], weights.shape[2]):
        return None
    F_in = weights.shape[2]
    widest = int(support.sum(1).max()) if support.numel() else 0
    width = min(F_in, -(-widest // 16) * 16)
    if width > PACK_MAX * F_in:
        return None
    perm = torch.argsort((~support).to(torch.uint8), dim=1, stable=True)  # the support first, each in input order
    weights.copy_(torch.gather(weights, 2, perm[:, None, :].expand_as(weights)))
    n = len(sets)
    return Packed(weights, perm, width, [1.0] * n, [0.0] * n, [None] * n)


def unpack_columns(packed: Packed) -> None:
    """In place: the packed first layers back in the inputs' order and at their true values (the sets' own
    tensors, views of ``packed.weights``, hold them again)."""
    W = packed.weights
    if packed.dual is not None:  # V = V0 - C^T X
        W[:, :, : packed.width].baddbmm_(packed.dual.coef.transpose(1, 2), packed.inputs_rows, alpha=-1)
        packed.dual = None
    n = W.shape[1] // len(packed.scale)
    inverse = torch.argsort(packed.perm, dim=1)
    true = torch.gather(W, 2, inverse[:, None, :].expand_as(W))
    for s, (c, e, a) in enumerate(zip(packed.scale, packed.shift, packed.anchors)):
        rows = true[:, s * n : (s + 1) * n]
        if c != 1:
            rows.mul_(c)
        if e:
            rows.add_(a, alpha=e)
    W.copy_(true)


def sgd_steps_packed(
    model: MLP,
    sets: list[Params],
    packed: Packed,
    x: Tensor,
    y: Tensor,
    lr: float,
    decays: list[tuple[float, tuple[Tensor, Params] | None]],
    rows: Tensor | None = None,
) -> list[Tensor]:
    """:func:`sgd_steps_side_by_side` on first layers packed by :func:`pack_columns`: the same step in real
    arithmetic, its first-layer products over the clients' supports only. Set s's true first layer W_s = c_s V_s +
    e_s A_s (V_s stored, A_s its anchor): its pre-activation is c_s (x V_s^T) + e_s (x A_s^T) + b_s, and the step
    ``W_s (1 - lr (wd_s + lam_s)) + lr lam_s A_s - lr g`` is c_s' = (1 - lr (wd_s + lam_s)) c_s, e_s' = (1 - lr
    (wd_s + lam_s)) e_s + lr lam_s and V_s - (lr / c_s') g, so only the loss gradient g touches the weights (one
    product for all sets). One lambda for every client of a set (a scalar decay). ``rows`` (K, B): the minibatch's
    rows among the clients' training rows of :func:`look_up_rows`, whose packed inputs and x A^T the step then looks
    up. Each set's losses returned."""
    w1, b1 = layer_names(model)[0]
    K, B = y.shape
    if rows is not None and rows.shape != (K, B):
        raise ValueError(f"rows {tuple(rows.shape)}: one per minibatch example, {(K, B)}")
    dual = packed.dual
    if dual is not None and rows is None:
        raise ValueError("the round's changes are kept as coefficients of the clients' rows: a step needs its rows")
    n = sets[0][w1].shape[1]
    h0 = x.flatten(2)
    W = packed.weights[:, :, : packed.width]
    if dual is not None:  # every set's x V_s^T = x V0^T - (x X^T) C
        z1 = torch.baddbmm(_looked_up(dual.base, rows), _looked_up(dual.gram, rows), dual.coef, beta=1, alpha=-1)
    else:
        if rows is not None and packed.inputs_rows is not None:
            xc = _looked_up(packed.inputs_rows, rows)
        else:
            xc = torch.gather(h0, 2, packed.perm[:, None, : packed.width].expand(K, B, packed.width))
        z1 = torch.bmm(xc, W.transpose(1, 2))  # (K, B, S x out): every set's x V_s^T
    dz1 = torch.empty_like(z1)
    through_anchor: dict[int, Tensor] = {}  # id of an anchor -> x A^T
    losses = []
    for s, (p, (wd, prox)) in enumerate(zip(sets, decays)):
        cols = slice(s * n, (s + 1) * n)
        c, e = packed.scale[s], packed.shift[s]
        lam = 0.0
        if prox is not None:
            lam = one_lambda(prox[0])
            if lam is None:
                raise ValueError("packed columns need one lambda for every client of a set")
            anchor = prox[1][w1]
            if packed.anchors[s] is None:
                packed.anchors[s] = anchor
            elif packed.anchors[s] is not anchor:
                raise ValueError(f"set {s}: its anchor changed within the round its columns were packed for")
        h = z1[:, :, cols]
        if c != 1:
            h.mul_(c)
        if e:
            a = packed.anchors[s]
            if id(a) not in through_anchor:
                through_anchor[id(a)] = _through_anchor(packed, a, h0, rows)
            h.add_(through_anchor[id(a)], alpha=e)
        h = h.add_(p[b1].unsqueeze(1)).clamp_min_(0)
        out, inputs = forward(model, p, h, start=1)
        _, loss, dz = _backward(model, p, out, [h0, *inputs], y, (lr, wd), prox, inplace=True, stop=1)
        _step(p[b1], (lr, wd), prox, b1, True, grad=dz.sum(1))
        beta = 1 - lr * (wd + lam)
        c, e = beta * c, beta * e + lr * lam
        if abs(c) < REBASE:  # the stored weights rescaled to their true values before the product adds to them
            _rebase(packed, s, cols, c, e)
            c, e = 1.0, 0.0
        dz1[:, :, cols] = dz if c == 1 else dz / c
        packed.scale[s], packed.shift[s] = c, e
        losses.append(loss)
    if dual is not None:  # the minibatch's rows' coefficients, lr dz / c each (a row drawn twice adds both)
        R, width = dual.coef.shape[1:]
        dual.coef.view(K * R, width).index_add_(0, _flat(rows, R), dz1.reshape(K * B, width), alpha=lr)
    else:
        W.baddbmm_(dz1.transpose(1, 2), xc, alpha=-lr)
    return losses


def _rebase(packed: Packed, s: int, cols: slice, c: float, e: float) -> None:
    """Set s's stored weights V <- c V + e A (its true weights: then c = 1, e = 0); with :class:`Dual` rows, V0 and
    its products X V0^T take the same step and the coefficients the scale."""
    stored = packed.weights[:, cols]
    stored.mul_(c)
    a = packed.anchors[s]
    if e:
        stored.add_(a[:, packed.perm].transpose(0, 1), alpha=e)
    if packed.dual is not None:
        base = packed.dual.base[:, :, cols].mul_(c)
        if e:
            if packed.anchor_rows is None or packed.anchor_rows[0] is not a:
                raise ValueError(f"set {s}: rows kept as coefficients need the anchor's products of the rows")
            base.add_(packed.anchor_rows[1], alpha=e)
        packed.dual.coef[:, :, cols].mul_(c)


def look_up_rows(model: MLP, packed: Packed, x: Tensor, anchor: Params | None = None) -> None:
    """Let :func:`sgd_steps_packed` look its minibatches up in each client's training rows x (K, R, ...) instead of
    computing from them at every step: their inputs in the packed column order (the columns a step takes) and, with
    ``anchor`` (one parameter set; a set whose anchor it is), their product with its first layer, x A^T. Once a
    round: the clients' R rows are a few times a step's B (FedHDP's MNIST clients: ~27 rows, B = 20, 50 steps).
    Where R is at most :data:`DUAL_MAX` of the packed width, the stored weights' changes are kept as coefficients of
    the rows (:class:`Dual`): a step's products then take R columns, not the width (nor a pass over the weights)."""
    h = x.flatten(2)
    K, R, _ = h.shape
    packed.inputs_rows = torch.gather(h, 2, packed.perm[:, None, : packed.width].expand(K, R, packed.width))
    if anchor is not None:
        a = anchor[layer_names(model)[0][0]]
        packed.anchor_rows = a, torch.matmul(h, a.t())
    if R <= DUAL_MAX * packed.width and packed.scale == [1.0] * len(packed.scale):
        X = packed.inputs_rows
        base = torch.bmm(X, packed.weights[:, :, : packed.width].transpose(1, 2))
        packed.dual = Dual(torch.bmm(X, X.transpose(1, 2)), base, torch.zeros_like(base))


def _looked_up(table: Tensor, rows: Tensor) -> Tensor:
    """``table[k, rows[k, b]]`` for every k and b: (K, B, d) of a (K, R, d) table, as whole-row copies."""
    K, R, d = table.shape
    return table.reshape(K * R, d).index_select(0, _flat(rows, R)).reshape(*rows.shape, d)


def _flat(rows: Tensor, R: int) -> Tensor:
    """Client k's row ``rows[k, b]`` of R as a row of the (K x R, ...) table, for every k and b, flattened."""
    return (rows + torch.arange(len(rows), device=rows.device)[:, None] * R).reshape(-1)


def _through_anchor(packed: Packed, a: Tensor, h0: Tensor, rows: Tensor | None) -> Tensor:
    """x A^T (K, B, out) of the minibatch h0 (K, B, F): looked up where ``packed.anchor_rows`` holds A's products
    of the clients' training rows and ``rows`` says which, else one GEMM."""
    if rows is None or packed.anchor_rows is None or packed.anchor_rows[0] is not a:
        return torch.matmul(h0, a.t())
    return _looked_up(packed.anchor_rows[1], rows)


def one_lambda(lam: Tensor) -> float | None:
    """The lambda every client of ``lam`` (K,) shares: the step's decay is then a scalar; None where they differ
    (or there are none)."""
    return float(lam[0]) if lam.numel() and bool(lam.min() == lam.max()) else None


def _step(
    p: Tensor,
    sgd: tuple[float, float],
    prox: tuple[Tensor, Params] | None,
    name: str,
    inplace: bool,
    product: tuple[Tensor, Tensor] | None = None,
    grad: Tensor | None = None,
) -> Tensor:
    """``p - lr (g + wd p + lam_k (p - anchor))`` with the loss gradient g given as ``grad`` or as the batched
    product ``product[0] @ product[1]``, formed inside ``baddbmm_`` and never written out; with neither, g = 0 (the
    decay and the pull alone). One lambda for every client (FedHDP's lambda_p = lambda_np) keeps the
    decay a scalar, folded into the product's beta."""
    lr, wd = sgd
    t = p if inplace else p.clone()

    def descend(beta: float) -> Tensor:  # beta t - lr g, in t
        if product is not None:
            return t.baddbmm_(*product, beta=beta, alpha=-lr)
        if grad is not None:
            return t.mul_(beta).sub_(grad, alpha=lr)
        return t if beta == 1 else t.mul_(beta)

    if prox is None:
        return descend(1 - lr * wd)
    lam, anchor = prox
    a = anchor[name].unsqueeze(0)
    lam0 = one_lambda(lam)
    if lam0 is not None:
        if product is None and grad is None and not wd:
            return t.lerp_(a.expand_as(t), lr * lam0)  # one pass over the weights: t + lr lam (anchor - t)
        return descend(1 - lr * (wd + lam0)).add_(a, alpha=lr * lam0)
    lam = lam.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
    t.mul_((1 - lr * wd) - lr * lam)
    return descend(1.0).addcmul_(lam, a, value=lr)


__all__ = [
    "Dual",
    "Packed",
    "ce_grads",
    "forward",
    "layer_names",
    "logits",
    "look_up_rows",
    "one_lambda",
    "pack_columns",
    "sgd_steps_packed",
    "sgd_steps_side_by_side",
    "side_by_side",
    "supports",
    "unpack_columns",
]
