"""The batched CNN's SGD step in compiled C (``native_cnn.c``): each client's whole LeNet-style network forward and
backward in its own cache, the clients split over the job's threads. :func:`fedrepro.learning.batched_cnn.ce_grads`
takes this path where it applies (:func:`usable`) and its own PyTorch formulation elsewhere.

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
    lib.convnet_workspace_floats.restype = ctypes.c_int64
    lib.convnet_workspace_floats.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.convnet_workspace_floats.argtypes += [ctypes.c_void_p]
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
    """The PyTorch formulation inside, e.g. to count its FLOPs (``benchmarks/engine.py``) or to time both."""
    _off.append(True)
    try:
        yield
    finally:
        _off.pop()


def usable(model: nn.Module, params: dict[str, Tensor], x: Tensor, y: Tensor) -> bool:
    """Whether :func:`ce_grads` computes this step: a :class:`ConvNet` of unpadded square convolutions and at most
    16 positions a pooling window, float32 on the CPU, int64 labels, the library built, and not :func:`disabled`."""
    if _off or not isinstance(model, ConvNet) or x.device.type != "cpu" or x.dtype != torch.float32:
        return False
    if y.dtype != torch.int64 or any(v.dtype != torch.float32 or v.device.type != "cpu" for v in params.values()):
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


def ce_grads(
    model: ConvNet, params: dict[str, Tensor], x: Tensor, y: Tensor, sgd: tuple[float, float] | None = None
) -> tuple[dict[str, Tensor], Tensor]:
    """:func:`fedrepro.learning.batched_cnn.ce_grads` (without ``chunk``) in the compiled kernel: x (K, B, ...), y
    (K, B) -> (grads, or the parameters after ``sgd=(lr, weight_decay)``, name -> (K, *shape); losses (K,)). The
    clients are split over ``torch.get_num_threads()`` threads. Call only where :func:`usable` is true."""
    lib = library()
    K, B = y.shape
    names = [f"{n}.{w}" for n in (*model.conv_layers, *model.fc_layers) for w in ("weight", "bias")]
    ps = [params[n].contiguous() for n in names]
    out = [torch.empty_like(p) for p in ps]
    losses = x.new_empty(K)
    x, y = x.contiguous(), y.contiguous()
    conv, fc = _geometry(model, tuple(x.shape[2:]))
    n_conv, n_fc = len(model.conv_layers), len(model.fc_layers)
    n_ws = lib.convnet_workspace_floats(B, n_conv, conv, n_fc, fc)
    lr, weight_decay = sgd if sgd is not None else (0.0, 0.0)
    per_client = [p[0].numel() for p in ps]
    x_step, y_step = x[0].numel(), B

    def run(i: int, a: int, b: int) -> int:
        def at(t: Tensor, step: int) -> int:
            return t.data_ptr() + a * step * t.element_size()

        p_ptrs = (ctypes.c_void_p * len(ps))(*[at(p, n) for p, n in zip(ps, per_client)])
        o_ptrs = (ctypes.c_void_p * len(ps))(*[at(o, n) for o, n in zip(out, per_client)])
        rc = lib.convnet_step(
            b - a, B, n_conv, conv, n_fc, fc, model.pool, p_ptrs, o_ptrs, at(x, x_step), at(y, y_step),
            at(losses, 1), lr, weight_decay, int(sgd is not None), _workspace(i, n_ws).data_ptr(),
        )  # fmt: skip
        return rc and rc + a

    threads = min(torch.get_num_threads(), K)
    if threads == 1:
        rcs = [run(0, 0, K)]
    else:
        # chunks of clients taken in turn, so that a thread whose core another process shares takes fewer
        size = -(-K // (CHUNKS_PER_THREAD * threads))
        starts = iter(range(0, K, size))  # next() holds the GIL: each chunk is taken once

        def work(i: int) -> int:
            return next((rc for a in starts if (rc := run(i, a, min(a + size, K)))), 0)

        with _lock:
            if _pool.get("pid") != os.getpid() or _pool["size"] < threads - 1:
                executor = ThreadPoolExecutor(threads - 1, thread_name_prefix="fedrepro-cnn")
                _pool.update(executor=executor, pid=os.getpid(), size=threads - 1)
        futures = [_pool["executor"].submit(work, i) for i in range(1, threads)]
        rcs = [work(0), *(f.result() for f in futures)]
    bad = next((rc for rc in rcs if rc), 0)
    if bad:
        n_classes = getattr(model, model.fc_layers[-1]).out_features
        raise IndexError(
            f"batched CNN: client {bad - 1} of the step has a label outside 0..{n_classes - 1}: "
            f"{sorted(set(y[bad - 1].tolist()))}"
        )
    return dict(zip(names, out)), losses


__all__ = ["SOURCE", "ce_grads", "disabled", "kernel", "library", "usable"]
