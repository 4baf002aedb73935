"""The batched CNN's compiled SGD step (fedrepro.learning.native_cnn): the same gradients, losses and SGD step as
the module in float64 (to float32 rounding), at any thread count the same bits, a named error for a bad label, and
the PyTorch formulation where the kernel cannot be built."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import pytest
import torch
from torch.func import functional_call, grad_and_value
from torch.nn import functional as F

from fedrepro.learning import batched_cnn, native_cnn
from fedrepro.learning.models import Cifar100CNN, LeNet5
from fedrepro.papers.fedhdp.cnn import FedHDPCNN

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler here"),
]

MODELS = {  # name: (model, feature shape, images per client)
    "lenet5": (LeNet5, (1, 28, 28), 20),  # 16 images a vector, the last 16 overlapping
    "lenet5_b4": (LeNet5, (1, 28, 28), 4),  # fewer images than a vector: pooled one by one
    "cifar10_cnn": (lambda: LeNet5(3, 10, 32), (3, 32, 32), 16),
    "cifar100_cnn": (Cifar100CNN, (3, 32, 32), 3),  # 64 filters: several blocks of output channels
    "odd": (lambda: LeNet5(1, 7, 31), (1, 31, 31), 5),  # pooling drops a row and a column
}


def clients(model, shape, k: int, b: int, seed: int = 0):
    """Float32 parameters of ``k`` clients near ``model``'s, images with a flat region (pooling ties), labels."""
    g = torch.Generator().manual_seed(seed)
    params = {n: v.detach() + 0.05 * torch.randn(k, *v.shape, generator=g) for n, v in model.named_parameters()}
    x = torch.rand(k, b, *shape, generator=g)
    x[:, :, :, : shape[1] // 3] = 0.0
    y = torch.randint(0, getattr(model, model.fc_layers[-1]).out_features, (k, b), generator=g)
    return params, x, y


def module_float64(model, params, x, y):
    """vmap(grad_and_value(cross-entropy)) of the module in float64: the reference."""
    model = model.double()
    p64 = {n: v.double() for n, v in params.items()}
    return torch.vmap(grad_and_value(lambda p, xb, yb: F.cross_entropy(functional_call(model, p, (xb,)), yb)))(
        p64, x.double(), y
    )


def assert_native_equals_module(model, params, x, y):
    grads, losses = native_cnn.ce_grads(model, params, x, y)
    ref, ref_losses = module_float64(model, params, x, y)
    torch.testing.assert_close(losses.double(), ref_losses, rtol=1e-5, atol=1e-6)
    for name, g in ref.items():
        named = lambda m, name=name: f"{name}: {m}"  # noqa: E731
        torch.testing.assert_close(grads[name].double(), g, rtol=1e-4, atol=1e-6, msg=named)


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_equal_the_module(name):
    factory, shape, b = MODELS[name]
    torch.manual_seed(0)  # the weights too: another draw can put a pooling window's two largest within rounding
    model = factory()
    params, x, y = clients(model, shape, k=3, b=b)
    assert native_cnn.usable(model, params, x, y)
    assert_native_equals_module(model, params, x, y)


def test_the_comparison_fails_on_other_labels():
    """The check above can fail: the gradients of the labels shifted by one class are not the module's."""
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=2, b=20)
    grads, _ = native_cnn.ce_grads(model, params, x, (y + 1) % 10)
    ref, _ = module_float64(model, params, x, y)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(grads["fc3.bias"].double(), ref["fc3.bias"], rtol=1e-4, atol=1e-6)


def test_sgd_step_is_the_gradient_then_sgd():
    """``sgd=(lr, weight_decay)`` rounds as the engine's sgd does: p - lr (g + wd p), bit for bit."""
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=4, b=20)
    stepped, losses = native_cnn.ce_grads(model, params, x, y, sgd=(0.05, 1e-3))
    grads, grad_losses = native_cnn.ce_grads(model, params, x, y)
    for name, p in params.items():
        assert torch.equal(stepped[name], p - 0.05 * (grads[name] + 1e-3 * p)), name
    assert torch.equal(losses, grad_losses)


def test_threads_split_the_clients_not_the_result():
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=7, b=20)
    one = native_cnn.ce_grads(model, params, x, y, sgd=(0.1, 0.0))
    torch.set_num_threads(2)
    two = native_cnn.ce_grads(model, params, x, y, sgd=(0.1, 0.0))
    assert all(torch.equal(one[0][k], two[0][k]) for k in params) and torch.equal(one[1], two[1])


def test_engine_step_takes_the_kernel():
    """batched_cnn.ce_grads on float32 CPU tensors is the kernel's; float64, padded models and disabled() stay in
    PyTorch."""
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=3, b=20)
    a, b = batched_cnn.ce_grads(model, params, x, y), native_cnn.ce_grads(model, params, x, y)
    assert all(torch.equal(a[0][k], b[0][k]) for k in params)
    assert not native_cnn.usable(model, {k: v.double() for k, v in params.items()}, x.double(), y)
    padded = FedHDPCNN()
    assert not native_cnn.usable(padded, dict(padded.named_parameters()), x, y)
    with native_cnn.disabled():
        assert not native_cnn.usable(model, params, x, y)
        c = batched_cnn.ce_grads(model, params, x, y)  # PyTorch's formulation: another float32 summation order
    assert native_cnn.usable(model, params, x, y)
    assert not all(torch.equal(a[0][k], c[0][k]) for k in params)
    for k in params:
        torch.testing.assert_close(a[0][k], c[0][k], rtol=1e-4, atol=1e-6)


def distilled(logits_fn, model, teacher):
    """An AdaPeD-style loss of one client through ``logits_fn``: its cross-entropy plus a KL term to fixed teacher
    logits (the gradient reaches the logits through a loss the kernel does not compute itself)."""

    def loss(p, xb, yb, tb):
        out = logits_fn(model, p, xb)
        return F.cross_entropy(out, yb) + F.kl_div(
            F.log_softmax(out, -1), F.log_softmax(tb, -1), reduction="batchmean", log_target=True
        )

    return loss


def counted(fn, calls: list):
    """``fn``, appending its name to ``calls`` at each call."""

    def call(*args):
        calls.append(fn.__name__)
        return fn(*args)

    return call


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_under_vmap_take_the_kernel_and_equal_the_module(name, monkeypatch):
    """``batched_cnn.logits`` (the path of AdaPeD, pFedMe, QuPeD and FML) under vmap(grad) runs its forward and
    backward in the kernel, and the gradient of a loss the kernel does not know equals the module's in float64."""
    factory, shape, b = MODELS[name]
    torch.manual_seed(0)
    model = factory()
    params, x, y = clients(model, shape, k=3, b=b)
    teacher = torch.randn(3, b, getattr(model, model.fc_layers[-1]).out_features)
    calls = []
    for fn in ("forward", "backward"):
        monkeypatch.setattr(native_cnn, fn, counted(getattr(native_cnn, fn), calls))
    got = torch.vmap(grad_and_value(distilled(batched_cnn.logits, model, teacher)))(params, x, y, teacher)
    assert calls == ["forward", "backward"]  # every client in one call each
    module = lambda m, p, xb: functional_call(m, p, (xb,))  # noqa: E731
    p64 = {n: v.double() for n, v in params.items()}
    ref = torch.vmap(grad_and_value(distilled(module, model.double(), teacher.double())))(
        p64, x.double(), y, teacher.double()
    )
    torch.testing.assert_close(got[1].double(), ref[1], rtol=1e-5, atol=1e-6)
    for k in ref[0]:
        torch.testing.assert_close(got[0][k].double(), ref[0][k], rtol=1e-4, atol=1e-6, msg=k)


def test_the_logits_comparison_fails_on_another_clients_saved_activations():
    """The check above can fail: a backward given the activations its forward saved for the next client (the saved
    rows taken in another order) returns other gradients than the module's."""
    torch.manual_seed(0)
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=3, b=20)
    logits, saved = native_cnn.forward(model, params, x)
    dlogits = torch.randn_like(logits)
    right = native_cnn.backward(model, params, saved, dlogits, (1, 28, 28))
    wrong = native_cnn.backward(model, params, saved.roll(1, 0), dlogits, (1, 28, 28))
    ref = torch.vmap(lambda p, xb, d: torch.func.vjp(lambda q: functional_call(model, q, (xb,)), p)[1](d)[0])(
        params, x, dlogits
    )
    torch.testing.assert_close(right["conv1.weight"], ref["conv1.weight"], rtol=1e-4, atol=1e-5)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong["conv1.weight"], ref["conv1.weight"], rtol=1e-4, atol=1e-5)


def test_the_logits_path_at_one_and_two_threads_the_same_bits_and_shared_data():
    """Forward and backward split the clients over threads without changing a bit; data shared by every client
    (unmapped under vmap) and one client's plain autograd take the kernel too."""
    torch.manual_seed(0)
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=7, b=20)
    teacher = torch.randn(7, 20, 10)
    loss = distilled(batched_cnn.logits, model, teacher)
    one = torch.vmap(grad_and_value(loss))(params, x, y, teacher)
    torch.set_num_threads(2)
    two = torch.vmap(grad_and_value(loss))(params, x, y, teacher)
    assert torch.equal(one[1], two[1]) and all(torch.equal(one[0][k], two[0][k]) for k in params)
    torch.set_num_threads(1)
    shared = torch.vmap(grad_and_value(loss), in_dims=(0, None, 0, 0))(params, x[0], y, teacher)
    alone = {k: v[1].clone().requires_grad_(True) for k, v in params.items()}
    loss(alone, x[0], y[1], teacher[1]).backward()
    for k in params:
        torch.testing.assert_close(alone[k].grad, shared[0][k][1], rtol=1e-5, atol=1e-7)


def test_a_label_out_of_range_is_named():
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=3, b=20)
    y[2, 5] = 10
    with pytest.raises(IndexError, match=r"client 2 of the step has a label outside 0\.\.9"):
        native_cnn.ce_grads(model, params, x, y)


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    """No library loaded yet and an empty cache; the process's own state back afterwards."""
    monkeypatch.setattr(native_cnn, "_state", {})
    monkeypatch.setenv("FEDREPRO_CACHE", str(tmp_path))
    return tmp_path


def test_disabled_or_unbuildable_falls_back_to_torch(fresh_state, monkeypatch):
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=2, b=4)
    monkeypatch.setenv("FEDREPRO_NATIVE", "0")
    assert native_cnn.kernel() == "torch (FEDREPRO_NATIVE=0)" and not native_cnn.usable(model, params, x, y)
    grads, _ = batched_cnn.ce_grads(model, params, x, y)  # PyTorch's formulation
    ref, _ = module_float64(model, params, x, y)
    torch.testing.assert_close(grads["conv1.weight"].double(), ref["conv1.weight"], rtol=1e-4, atol=1e-6)

    monkeypatch.setattr(native_cnn, "_state", {})
    monkeypatch.setenv("FEDREPRO_NATIVE", "1")
    monkeypatch.setenv("CC", "false")  # a "compiler" that fails
    assert native_cnn.kernel().startswith("torch (false could not build native_cnn.c")
    assert list(fresh_state.iterdir()) == []  # no partial library left behind

    monkeypatch.setattr(native_cnn, "_state", {})
    monkeypatch.delenv("CC")
    monkeypatch.setenv("FEDREPRO_CACHE", str(fresh_state / "a-file" / "cache"))
    (fresh_state / "a-file").write_text("")  # the cache cannot be made
    assert native_cnn.kernel().startswith("torch (building or loading") and "FEDREPRO_CACHE" in native_cnn.kernel()


def test_builds_into_the_cache_once(fresh_state):
    assert native_cnn.kernel().startswith("native (native_cnn.c ")
    (built,) = fresh_state.glob("native_cnn-*.so")
    stamp = built.stat().st_mtime_ns
    native_cnn._state.clear()
    assert native_cnn.library() is not None and built.stat().st_mtime_ns == stamp  # loaded, not built again


def _cpu_flags() -> set[str]:
    try:
        line = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 targets")
@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])  # AVX2's 16 registers and 8-lane vectors; SSE2's
def test_builds_for_other_cpus_compute_the_same(fresh_state, monkeypatch, march):
    """The kernel's vector width and register blocks follow the target (-march=native here): the narrower targets a
    CPU without AVX-512 gets compute the same function."""
    if march == "x86-64-v3" and not {"avx2", "fma", "bmi2"} <= _cpu_flags():
        pytest.skip("this CPU cannot run an AVX2 build")
    monkeypatch.setattr(native_cnn, "FLAGS", ("-O3", f"-march={march}", "-fPIC", "-shared"))
    assert f"-march={march}" in native_cnn.kernel()
    torch.manual_seed(0)
    model = LeNet5()
    params, x, y = clients(model, (1, 28, 28), k=3, b=20)
    assert_native_equals_module(model, params, x, y)
