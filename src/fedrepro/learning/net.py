"""Stacked per-client parameters and the functional, client-batched view of a model the engine runs.

Per-client parameters are *stacked*: a dict name -> tensor (n_clients, *param_shape). :class:`Net` runs a function
written for one client over every selected client at once (``torch.vmap``), or in a Python loop
(``vectorize=False``, the reference path). The helpers below index, update and average stacked parameters. Kept
apart from the engine so that checkpoints (which rebuild a Net rather than save it) need not import the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from fedrepro.learning import batched_cnn, batched_mlp

if TYPE_CHECKING:
    from fedrepro.learning.data import ClientData

Params = dict[str, Tensor]


class Net:
    """Functional, client-batched view of a template module (its own parameters are only the initialization).

    ``gemm``: compute the model with its hand-written client-batched formulation (:data:`FORMULATIONS`): a
    :class:`~fedrepro.learning.models.ConvNet` by :mod:`fedrepro.learning.batched_cnn` (forward and backward as
    batched matrix products, faster on CPU than the grouped convolutions ``vmap`` makes of ``F.conv2d``), an
    :class:`~fedrepro.learning.models.MLP` by :mod:`fedrepro.learning.batched_mlp`; the engine's cross-entropy
    steps then take the formulation's fused gradient (benchmarks/RESULTS.md). Default (None): on CPU, for the
    models one supports; the CUDA path keeps the module's own ops (cuDNN; the formulations are untimed on a GPU).
    The per-client loop (``vectorize=False``) always runs the module's own forward and autograd: it is the
    reference.

    ``loss(logits (B, n_classes), y) -> scalar``: the protocol's training loss of one client's minibatch, which
    :meth:`loss` and the engine's steps (``client_grads``, ``client_sgd``) differentiate; default (None) the mean
    cross-entropy of integer labels. A protocol with another loss (PPSGD's squared loss) sets it; the hand-written
    formulations compute only the cross-entropy, so they are off then.

    ``train_data``: the clients' training data (a :class:`~fedrepro.learning.data.ClientData`), where a formulation
    may take something from it ahead of the steps; the engine sets it on the batched MLP formulation
    (``engine.train(input_support=True)``). :meth:`input_support` then gives each client's input support, and during
    each local step ``minibatch_rows`` holds the dataset rows of the step's minibatch (:meth:`drawing`)."""

    def __init__(
        self,
        model: nn.Module,
        vectorize: bool = True,
        chunk_size: int | None = None,
        gemm: bool | None = None,
        loss: Callable[[Tensor, Tensor], Tensor] | None = None,
    ):
        self.model = model
        self.vectorize = vectorize
        self.chunk_size = chunk_size
        self.loss_fn = loss
        formulation = next((f for f in FORMULATIONS if f.supports(model)), None) if loss is None else None
        if gemm and loss is not None:
            raise ValueError(
                "gemm=True: the batched formulations compute the cross-entropy only, not a protocol's loss"
            )
        if gemm is None:
            gemm = formulation is not None and all(p.device.type == "cpu" for p in model.parameters())
        elif gemm and formulation is None:
            raise ValueError(
                f"gemm=True: {type(model).__name__} is not a model a batched formulation supports "
                "(a ConvNet or an MLP with biases)"
            )
        self.gemm = gemm
        self.formulation = formulation if gemm else None
        self.train_data: ClientData | None = None
        self.minibatch_rows: np.ndarray | None = None
        self._support: Tensor | None = None

    def input_support(self) -> Tensor | None:
        """Each client's input support, the (n_clients, features) bool of the inputs its training examples can make
        nonzero (``train_data``'s :meth:`~fedrepro.learning.data.ClientData.nonzero_features`, asked once), or None
        where the net has no ``train_data``."""
        if self._support is None and self.train_data is not None:
            self._support = self.train_data.nonzero_features("train")
        return self._support

    @contextmanager
    def drawing(self, rows: np.ndarray) -> Iterator[None]:
        """``minibatch_rows`` set to ``rows`` (K, B), the dataset rows of the minibatch the local step inside trains
        on, and back to None after it: what the engine wraps each local step in."""
        self.minibatch_rows = rows
        try:
            yield
        finally:
            self.minibatch_rows = None

    def params(self) -> Params:
        """A detached copy of the template's parameters (one client, no client axis)."""
        return {k: v.detach().clone() for k, v in self.model.named_parameters()}

    def replicate(self, n: int) -> Params:
        """The template's parameters stacked ``n`` times: name -> (n, *shape)."""
        return stack(self.params(), n)

    def logits(self, params: Params, x: Tensor) -> Tensor:
        """Forward of one client: params without client axis, x (B, *feature_shape) -> (B, n_classes)."""
        if self.formulation is not None and self.vectorize:
            return self.formulation.logits(self.model, params, x)
        return functional_call(self.model, params, (x,))

    def loss(self, params: Params, x: Tensor, y: Tensor) -> Tensor:
        """The training loss of one client's minibatch (params without client axis, x (B, ...), y (B, ...))."""
        logits = self.logits(params, x)
        return F.cross_entropy(logits, y) if self.loss_fn is None else self.loss_fn(logits, y)

    def map(self, fn: Callable, *args: Any) -> Any:
        """``fn`` applied per client over axis 0 of every tensor in ``args`` (pytrees); outputs stacked."""
        if self.vectorize:
            return torch.vmap(fn, chunk_size=self.chunk_size)(*args)
        leaves, _ = tree_flatten(args)
        outs = [fn(*tree_map(lambda a, i=i: a[i], args)) for i in range(leaves[0].shape[0])]
        flat, spec = zip(*(tree_flatten(o) for o in outs))
        return tree_unflatten([torch.stack(col) for col in zip(*flat)], spec[0])


#: the hand-written client-batched formulations, each with ``supports(model)``, ``logits`` and ``ce_grads``
FORMULATIONS = (batched_cnn, batched_mlp)


def stack(params: Params, n: int) -> Params:
    """Copies of one client's parameters for ``n`` clients (materialized, so they can be updated in place)."""
    return {k: v.unsqueeze(0).repeat(n, *([1] * v.dim())) for k, v in params.items()}


def expand(params: Params, n: int) -> Params:
    """A read-only view of one parameter set as ``n`` clients (no copy)."""
    return {k: v.expand(n, *v.shape) for k, v in params.items()}


def take(params: Params, idx: Tensor) -> Params:
    return {k: v[idx] for k, v in params.items()}


def put(params: Params, idx: Tensor, values: Params) -> None:
    """In place: ``params[k][idx] = values[k]`` for every parameter."""
    for k, v in params.items():
        v[idx] = values[k]


def param_bytes(params: Params) -> int:
    """Bytes of the tensors of one parameter set."""
    return sum(v.numel() * v.element_size() for v in params.values())


def rows_of(params: Params, rows: slice) -> Params:
    """Views of the clients at positions ``rows``: a step that writes into them in place writes into ``params``."""
    return {k: v[rows] for k, v in params.items()}


def write_rows(params: Params, rows: slice, values: Params) -> None:
    """In place: ``params[k][rows] = values[k]``, skipped where ``values[k]`` already is that view."""
    for k, v in params.items():
        dst = v[rows]
        if not (values[k].data_ptr() == dst.data_ptr() and values[k].stride() == dst.stride()):
            dst.copy_(values[k])


def mean(params: Params) -> Params:
    """Average over the client axis (server aggregation (1/K) sum_i)."""
    return {k: v.mean(0) for k, v in params.items()}


def sgd(params: Params, grads: Params, lr: float | Tensor, weight_decay: float = 0.0) -> Params:
    """p - lr (g + weight_decay p) (PyTorch SGD without momentum)."""
    return {k: p - lr * (grads[k] + weight_decay * p) for k, p in params.items()}


def split_batches(x: Tensor, y: Tensor, k: int) -> list[tuple[Tensor, Tensor]]:
    """Split stacked minibatches (n, k*B, ...) into ``k`` disjoint minibatches (n, B, ...) along the row axis."""
    if x.shape[1] % k:
        raise ValueError(f"{x.shape[1]} rows do not split into {k} minibatches")
    return list(zip(x.chunk(k, dim=1), y.chunk(k, dim=1)))
