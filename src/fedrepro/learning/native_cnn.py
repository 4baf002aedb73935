"""The batched CNN's SGD step in compiled C (``native_cnn.c``): each client's whole LeNet-style network forward and
backward in its own cache, the clients split over the job's threads. :func:`fedrepro.learning.batched_cnn.ce_grads`
takes this path where it applies (:func:`usable`) and its own PyTorch formulation elsewhere. Losses the kernel does
not compute (AdaPeD's, pFedMe's, QuPeD's, FML's, through :func:`fedrepro.learning.batched_cnn.logits` under
``vmap``) take its :func:`forward` and :func:`backward`: the same per-client network as two calls, what the backward
reads (the input, each pooling's output and positions, each layer's output; no im2col) kept between them.

Why hand-written: PyTorch runs the engine's per-client convolutions as im2col copies and products of 6 or 16 rows
per client, the first convolution at 13-17 GFLOP/s (``benchmarks/engine.py --profile-only``), and every other op
passes over memory once more; ``torch.compile`` of the step was 2-11x slower on this CPU (benchmarks/RESULTS.md).
Here a client's activations (~0.5 MB at 20 MNIST images) stay in its core's cache from the input to the update.

The library is built once per machine with the system's C compiler (``$CC``, else ``cc``; ``-O3 -march=native``) into
``$FEDREPRO_CACHE`` (else ``$XDG_CACHE_HOME/fedrepro``, else ``~/.cache/fedrepro``), named by the digest of the
source, the compiler, the flags and the CPU's model and flags, so that a cache shared by different machines (a
cluster's home directory) holds one build for each. Without a compiler, or with ``FEDREPRO_NATIVE=0``, the engine
runs the PyTorch formulation; :func:`kernel` says which ran and the run's metrics record it.

Same function, another float32 summation order: the tests compare both with the module in float64, and the result
does not depend on the number of threads (each client is one thread's).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor, nn

from fedrepro.learning.models import ConvNet

SOURCE = Path(__file__).with_name("native_cnn.c")
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared")
_MAX_CONV, _MAX_FC = 8, 16  # the kernel's arrays of layers
#: Chunks of a step's clients per thread (each thread takes the next chunk when it finishes one)
CHUNKS_PER_THREAD = 4

_lock = threading.Lock()
_state: dict = {}  # "lib": the loaded library or None, "kernel": what kernel() says
_off: list[bool] = []  # inside disabled()


def _cache_dir() -> Path:
    if os.environ.get("FEDREPRO_CACHE"):
        return Path(os.environ["FEDREPRO_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedrepro"


def _cpu_identity() -> str:
    """The CPU's model and instruction-set flags (what ``-march=native`` compiles for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(keep)) or platform.machine()


def _build() -> tuple[ctypes.CDLL | None, str]:
    if os.environ.get("FEDREPRO_NATIVE", "1") == "0":
        return None, "torch (FEDREPRO_NATIVE=0)"
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return None, f"torch (no C compiler: {cc} not found)"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"torch ({cc} --version failed: {e})"
    compiler = version[0].strip() if version else cc
    key = hashlib.sha256(
        b"\0".join(x.encode() for x in (SOURCE.read_text(), compiler, " ".join(FLAGS), _cpu_identity()))
    ).hexdigest()[:16]
    target = _cache_dir() / f"native_cnn-{key}.so"
    try:
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            run = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                os.unlink(tmp)
                return None, f"torch ({cc} could not build {SOURCE.name}: {run.stderr.strip()[-400:]})"
            os.replace(tmp, target)  # atomic: processes building at once each write their own file
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as e:  # an unwritable cache, a library that does not load
        return None, f"torch (building or loading {target} failed: {e}; set FEDREPRO_CACHE to a writable directory)"
    lib.convnet_step.restype = ctypes.c_int
    lib.convnet_step.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.convnet_step.argtypes += [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.convnet_step.argtypes += [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
    lib.convnet_step.argtypes += [ctypes.c_float, ctypes.c_int, ctypes.c_void_p]
    geometry = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]  # B, conv, fc
    for sizing in (lib.convnet_workspace_floats, lib.convnet_saved_floats):
        sizing.restype, sizing.argtypes = ctypes.c_int64, geometry
    # K, geometry, pool, params, then forward: x, logits, saved, ws; backward: saved, dlogits, grads, ws
    lib.convnet_forward.restype = lib.convnet_backward.restype = None
    lib.convnet_forward.argtypes = [ctypes.c_int, *geometry, ctypes.c_int, *[ctypes.c_void_p] * 5]
    lib.convnet_backward.argtypes = lib.convnet_forward.argtypes
    return lib, f"native ({SOURCE.name} {key}, {compiler}, {' '.join(FLAGS[:2])})"


def library() -> ctypes.CDLL | None:
    """The compiled kernel, built on first use; None where it cannot be (:func:`kernel` says why)."""
    with _lock:
        if "lib" not in _state:
            _state["lib"], _state["kernel"] = _build()
            if _state["lib"] is None and os.environ.get("FEDREPRO_NATIVE", "1") != "0":
                print(f"[fedrepro] batched CNN: {_state['kernel']}", flush=True)
        return _state["lib"]


def kernel() -> str:
    """Which kernel the batched CNN's SGD steps run: ``native (...)`` or ``torch (why not native)``."""
    library()
    return _state["kernel"]


@contextlib.contextmanager
def disabled():
    """The PyTorch formulation inside, e.g. to count its FLOPs (``benchmarks/engine.py``), to time both, or to
    replay a run made before the kernel existed (fedrepro.archive.replay); in the worker processes started inside
    too (``FEDREPRO_NATIVE=0`` in their environment)."""
    _off.append(True)
    before = os.environ.get("FEDREPRO_NATIVE")
    os.environ["FEDREPRO_NATIVE"] = "0"
    try:
        yield
    finally:
        _off.pop()
        if before is None:
            os.environ.pop("FEDREPRO_NATIVE", None)
        else:
            os.environ["FEDREPRO_NATIVE"] = before


def usable(model: nn.Module, params: dict[str, Tensor], x: Tensor, y: Tensor | None = None) -> bool:
    """Whether the kernel computes this step (:func:`ce_grads`; without ``y``, :func:`forward` and
    :func:`backward`): a :class:`ConvNet` of unpadded square convolutions and at most 16 positions a pooling window,
    float32 on the CPU, int64 labels, the library built, and not :func:`disabled`."""
    if _off or not isinstance(model, ConvNet) or x.device.type != "cpu" or x.dtype != torch.float32:
        return False
    if y is not None and y.dtype != torch.int64:
        return False
    if any(v.dtype != torch.float32 or v.device.type != "cpu" for v in params.values()):
        return False
    convs = [getattr(model, n) for n in model.conv_layers]
    if not 1 <= len(convs) <= _MAX_CONV or not 1 <= len(model.fc_layers) <= _MAX_FC or model.pool**2 > 16:
        return False
    if any(c.padding != (0, 0) or c.kernel_size[0] != c.kernel_size[1] for c in convs):
        return False
    return library() is not None


def _geometry(model: ConvNet, feature_shape: tuple[int, ...]) -> tuple[ctypes.Array, ctypes.Array]:
    conv = []
    for name, (C, H, W, Ho, Wo, Hp, Wp) in zip(model.conv_layers, model.geometry(feature_shape)):
        layer = getattr(model, name)
        conv += [C, H, W, layer.out_channels, layer.kernel_size[0], Ho, Wo, Hp, Wp]
    fc = [n for name in model.fc_layers for n in (getattr(model, name).in_features, getattr(model, name).out_features)]
    return (ctypes.c_int * len(conv))(*conv), (ctypes.c_int * len(fc))(*fc)


_workspaces: dict[int, Tensor] = {}  # worker index -> its scratch (one client's buffers), kept between steps
_pool: dict[str, object] = {}  # "executor" and the "pid" that made it (a forked child makes its own)


def _workspace(i: int, n: int) -> Tensor:
    ws = _workspaces.get(i)
    if ws is None or ws.numel() < n:
        ws = _workspaces[i] = torch.empty(n)
    return ws


class _Step:
    """A call's shapes as the kernel takes them: the parameters (in its order, contiguous), the geometry arrays and
    one thread's workspace size, for x (K, B, *feature_shape)."""

    def __init__(self, model: ConvNet, params: dict[str, Tensor], feature_shape: tuple[int, ...], B: int) -> None:
        self.lib = library()
        self.names = [f"{n}.{w}" for n in (*model.conv_layers, *model.fc_layers) for w in ("weight", "bias")]
        self.params = [params[n].contiguous() for n in self.names]
        self.per_client = [p[0].numel() for p in self.params]
        self.conv, self.fc = _geometry(model, feature_shape)
        self.geometry = (B, len(model.conv_layers), self.conv, len(model.fc_layers), self.fc)
        self.n_ws = self.lib.convnet_workspace_floats(*self.geometry)
        self.pool = model.pool

    def pointers(self, tensors: list[Tensor], a: int) -> ctypes.Array:
        """Where client ``a``'s slice of each of ``tensors`` (shaped as the parameters) starts."""
        return (ctypes.c_void_p * len(tensors))(*[_at(t, a, n) for t, n in zip(tensors, self.per_client)])


def _at(t: Tensor, a: int, step: int) -> int:
    """The address of row ``a`` of a contiguous ``t`` whose rows are ``step`` elements."""
    return t.data_ptr() + a * step * t.element_size()


def _over_clients(K: int, run, name: str) -> list:
    """``run(i, a, b)`` over the clients a..b of K, i the worker (its workspace), on ``torch.get_num_threads()``
    threads (the kernel releases the GIL): the results of every call. Under torch.profiler one ``native_cnn.<name>``
    row (``benchmarks/engine.py --profile``)."""
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(f"native_cnn.{name}"):
            return _over_clients_now(K, run)
    return _over_clients_now(K, run)


def _over_clients_now(K: int, run) -> list:
    threads = min(torch.get_num_threads(), K)
    if threads == 1:
        return [run(0, 0, K)]
    # chunks of clients taken in turn, so that a thread whose core another process shares takes fewer
    size = -(-K // (CHUNKS_PER_THREAD * threads))
    starts = iter(range(0, K, size))  # next() holds the GIL: each chunk is taken once

    def work(i: int) -> list:
        return [run(i, a, min(a + size, K)) for a in starts]

    with _lock:
        if _pool.get("pid") != os.getpid() or _pool["size"] < threads - 1:
            executor = ThreadPoolExecutor(threads - 1, thread_name_prefix="fedrepro-cnn")
            _pool.update(executor=executor, pid=os.getpid(), size=threads - 1)
    futures = [_pool["executor"].submit(work, i) for i in range(1, threads)]
    return [*work(0), *(r for f in futures for r in f.result())]


def ce_grads(
    model: ConvNet, params: dict[str, Tensor], x: Tensor, y: Tensor, sgd: tuple[float, float] | None = None
) -> tuple[dict[str, Tensor], Tensor]:
    """:func:`fedrepro.learning.batched_cnn.ce_grads` (without ``chunk``) in the compiled kernel: x (K, B, ...), y
    (K, B) -> (grads, or the parameters after ``sgd=(lr, weight_decay)``, name -> (K, *shape); losses (K,)). The
    clients are split over ``torch.get_num_threads()`` threads. Call only where :func:`usable` is true."""
    K, B = y.shape
    st = _Step(model, params, tuple(x.shape[2:]), B)
    out = [torch.empty_like(p) for p in st.params]
    losses = x.new_empty(K)
    x, y = x.contiguous(), y.contiguous()
    lr, weight_decay = sgd if sgd is not None else (0.0, 0.0)

    def run(i: int, a: int, b: int) -> int:
        rc = st.lib.convnet_step(
            b - a, *st.geometry, st.pool, st.pointers(st.params, a), st.pointers(out, a), _at(x, a, x[0].numel()),
            _at(y, a, B), _at(losses, a, 1), lr, weight_decay, int(sgd is not None),
            _workspace(i, st.n_ws).data_ptr(),
        )  # fmt: skip
        return rc and rc + a

    bad = next((rc for rc in _over_clients(K, run, "step") if rc), 0)
    if bad:
        n_classes = getattr(model, model.fc_layers[-1]).out_features
        raise IndexError(
            f"batched CNN: client {bad - 1} of the step has a label outside 0..{n_classes - 1}: "
            f"{sorted(set(y[bad - 1].tolist()))}"
        )
    return dict(zip(st.names, out)), losses


def forward(model: ConvNet, params: dict[str, Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`fedrepro.learning.batched_cnn.forward` in the compiled kernel: params name -> (K, *shape), x (K, B,
    ...) -> (logits (K, B, n_classes), what :func:`backward` needs: (K, n) floats a client). Call only where
    :func:`usable` is true."""
    K, B = x.shape[:2]
    st = _Step(model, params, tuple(x.shape[2:]), B)
    n_saved = st.lib.convnet_saved_floats(*st.geometry)
    logits = x.new_empty(K, B, getattr(model, model.fc_layers[-1]).out_features)
    saved = x.new_empty(K, n_saved)
    x = x.contiguous()

    def run(i: int, a: int, b: int) -> None:
        st.lib.convnet_forward(
            b - a, *st.geometry, st.pool, st.pointers(st.params, a), _at(x, a, x[0].numel()),
            _at(logits, a, logits[0].numel()), _at(saved, a, n_saved), _workspace(i, st.n_ws).data_ptr(),
        )  # fmt: skip

    _over_clients(K, run, "forward")
    return logits, saved


def backward(
    model: ConvNet, params: dict[str, Tensor], saved: Tensor, dlogits: Tensor, feature_shape: tuple[int, ...]
) -> dict[str, Tensor]:
    """:func:`fedrepro.learning.batched_cnn.backward` in the compiled kernel: every parameter's gradient (K,
    *shape) from the logits' gradient (K, B, n_classes) and :func:`forward`'s ``saved``."""
    K, B = dlogits.shape[:2]
    st = _Step(model, params, feature_shape, B)
    grads = [torch.empty_like(p) for p in st.params]
    dlogits, saved = dlogits.contiguous(), saved.contiguous()

    def run(i: int, a: int, b: int) -> None:
        st.lib.convnet_backward(
            b - a, *st.geometry, st.pool, st.pointers(st.params, a), _at(saved, a, saved.shape[1]),
            _at(dlogits, a, dlogits[0].numel()), st.pointers(grads, a), _workspace(i, st.n_ws).data_ptr(),
        )  # fmt: skip

    _over_clients(K, run, "backward")
    return dict(zip(st.names, grads))


__all__ = ["SOURCE", "backward", "ce_grads", "disabled", "forward", "kernel", "library", "usable"]
