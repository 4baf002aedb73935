"""Federated training engine that simulates many clients in one batched computation.

Per-client parameters are *stacked* (fedrepro.learning.net): a dict name -> tensor (n_clients, *param_shape). A
client's computation is written once as a function of one client's tensors (params, minibatch (B, ...), ...) and
:meth:`Net.map` runs it
for all selected clients at once with ``torch.vmap`` (``torch.func.functional_call`` for the forward,
``torch.func.grad``/``vjp`` for gradients), batches shaped (n_sel, B, *feature_shape). ``vectorize=False`` runs
the same function in a Python loop over clients (the reference path of the equivalence tests and the benchmark);
:func:`loop_grads` is an independent plain-autograd reference for the gradients.

Round structure (Alg. 2 of Ozkara et al. 2023 and FedAvg share it): iterations t = 0..T-1, a synchronization
period every ``tau`` iterations. At the start of a period the server samples K of the m clients without
replacement (:meth:`Algorithm.start_round`, broadcast), the selected clients take ``tau`` local steps
(:meth:`Algorithm.local_step`, one fresh minibatch per client and step), then :meth:`Algorithm.sync` aggregates.
The step size is ``lr * lr_decay ** epoch`` with ``epoch = t // iters_per_epoch`` (paper: lr x 0.99 per epoch).

GAPs / defaults:
- ``iters_per_epoch`` defaults to ceil(median train count / batch_size) ("vary the batch size so that each
  epoch consists of 60 iterations": 1200 samples, B = 20 -> 60).
- ``epochs`` counts iterations of the sampled clients (docs/notes/adaped.md section 7.3): T = epochs * iters_per_epoch,
  rounds = ceil(T / tau).
- Metric: accuracy of each client's deployed model on its own test split; ``test_acc`` is the unweighted mean
  over clients with test data, ``test_acc_weighted`` the sample-weighted one (docs/notes/adaped.md section 7.10
  default).
- Randomness: one numpy stream (fedrepro.seeding.rng_for) for client sampling and minibatches, one torch
  Generator for algorithm noise (DP), the model initialized under ``torch.manual_seed(seed)``; evaluation-time
  randomness (fine-tuning minibatches) uses its own stream per round, so ``eval_every`` never changes training.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import ctypes
import ctypes.util
import functools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value
from torch.nn import functional as F

from fedrepro.data.fedformat import FederatedDataset
from fedrepro.learning import batched_cnn, batched_mlp
from fedrepro.learning.checkpoint import Checkpointer, pack, restore
from fedrepro.learning.data import ClientData
from fedrepro.learning.net import Net, Params, sgd
from fedrepro.registry import Registry
from fedrepro.seeding import rng_for

# ------------------------------------------------------------------------------------------------- gradients


class Released:
    """A local step's minibatches under a private protocol whose mechanism is per local step (AdaPeD's DP-FedAvg:
    each client's minibatch gradient clipped to C and noised with N(0, (zC)^2), the accountant counting one such
    release per sampled client and step). A user's method (fedrepro.compare) gets this in place of ``x`` (``y`` is
    None): it reaches its clients' data only through :func:`client_grads` / :func:`client_sgd`, which return the
    mechanism applied to the gradients, once per step. Anything else it does with the handle fails, and a second
    release in one step is refused: it would spend privacy the accountant does not count."""

    __slots__ = ("_x", "_y", "_mechanism", "_generator", "_spent")

    def __init__(self, x: Tensor, y: Tensor, mechanism, generator: torch.Generator):
        self._x, self._y, self._mechanism, self._generator, self._spent = x, y, mechanism, generator, False

    def __repr__(self) -> str:
        return f"Released({self._mechanism})"

    def release(self, net: Net, params: Params) -> tuple[Params, Tensor]:
        """The clipped and noised per-client gradients of this step's minibatches at ``params``, and the losses."""
        if self._spent:
            raise RuntimeError(
                "a local step's minibatch is released once under this private protocol (one clipped, noised "
                "gradient per client and step is what its accountant counts): call client_grads or client_sgd "
                "once per local_step"
            )
        self._spent = True
        grads, losses = client_grads(net, params, self._x, self._y)
        return self._mechanism(grads, self._generator), losses


def client_grads(net: Net, params: Params, x: Tensor | Released, y: Tensor | None) -> tuple[Params, Tensor]:
    """Per-client minibatch gradients of the training loss (:meth:`Net.loss`: the cross-entropy unless the protocol
    sets another) and the losses: (grads (n, ...), losses (n,)). A model with a client-batched formulation
    (:attr:`Net.formulation`: the CNNs of :mod:`batched_cnn`, the MLPs of :mod:`batched_mlp`) takes its hand-written
    gradient; everything else ``grad_and_value`` of :meth:`Net.loss` per client. ``x`` a :class:`Released`: the
    protocol's mechanism applied to those gradients (``y`` unused)."""
    if isinstance(x, Released):
        return x.release(net, params)
    if net.formulation is not None and net.vectorize:
        return net.formulation.ce_grads(net.model, params, x, y)
    return net.map(grad_and_value(lambda p, xb, yb: net.loss(p, xb, yb)), params, x, y)


def client_sgd(
    net: Net,
    params: Params,
    x: Tensor | Released,
    y: Tensor | None,
    lr: float | Tensor,
    weight_decay: float = 0.0,
    prox: tuple[Tensor, Params] | None = None,
    inplace: bool = False,
) -> tuple[Params, Tensor]:
    """One SGD step of every client on its minibatch: (parameters after the step, losses). The same arithmetic as
    :func:`client_grads` then :func:`sgd`, each client's update done while its gradients are still in cache
    (inside the mapped step, or the formulation's fused step). ``prox=(lam (n,), anchor)`` adds the proximal term
    lam_i (p - anchor) of Ditto's personal step to client i's gradient (anchor: one parameter set, no client
    axis). ``inplace``: the caller owns ``params`` and drops them for the result, which may then be written into
    them (the MLP formulation does; elsewhere the result is new tensors). ``x`` a :class:`Released`: the step takes
    the protocol's clipped and noised gradients, the proximal term and weight decay added after the noise (they
    depend on no client data beyond what was released)."""
    if isinstance(x, Released):
        grads, losses = x.release(net, params)
        return _step(params, grads, lr, weight_decay, prox), losses
    if net.formulation is batched_mlp and net.vectorize and not isinstance(lr, Tensor):
        return batched_mlp.ce_grads(net.model, params, x, y, sgd=(lr, weight_decay), prox=prox, inplace=inplace)
    if net.formulation is batched_cnn and net.vectorize and prox is None and not isinstance(lr, Tensor):
        return batched_cnn.ce_grads(net.model, params, x, y, sgd=(lr, weight_decay))
    if net.formulation is not None and net.vectorize:
        grads, losses = net.formulation.ce_grads(net.model, params, x, y)
        return _step(params, grads, lr, weight_decay, prox), losses

    if prox is None:

        def step(p: Params, xb: Tensor, yb: Tensor) -> tuple[Params, Tensor]:
            g, loss = grad_and_value(lambda q: net.loss(q, xb, yb))(p)
            return sgd(p, g, lr, weight_decay), loss

        return net.map(step, params, x, y)
    lam, anchor = prox

    def prox_step(p: Params, xb: Tensor, yb: Tensor, lam_i: Tensor) -> tuple[Params, Tensor]:
        g, loss = grad_and_value(lambda q: net.loss(q, xb, yb))(p)
        return _step(p, g, lr, weight_decay, (lam_i, anchor)), loss

    return net.map(prox_step, params, x, y, lam)


def _step(
    params: Params, grads: Params, lr: float | Tensor, weight_decay: float, prox: tuple[Tensor, Params] | None
) -> Params:
    """p - lr (g + lam (p - anchor)) - lr weight_decay p: :func:`sgd` with Ditto's proximal term (lam per client of
    the stacked ``params``, or a scalar for one client's)."""
    if prox is None:
        return sgd(params, grads, lr, weight_decay)
    lam, anchor = prox
    out = {}
    for k, p in params.items():
        lam_k = lam.reshape(-1, *([1] * (p.dim() - 1))) if lam.dim() else lam
        out[k] = p - lr * (grads[k] + lam_k * (p - anchor[k]) + weight_decay * p)
    return out


def loop_grads(model: nn.Module, params: Params, x: Tensor, y: Tensor) -> tuple[Params, Tensor]:
    """Reference for :func:`client_grads`: a Python loop over clients with plain autograd."""
    grads, losses = [], []
    for i in range(x.shape[0]):
        p = {k: v[i].detach().requires_grad_(True) for k, v in params.items()}
        loss = F.cross_entropy(functional_call(model, p, (x[i],)), y[i])
        grads.append(dict(zip(p, torch.autograd.grad(loss, list(p.values())))))
        losses.append(loss.detach())
    return {k: torch.stack([g[k] for g in grads]) for k in params}, torch.stack(losses)


# ------------------------------------------------------------------------------------------------ algorithms


class Diverged(ArithmeticError):
    """A method's training loss or deployed model is no longer finite (at this lr). Raised by the guard `compare`
    puts around a method from outside the package; a protocol whose lr grid may diverge (PPSGD's) reads it as that
    lr's run ending, never selected."""


@dataclass
class EvalContext:
    """What an algorithm may use to build its deployed models (e.g. fine-tuning on local training data)."""

    data: ClientData
    rng: np.random.Generator
    batch_size: int
    lr: float
    iters_per_epoch: int


# Every concrete algorithm, keyed by its ``name``: a subclass that sets ``name`` registers itself (see
# Algorithm.__init_subclass__); the paper-free ones live in this package, a paper declares its own ``ALGORITHMS``.
ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm",
    {
        "local": "fedrepro.learning.local",
        "fedavg": "fedrepro.learning.fedavg",
        "fedavg_ft": "fedrepro.learning.fedavg",
        "dp_fedavg_server": "fedrepro.learning.dp_fedavg",
        "dp_fedavg_adaptive": "fedrepro.learning.dp_fedavg_adaptive",
        "pfedme": "fedrepro.learning.pfedme",
        "perfedavg": "fedrepro.learning.perfedavg",
        "quped": "fedrepro.learning.quped",
        "fml": "fedrepro.learning.fml",
    },
    "ALGORITHMS",
)

#: Version of the public :class:`Algorithm` interface (README "Compare your method"): what a method outside the
#: package implements and what :func:`train` guarantees it. Raised when a member is added, removed or changes meaning;
#: tests/learning/test_algorithm_api.py fails until the README's list and this number follow the class.
#: 2: the steps differentiate the protocol's loss (Net.loss), and y may be a 0/1 label matrix (PPSGD's protocols).
#: 3: client_message / server_update (privacy by construction under PPSGD's protocols).
#: 4: under AdaPeD's private protocols local_step gets x as a Released (y None) and the constructor no dp=.
#: 5: under FedHDP's protocol client_message / server_update run by construction (HDP-FedAvg's release of messages).
#: 6: diverged(state): once true, train stops training the method (it only evaluates).
#: 7: block_bytes / client_block / merge_client_block: a method may let train take its clients a block at a time.
ALGORITHM_API_VERSION = 7


class Algorithm(ABC):
    """A federated algorithm on the engine; ``selected`` is a LongTensor of client ids on the state's device.

    Class attributes the round loop reads:
    - ``batches_per_step``: the minibatch handed to :meth:`local_step` holds ``batches_per_step * batch_size``
      distinct rows per client (e.g. Per-FedAvg's two batches D, D'; split with :func:`split_batches`).
    - ``steps_unsampled``: clients *not* selected in a period also call :meth:`unsampled_step` at every iteration
      (AdaPeD with unsampled client iterations, App. H.2); their minibatches come from the same stream.

    And, set by :meth:`init_state` if the algorithm restricts it:
    - ``population``: the client ids the server samples its K clients from (None = all m; fewer than K: all of
      them every period), e.g. FedHDP at r = 0 under the reading that the server communicates with non-private
      clients only.
    """

    name: str = "algorithm"
    batches_per_step: int = 1
    steps_unsampled: bool = False
    population: np.ndarray | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the package's own algorithms register by name; a class from a user's method file (fedrepro.compare) or a
        # test is built through fedrepro.learning.algorithms.register_external, never into the shared registry
        if "name" in cls.__dict__ and cls.__module__.startswith("fedrepro."):
            ALGORITHMS.add(cls.name, cls)

    @abstractmethod
    def init_state(self, net: Net, n_clients: int, generator: torch.Generator) -> Any:
        """Initial state (holds ``net``, stacked parameters and ``generator`` for any noise)."""

    def start_round(self, state: Any, selected: Tensor) -> None:  # noqa: B027 (an optional hook: nothing by default)
        """Server broadcast to the clients selected for this synchronization period."""

    @abstractmethod
    def local_step(self, state: Any, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        """One local iteration of every selected client on its minibatch; returns per-client training losses."""

    def unsampled_step(self, state: Any, x: Tensor, y: Tensor, unselected: Tensor, lr: float) -> None:
        """One local iteration of the clients not selected in this period (only if ``steps_unsampled``)."""
        raise NotImplementedError(f"{type(self).__name__} sets steps_unsampled but has no unsampled_step")

    def sync(self, state: Any, selected: Tensor) -> None:  # noqa: B027 (an optional hook: nothing by default)
        """Server aggregation at the end of a synchronization period."""

    # Privacy by construction (a protocol that releases what clients send, PPSGD's and FedHDP's): a method that
    # implements both is run as "local steps, each client's message, the protocol's release, the server's update" in
    # place of sync; the protocol clips every private client's message and adds its noise, and the server sees only
    # the release.
    def client_message(self, state: Any, selected: Tensor) -> Params | None:
        """What each selected client sends the server at the end of the period, stacked (K, ...) (None: the method
        aggregates in :meth:`sync` instead)."""
        return None

    def server_update(self, state: Any, selected: Tensor, released: Params) -> None:
        """The server's step from the protocol's release of the clients' messages (their clipped mean, plus the
        protocol's noise in a private protocol), one tensor per message entry without the client axis."""
        raise NotImplementedError(f"{type(self).__name__} sends client_message but has no server_update")

    @abstractmethod
    def deployed_params(self, state: Any, ctx: EvalContext | None = None) -> Params:
        """The model each client would use, stacked over all clients (n_clients, ...)."""

    def metrics(self, state: Any) -> dict[str, float]:
        """Algorithm-specific scalars recorded at each evaluation (e.g. mean psi)."""
        return {}

    def diverged(self, state: Any) -> bool:
        """Whether no later round can change the deployed models any more because the state every client starts
        from is no longer finite (e.g. FedAvg's global model after a non-finite update): :func:`train` then stops
        training the method and goes on evaluating what it has. False by default: a method whose clients keep
        models of their own (a personalized one) may have clients the non-finite part never reaches."""
        return False

    # Client blocks: a method whose local steps train each selected client on its own minibatches alone (nothing
    # couples clients within a period, no local step draws a random number) may let :func:`train` take a block of
    # clients through all of a period's local steps before the next block, so that the block's parameters stay in
    # the CPU's cache from step to step instead of streaming every client's through memory at every step. The
    # minibatches, losses and models are those of the all-clients loop.
    def block_bytes(self, state: Any) -> int | None:
        """Bytes of parameters one selected client's local steps read and write this period (asked after
        :meth:`start_round`), if they may be taken a block of clients at a time (:meth:`client_block`); None (the
        default): they may not."""
        return None

    def client_block(self, state: Any, rows: slice) -> Any:
        """A state whose :meth:`local_step` trains the selected clients at positions ``rows`` of this period's
        selection (x, y and ``selected`` then hold those clients only), exactly as the step of all of them would
        (only called when :meth:`block_bytes` is not None)."""
        raise NotImplementedError(f"{type(self).__name__} gives block_bytes but has no client_block")

    def merge_client_block(self, state: Any, block: Any, rows: slice) -> None:  # noqa: B027 (optional hook)
        """Write what the block's local steps changed back into ``state`` (nothing to do where they wrote into views
        of its tensors)."""


def sends_messages(method: Algorithm | type[Algorithm]) -> bool:
    """Whether a method (or its class) sends :meth:`Algorithm.client_message`: a protocol that releases client messages
    then runs it by construction (messages, the release, :meth:`Algorithm.server_update`)."""
    cls = method if isinstance(method, type) else type(method)
    return getattr(cls, "client_message", None) is not Algorithm.client_message


class MessageRelease(ABC):
    """A private protocol's release of what the clients send (privacy by construction, :func:`train`'s
    ``release``): at the end of each period it maps the selected clients' messages (stacked (K, ...)) to what the
    server may see (e.g. FedHDP's: the private clients' messages clipped, their mean noised), drawing its noise from
    the engine's generator. A subclass is a dataclass, so a checkpoint keeps its state (an adaptive clip norm) and a
    resumed run goes on exactly."""

    @abstractmethod
    def __call__(self, message: Params, selected: Tensor, generator: torch.Generator) -> Params:
        """The release of this period's messages: one tensor per message entry, without the client axis."""

    def metrics(self) -> dict[str, float]:
        """The release's own scalars recorded at each evaluation (e.g. the clip norm)."""
        return {}


# ------------------------------------------------------------------------------------------------ evaluation


def evaluate(
    net: Net, params: Params, data: ClientData, split: str = "test", max_rows: int = 4096
) -> dict[str, np.ndarray]:
    """Per-client accuracy, mean loss and sample count of stacked ``params`` (one model per client) on each
    client's own ``split``, vectorized over clients in chunks of rows. Clients without data have nan. A row whose
    logits are not finite (a diverged model) counts as misclassified, and makes the client's loss NaN."""

    def client(p: Params, x: Tensor, y: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        logits = net.logits(p, x)
        # a row whose logits are not all finite has no prediction (argmax would pick a NaN's index): a miss
        hit = ((logits.argmax(-1) == y) & torch.isfinite(logits).all(-1)).to(mask.dtype)
        return (hit * mask).sum(), (F.cross_entropy(logits, y, reduction="none") * mask).sum()

    correct = torch.zeros(data.n_clients, device=data.device)
    loss = torch.zeros_like(correct)
    for x, y, mask in data.blocks(split, max_rows):
        c, l = net.map(client, params, x, y, mask)
        correct += c
        loss += l
    count = data.counts(split).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "acc": correct.cpu().double().numpy() / count,
            "loss": loss.cpu().double().numpy() / count,
            "count": count,
        }


def summarize(ev: dict[str, np.ndarray]) -> dict[str, float]:
    """Unweighted and sample-weighted client means of :func:`evaluate`'s output."""
    has = ev["count"] > 0
    w = ev["count"][has] / ev["count"][has].sum()
    return {
        "test_acc": float(ev["acc"][has].mean()),
        "test_acc_weighted": float((ev["acc"][has] * w).sum()),
        "test_loss": float((ev["loss"][has] * w).sum()),
    }


# ------------------------------------------------------------------------------------------------ round loop


_REPLAY_ROUNDS: contextvars.ContextVar[int | None] = contextvars.ContextVar("replay_rounds", default=None)


@contextlib.contextmanager
def replay_rounds(limit: int) -> Iterator[None]:
    """Within this block every :func:`train` stops after round ``limit`` (evaluating there, keeping no checkpoints):
    the first rounds of a run exactly as the full run makes them (client sampling, minibatches, noise and the lr
    schedule depend on the round and the seed, not on the number of rounds), for ``fedrepro archive verify
    --replay`` to compare with an archived run's per-round losses."""
    token = _REPLAY_ROUNDS.set(limit)
    try:
        yield
    finally:
        _REPLAY_ROUNDS.reset(token)


def replaying() -> bool:
    """Whether this is a replay of a run's first rounds (:func:`replay_rounds`): what only a whole run needs (a
    final evaluation under other readings) is skipped, and what runs elsewhere (another process) would not replay."""
    return _REPLAY_ROUNDS.get() is not None


@contextlib.contextmanager
def _deterministic(on: bool) -> Iterator[None]:
    """Deterministic kernels. Not torch's companion setting that fills every new tensor with NaN (to expose reads
    of uninitialized memory): one more write of every op's output, ~5% of a batched LeNet5 step (measured 113 ->
    107 ms per 50-client step on the 2-core VM), and no op here reads memory it did not write."""
    prev, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    if on:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


#: glibc's mallopt parameters (malloc.h) and the values :func:`keep_freed_memory` sets
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_GLIBC_MALLOPT = {_M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 64 << 20, _M_MMAP_THRESHOLD: 512 << 20}


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next allocation instead of handing it back to the system (once per
    process; False where the C library is not glibc).

    Why: a training step allocates and frees the same few-MB buffers (im2col columns, activations, stacked
    parameters) hundreds of times a round. By default glibc maps each one above its mmap threshold afresh and
    trims its heap when more than the trim threshold is free, so the next step page-faults the same memory back
    in. Serving allocations up to 512 MiB from the heap and trimming only beyond 1 GiB free removes that: measured
    on the 2-core VM at 1 thread, an AdaPeD Table-2 round (50 clients, LeNet5) 4.5-5.9 -> 3.5-3.7 s
    (benchmarks/RESULTS.md). The cost: the process keeps its peak heap (the peak a round reaches anyway) instead of
    returning it between steps. Results do not depend on it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in _GLIBC_MALLOPT.items())


def _template(model: nn.Module | Callable[[], nn.Module], seed: int, device: torch.device) -> nn.Module:
    if isinstance(model, nn.Module):
        return copy.deepcopy(model).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model().to(device)


def training_net(
    model: nn.Module,
    feature_shape: tuple[int, ...],
    rows_per_step: int,
    vectorize: bool = True,
    chunk_size: int | None = None,
    gemm: bool | None = None,
) -> Net:
    """The :class:`Net` :func:`train` steps ``model`` with: ``chunk_size`` clients per vmapped call, by default all
    of them, or for the batched CNN formulation as many as :func:`batched_cnn.chunk_clients` allows for a step of
    ``rows_per_step`` examples of ``feature_shape``."""
    net = Net(model, vectorize=vectorize, chunk_size=chunk_size, gemm=gemm)
    if chunk_size is None and vectorize and net.formulation is batched_cnn:
        net.chunk_size = batched_cnn.chunk_clients(net.model, feature_shape, rows_per_step)
    return net


def resolve_device(name: str) -> str:
    """A config's device: "auto" -> "cuda" when torch sees a GPU, else "cpu"; "cuda" without a GPU is an error."""
    from fedrepro.errors import ConfigError

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("params.device: 'cuda' requested but torch sees no GPU (use 'auto' or 'cpu')")
    return name


def n_rounds(epochs: float, iters_per_epoch: int, tau: int) -> int:
    """Synchronizations in ``epochs`` epochs of ``iters_per_epoch`` iterations, one every ``tau`` (at least one)."""
    return max(1, math.ceil(epochs * iters_per_epoch / tau))


def _check_batch_memory(data: ClientData, clients: int, rows: int, batch_size: int) -> None:
    """One line (a ResourceError naming ``batch_size``) when a local step's minibatch alone, ``rows`` float32 inputs
    for each of ``clients`` clients (sampled with replacement beyond a client's own rows), cannot fit in this
    machine's memory: a lower bound, before anything is allocated."""
    from fedrepro.experiments.memory import MemoryNeed, check_memory

    need = MemoryNeed(("batch_size",), lambda p: 4.0 * clients * rows * math.prod(data.feature_shape))
    check_memory(f"training ({clients} clients a step)", need, {"batch_size": batch_size})


#: Parameters of the clients that take a period's local steps together, when a method allows blocks
#: (:meth:`Algorithm.block_bytes`): small enough to stay in the CPU's last-level cache from step to step, large
#: enough that each step's batched products stay wide; a round whose clients' parameters fit in it runs as one block
#: (the all-clients loop). benchmarks/RESULTS.md, "Client blocks", has the measurement behind the value (FedHDP's
#: Ditto rounds, 63 MB of parameters, in two one-thread processes: 8 MiB 1.07x the all-clients loop, 16 and 32 MiB
#: 1.2x; in one process 16 MiB no faster, 32 MiB 1.03-1.13x).
BLOCK_BYTES = 16 * 2**20


def _block_budget(algorithm: Algorithm, net: Net, device: torch.device, block_bytes: int | None) -> int:
    """The bytes of a client block for this run, 0 where no period can take blocks (none asked for, off the CPU, not
    batched, unselected clients stepping too, or a local step the blocks were not declared with)."""
    budget = BLOCK_BYTES if block_bytes is None else block_bytes
    if device.type != "cpu" or not net.vectorize or algorithm.steps_unsampled:
        return 0
    return budget if _blocks_declared_with_local_step(type(algorithm)) else 0


def _block_clients(algorithm: Algorithm, state: Any, budget: int) -> int | None:
    """Clients per block of this period's local steps (after :meth:`Algorithm.start_round`), or None to step all
    selected clients together (no budget, or the method does not allow blocks this period)."""
    if not budget:
        return None
    per_client = algorithm.block_bytes(state)
    return None if per_client is None else max(1, budget // max(1, per_client))


def _blocks_declared_with_local_step(cls: type) -> bool:
    """Whether the class that gives ``cls`` its ``block_bytes`` gives it its ``local_step`` too, or derives from the
    one that does: blocks are a promise about the local step beside which they were written, so a subclass that
    overrides ``local_step`` (with noise of its own, or a user's method under ``compare``) gets no blocks unless it
    declares ``block_bytes`` again."""
    owner = {name: next(c for c in cls.__mro__ if name in vars(c)) for name in ("block_bytes", "local_step")}
    return issubclass(owner["block_bytes"], owner["local_step"])


def _local_steps_in_blocks(
    algorithm: Algorithm,
    state: Any,
    net: Net,
    data: ClientData,
    sel_np: np.ndarray,
    selected: Tensor,
    lrs: list[float],
    rows_per_step: int,
    rng: np.random.Generator,
    block: int,
) -> list[Tensor]:
    """A period's local steps a block of ``block`` selected clients at a time: the minibatch rows of every step
    drawn first, in the order the all-clients loop draws them; per step, the mean loss over all selected clients."""
    rows = [data.sample_rows(sel_np, rows_per_step, rng) for _ in lrs]
    parts: list[list[Tensor]] = [[] for _ in lrs]
    for a in range(0, len(sel_np), block):
        part = slice(a, min(a + block, len(sel_np)))
        sub = algorithm.client_block(state, part)
        for s, step_lr in enumerate(lrs):
            x, y = data.gather(rows[s][part])
            with net.drawing(rows[s][part]):
                parts[s].append(algorithm.local_step(sub, x, y, selected[part], step_lr))
        algorithm.merge_client_block(state, sub, part)
    return [torch.cat(p).mean() for p in parts]


def train(
    algorithm: Algorithm,
    data: FederatedDataset | ClientData,
    model: nn.Module | Callable[[], nn.Module],
    *,
    batch_size: int,
    lr: float,
    rounds: int | None = None,
    epochs: float | None = None,
    tau: int = 10,
    clients_per_round: int | None = None,
    lr_decay: float = 1.0,
    iters_per_epoch: int | None = None,
    seed: int = 0,
    eval_every: int = 1,
    device: str | torch.device = "cpu",
    vectorize: bool = True,
    chunk_size: int | None = None,
    eval_rows: int = 4096,
    deterministic: bool = True,
    gemm: bool | None = None,
    callback: Callable[[dict], None] | None = None,
    checkpoint: Checkpointer | None = None,
    evaluated: Callable[[dict[str, np.ndarray]], None] | None = None,
    release: MessageRelease | None = None,
    block_bytes: int | None = None,
    input_support: bool = True,
) -> list[dict]:
    """Run ``algorithm`` and return its history: one dict per evaluation (every ``eval_every`` rounds and after
    the last) with round, iteration, epoch, lr, train_loss (mean over the clients' local steps since the previous
    evaluation), round_losses (each round's train_loss since the previous evaluation, a list: the trace
    ``fedrepro archive verify --replay`` reruns), test_acc, test_acc_weighted, test_loss and the algorithm's metrics.

    ``model``: a module whose parameters are the initialization (copied), or a zero-argument factory called under
    ``torch.manual_seed(seed)``. Exactly one of ``rounds`` and ``epochs``. ``clients_per_round`` K (default all).
    ``callback(info)`` after every round: round, iteration, train_loss of the round, ``eval`` when evaluated, and
    ``diverged`` in the round after which :meth:`Algorithm.diverged` held (no later round trains; their losses are NaN).
    ``checkpoint``: save the loop every ``checkpoint.every`` rounds and resume from a matching checkpoint; a resumed
    run returns exactly what the uninterrupted run would (tested by killing one). ``chunk_size``: clients per
    vmapped call; default all at once, or for the batched CNN formulation :func:`batched_cnn.chunk_clients`.
    ``gemm``: that formulation on or off (:class:`Net`; default: on CPU for the CNNs it supports).
    ``evaluated(ev)`` after every evaluation with :func:`evaluate`'s per-client arrays (acc, loss, count) of the
    deployed models (a kind that reports more than the client means, e.g. per client group). ``release``: a private
    protocol's release of client messages; a method that sends :meth:`Algorithm.client_message` is then run as
    messages, ``release``, :meth:`Algorithm.server_update` in place of :meth:`Algorithm.sync` (one that sends none
    syncs as usual), and may not restrict the clients the server samples (``population``: the release's accountant
    counts a sampling rate of K of all m clients). ``block_bytes``: on CPU, a method that allows it
    (:meth:`Algorithm.block_bytes`) takes its selected clients through a period's local steps in blocks of about
    this many bytes of parameters (default :data:`BLOCK_BYTES`; 0: all clients step together); the result is the
    same. ``input_support``: on the batched MLP formulation, the net holds the training data (``Net.train_data``): a
    method may leave out of its first layer's products the inputs that none of a client's training examples makes
    nonzero (``Net.input_support``; Ditto's side-by-side step, :func:`batched_mlp.pack_columns`), and take its
    minibatches' products from the clients' training rows (``Net.minibatch_rows``, :func:`batched_mlp.look_up_rows`);
    the result is the same up to float32 summation order.
    """
    device = torch.device(device)
    if not isinstance(data, ClientData):
        data = ClientData(data, device)
    elif data.device != device:
        raise ValueError(f"data is on {data.device}, training on {device}")
    m = data.n_clients
    K = m if clients_per_round is None else int(clients_per_round)
    if not 1 <= K <= m:
        raise ValueError(f"clients_per_round={K} not in [1, {m}]")
    if iters_per_epoch is None:
        iters_per_epoch = max(1, math.ceil(float(np.median(data.counts("train"))) / batch_size))
    if (rounds is None) == (epochs is None):
        raise ValueError("give exactly one of rounds and epochs")
    if rounds is None:
        rounds = n_rounds(epochs, iters_per_epoch, tau)
    if replaying():  # a replay of the first rounds (replay_rounds)
        rounds, checkpoint = min(rounds, _REPLAY_ROUNDS.get()), None
    rng = rng_for("learning.train", seed)
    generator = torch.Generator(device=device).manual_seed(int(rng_for("learning.noise", seed).integers(2**62)))

    history: list[dict] = []
    if device.type == "cpu":
        keep_freed_memory()
    with _deterministic(deterministic):
        net = training_net(
            _template(model, seed, device),
            data.feature_shape,
            batch_size * algorithm.batches_per_step,
            vectorize=vectorize,
            chunk_size=chunk_size,
            gemm=gemm,
        )
        if input_support and net.vectorize and net.formulation is batched_mlp:
            net.train_data = data
        state = algorithm.init_state(net, m, generator)
        t, loss_sum, loss_n, start = 0, 0.0, 0, 1
        round_losses: list[float] = []  # each round's train_loss since the last evaluation
        diverged: int | None = None  # the round after which Algorithm.diverged held: not trained from then on
        saved = checkpoint.load() if checkpoint is not None else None
        if saved is not None:
            state = restore(state, saved["state"])
            generator.set_state(saved["generator"])
            rng.bit_generator.state = json.loads(saved["numpy_rng"])
            t, loss_sum, loss_n, start = saved["t"], saved["loss_sum"], saved["loss_n"], saved["round"] + 1
            round_losses = list(saved["round_losses"])
            history = saved["history"]
            diverged = saved.get("diverged")
            if release is not None:
                restore(release, saved.get("release"))
        if release is not None and algorithm.population is not None:
            raise ValueError(
                f"{type(algorithm).__name__} sets a population of its own, but the protocol's release is accounted "
                "at a sampling rate of K of all clients"
            )
        rows_per_step = batch_size * algorithm.batches_per_step
        pool = m if algorithm.population is None else np.asarray(algorithm.population)
        K_round = K if algorithm.population is None else min(K, len(pool))
        _check_batch_memory(data, m if algorithm.steps_unsampled else K_round, rows_per_step, batch_size)
        block_budget = _block_budget(algorithm, net, device, block_bytes)
        for r in range(start, rounds + 1):
            if diverged is None:
                sel_np = np.sort(rng.choice(pool, K_round, replace=False))
                selected = torch.from_numpy(sel_np).to(device)
                rest_np = np.setdiff1d(np.arange(m), sel_np) if algorithm.steps_unsampled else sel_np[:0]
                rest = torch.from_numpy(rest_np).to(device)
                algorithm.start_round(state, selected)
                lrs = [lr * lr_decay ** (s // iters_per_epoch) for s in range(t, t + tau)]
                block = _block_clients(algorithm, state, block_budget)
                if block is not None and len(sel_np) > block:
                    losses = _local_steps_in_blocks(
                        algorithm, state, net, data, sel_np, selected, lrs, rows_per_step, rng, block
                    )
                else:
                    losses = []
                    for step_lr in lrs:
                        rows = data.sample_rows(sel_np, rows_per_step, rng)
                        x, y = data.gather(rows)  # (K, B, ...) and (K, B)
                        with net.drawing(rows):
                            losses.append(algorithm.local_step(state, x, y, selected, step_lr).mean())
                        if len(rest_np):
                            xu, yu = data.sample(rest_np, rows_per_step, rng)
                            algorithm.unsampled_step(state, xu, yu, rest, step_lr)
                message = None if release is None else algorithm.client_message(state, selected)
                if message is None:
                    algorithm.sync(state, selected)
                else:  # privacy by construction: the server sees only the protocol's release of the messages
                    algorithm.server_update(state, selected, release(message, selected, generator))
                round_loss = float(torch.stack(losses).sum())
                if algorithm.diverged(state):
                    diverged = r
            else:  # nothing a round does can change the deployed models any more: the iterations pass untrained
                round_loss = math.nan
            t += tau
            loss_sum, loss_n = loss_sum + round_loss, loss_n + tau
            info = {"round": r, "iteration": t, "train_loss": round_loss / tau}
            if diverged == r:
                info["diverged"] = True
            round_losses.append(round_loss / tau)
            if r == rounds or (eval_every and r % eval_every == 0):
                step_lr = lr * lr_decay ** (t // iters_per_epoch)
                ctx = EvalContext(data, rng_for(f"learning.eval.{r}", seed), batch_size, step_lr, iters_per_epoch)
                ev = evaluate(net, algorithm.deployed_params(state, ctx), data, "test", eval_rows)
                if evaluated is not None:
                    evaluated(ev)
                info["eval"] = {
                    "round": r,
                    "iteration": t,
                    "epoch": t / iters_per_epoch,
                    "lr": step_lr,
                    "train_loss": loss_sum / loss_n,
                    "round_losses": round_losses,
                    **summarize(ev),
                    **algorithm.metrics(state),
                    **(release.metrics() if release is not None else {}),
                }
                history.append(info["eval"])
                loss_sum, loss_n, round_losses = 0.0, 0, []
            if checkpoint is not None and checkpoint.due(r, rounds):
                checkpoint.save(
                    {
                        "round": r,
                        "t": t,
                        "loss_sum": loss_sum,
                        "loss_n": loss_n,
                        "round_losses": round_losses,
                        "history": history,
                        "state": pack(state),
                        "release": pack(release),
                        "generator": generator.get_state(),
                        "numpy_rng": json.dumps(rng.bit_generator.state),
                        **({} if diverged is None else {"diverged": diverged}),
                    }
                )
            if callback is not None:
                callback({**info, "rounds": rounds})
    return history


__all__ = [
    "ALGORITHM_API_VERSION",
    "BLOCK_BYTES",
    "Algorithm",
    "Diverged",
    "EvalContext",
    "MessageRelease",
    "Released",
    "client_grads",
    "client_sgd",
    "evaluate",
    "keep_freed_memory",
    "loop_grads",
    "n_rounds",
    "replay_rounds",
    "resolve_device",
    "sends_messages",
    "summarize",
    "train",
    "training_net",
]
