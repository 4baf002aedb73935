"""The engine's batched formulation of the CNNs (fedrepro.learning.batched_cnn): the hand-written forward and
backward equal the module's forward and autograd (with pooling ties and padding), the fused cross-entropy gradient
and the vmapped logits equal the module under the transforms, and every algorithm's history is the same with and
without vmap on a CNN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import assert_batched_equals_loop, make_quadrants, small_cnn
from torch import nn
from torch.func import functional_call, grad, grad_and_value
from torch.nn import functional as F

from fedrepro.learning import batched_cnn, engine
from fedrepro.learning.dp_fedavg import DPFedAvgServer
from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
from fedrepro.learning.fedavg import FedAvg, FedAvgFT
from fedrepro.learning.fml import FML
from fedrepro.learning.local import Local
from fedrepro.learning.models import MLP, Cifar100CNN, ConvNet, LeNet5
from fedrepro.learning.net import Net
from fedrepro.learning.perfedavg import PerFedAvg
from fedrepro.learning.pfedme import PFedMe
from fedrepro.learning.quped import QuPeD
from fedrepro.papers.adaped.adaped import AdaPeD
from fedrepro.papers.adaped.adaped_unsampled import AdaPeDUnsampled
from fedrepro.papers.fedhdp.cnn import FedHDPCNN
from fedrepro.papers.fedhdp.fedhdp import FedHDP
from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvg

pytestmark = pytest.mark.usefixtures("one_thread")


MODELS = {
    "lenet5": (LeNet5, (1, 28, 28)),
    "cifar10_cnn": (lambda: LeNet5(3, 10, 32), (3, 32, 32)),
    "cifar100_cnn": (Cifar100CNN, (3, 32, 32)),
    "fedhdp_cnn": (FedHDPCNN, (1, 28, 28)),  # padded 3x3 convolutions
    "odd": (lambda: FedHDPCNN(n_classes=5, input_hw=9), (1, 9, 9)),  # pooling drops a row and a column
}


def clients(model: nn.Module, shape, k: int = 5, b: int = 4, seed: int = 0):
    """Float64 parameters of ``k`` clients near ``model``'s, images with flat (tied) regions, labels."""
    g = torch.Generator().manual_seed(seed)
    model = model.double()
    params = {
        name: v.detach().expand(k, *v.shape) + 0.05 * torch.randn(k, *v.shape, generator=g, dtype=torch.float64)
        for name, v in model.named_parameters()
    }
    x = torch.randn(k, b, *shape, generator=g, dtype=torch.float64)
    x[:, :, :, : shape[1] // 3] = 0.0  # a flat region: bias-only outputs, ties in the pooling windows
    y = torch.randint(0, n_classes(model), (k, b), generator=g)
    return model, params, x, y


def n_classes(model: nn.Module) -> int:
    return getattr(model, model.fc_layers[-1]).out_features


def pooling_ties(model: nn.Module, x: torch.Tensor) -> int:
    """How many 2x2 windows of the first convolution's output (client 0) hold their maximum more than once."""
    z = getattr(model, model.conv_layers[0])(x[0]).detach()
    windows = z.unfold(2, 2, 2).unfold(3, 2, 2).flatten(-2)
    return int(((windows == windows.amax(-1, keepdim=True)).sum(-1) > 1).sum())


def module_logits_and_grads(model, params, x, dlogits):
    """The reference: the module's forward per client and its autograd parameter gradient for ``dlogits``."""
    out, pull = torch.func.vjp(lambda p: torch.vmap(lambda q, xb: functional_call(model, q, (xb,)))(p, x), params)
    return out, pull(dlogits)[0]


def assert_forward_backward_equal_module(model, params, x, forward=None, backward=None):
    forward, backward = forward or batched_cnn.forward, backward or batched_cnn.backward
    dlogits = torch.randn(*x.shape[:2], n_classes(model), dtype=x.dtype)
    ref, ref_grads = module_logits_and_grads(model, params, x, dlogits)
    logits, saved = forward(model, params, x)
    grads = backward(model, params, saved, dlogits, tuple(x.shape[2:]))
    torch.testing.assert_close(logits, ref, rtol=0, atol=1e-12)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=0, atol=1e-12, msg=name)


# ------------------------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_backward_equal_the_module(name):
    """Logits and every parameter's gradient equal the module's forward and autograd (float64), with ties."""
    factory, shape = MODELS[name]
    model, params, x, _ = clients(factory(), shape)
    assert pooling_ties(model, x) > 0  # the case where the pooling's gradient routing matters
    assert_forward_backward_equal_module(model, params, x)


def _rolled_pool_indices(model, params, saved, dlogits, feature_shape):
    """A backward that sends each pooling window's gradient to the neighbouring window's maximum."""
    saved = [s.roll(1, -1) if s.dtype == torch.int64 else s for s in saved]
    return batched_cnn.backward(model, params, saved, dlogits, feature_shape)


def _flipped_kernel_data_gradient(model, params, saved, dlogits, feature_shape):
    """A backward whose data gradient of conv2 uses the flipped kernel (convolution instead of correlation)."""
    return batched_cnn.backward(
        model, {**params, "conv2.weight": params["conv2.weight"].flip(-1, -2)}, saved, dlogits, feature_shape
    )


@pytest.mark.parametrize("wrong", [_rolled_pool_indices, _flipped_kernel_data_gradient])
def test_forward_backward_check_fails_on_a_wrong_backward(wrong):
    """The comparison above catches a backward that routes the pooling gradient to the wrong element, or forms
    a convolution's data gradient with the kernel the wrong way round."""
    model, params, x, _ = clients(FedHDPCNN(), (1, 28, 28))
    with pytest.raises(AssertionError):
        assert_forward_backward_equal_module(model, params, x, backward=wrong)


@pytest.mark.parametrize("chunk", [1, 2, None])
def test_ce_grads_equal_grad_of_the_cross_entropy(chunk):
    """The fused path, in chunks of clients (None: the default bound), equals vmap(grad_and_value(CE))."""
    model, params, x, y = clients(LeNet5(), (1, 28, 28), k=5)
    ref, ref_loss = torch.vmap(grad_and_value(lambda p, xb, yb: F.cross_entropy(functional_call(model, p, (xb,)), yb)))(
        params, x, y
    )
    grads, losses = batched_cnn.ce_grads(model, params, x, y, chunk)
    torch.testing.assert_close(losses, ref_loss, rtol=0, atol=1e-12)
    for name, g in ref.items():
        torch.testing.assert_close(grads[name], g, rtol=0, atol=1e-12, msg=name)


def test_logits_under_the_transforms():
    """``logits`` (the autograd.Function with vmap rules) under vmap(grad), vmap with chunks, vjp with data shared
    by every client (unmapped), plain autograd on one client; a second derivative is refused."""
    model, params, x, y = clients(FedHDPCNN(), (1, 28, 28), k=4)

    def ce(forward):
        return lambda p, xb, yb: F.cross_entropy(forward(model, p, xb), yb)

    module = lambda m, p, xb: functional_call(m, p, (xb,))  # noqa: E731
    ref = torch.vmap(grad(ce(module)))(params, x, y)
    for chunk in (None, 3):
        got = torch.vmap(grad(ce(batched_cnn.logits)), chunk_size=chunk)(params, x, y)
        for name in ref:
            torch.testing.assert_close(got[name], ref[name], rtol=0, atol=1e-12)

    def pulled(forward):
        def client(p):
            out, pull = torch.func.vjp(lambda q: forward(model, q, x[0]), p)
            return pull(torch.ones_like(out))[0]

        return torch.vmap(client)(params)

    got, want = pulled(batched_cnn.logits), pulled(module)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-12)

    one = {k: v[0].clone().requires_grad_(True) for k, v in params.items()}
    F.cross_entropy(batched_cnn.logits(model, one, x[0]), y[0]).backward()
    for name in ref:
        torch.testing.assert_close(one[name].grad, ref[name][0], rtol=0, atol=1e-12)

    first = {k: v[0] for k, v in params.items()}
    loss = ce(batched_cnn.logits)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        grad(lambda p: grad(loss)(p, x[0], y[0])["fc2.weight"].sum())(first)


def test_workspace_reuses_and_grows():
    ws = batched_cnn.Workspace()
    like = torch.zeros(1)
    a = ws("cols0", (2, 3), like)
    assert ws("cols0", (3, 2), like).data_ptr() == a.data_ptr()  # the same memory, another shape
    assert ws("cols0", (4, 4), like).shape == (4, 4)  # grown
    assert ws("z0", (2, 3), like).data_ptr() != ws("cols0", (2, 3), like).data_ptr()
    assert ws("cols0", (2,), torch.zeros(1, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize(
    "model, shape",
    [
        (LeNet5(), (1, 28, 28)),
        (LeNet5(3, 10, 32), (3, 32, 32)),
        (Cifar100CNN(), (3, 32, 32)),
        (FedHDPCNN(), (1, 28, 28)),
    ],
    ids=["lenet5", "cifar10_cnn", "cifar100_cnn", "fedhdp_cnn"],
)
def test_logits_equal_the_module(model, shape):
    torch.manual_seed(0)
    x = torch.rand(7, *shape)
    params = dict(model.named_parameters())
    torch.testing.assert_close(batched_cnn.logits(model, params, x), model(x), rtol=0, atol=2e-5)
    batched = batched_cnn.forward(
        model, {k: v.detach()[None].expand(2, *v.shape) for k, v in params.items()}, x.expand(2, *x.shape)
    )[0]
    torch.testing.assert_close(batched, model(x).detach().expand(2, *batched.shape[1:]), rtol=0, atol=2e-5)
    assert batched_cnn.supports(model)


def test_supports_only_what_it_computes():
    class Strided(ConvNet):
        fc_layers = ("fc1",)

        def __init__(self, stride=1, padding=0, bias=True):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3, stride=stride, padding=padding, bias=bias)
            self.conv2 = nn.Conv2d(2, 2, 1)
            self.fc1 = nn.Linear(8 if stride == 1 else 2, 3)

    assert batched_cnn.supports(Strided()) and batched_cnn.supports(FedHDPCNN())
    for model in (Strided(stride=2), Strided(padding="same"), Strided(bias=False)):
        assert not batched_cnn.supports(model)
        assert not Net(model).gemm
        with pytest.raises(ValueError, match="gemm=True"):
            Net(model, gemm=True)
    assert not batched_cnn.supports(MLP(4, 3)) and Net(MLP(4, 3)).formulation is not batched_cnn
    assert Net(LeNet5()).gemm and not Net(LeNet5(), gemm=False).gemm


def test_net_switches_formulation(monkeypatch):
    """The batched formulation runs only under vectorize=True (the fused cross-entropy gradient for
    client_grads / client_sgd, the vmapped logits for everything else); the loop runs the module's forward."""
    calls = []
    for fn in ("logits", "ce_grads"):
        real = getattr(batched_cnn, fn)
        monkeypatch.setattr(batched_cnn, fn, lambda *a, fn=fn, real=real, **kw: calls.append(fn) or real(*a, **kw))
    net = Net(small_cnn())
    params = net.replicate(2)
    x, y = torch.rand(2, 3, 1, 8, 8), torch.zeros(2, 3, dtype=torch.long)
    engine.client_grads(net, params, x, y)
    engine.client_sgd(net, params, x, y, 0.1)
    net.map(lambda p, xb: net.logits(p, xb), params, x)
    assert calls == ["ce_grads", "ce_grads", "logits"]
    net.vectorize = False
    engine.client_grads(net, params, x, y)
    engine.client_sgd(net, params, x, y, 0.1)
    net.map(lambda p, xb: net.logits(p, xb), params, x)
    assert calls == ["ce_grads", "ce_grads", "logits"]


def test_train_gemm_switch(quadrants):
    """engine.train(gemm=...): both formulations give the same history; an unsupported model is refused."""
    kw = dict(batch_size=5, lr=0.2, rounds=3, tau=3, clients_per_round=4, seed=1)
    on = engine.train(FedAvg(), quadrants, small_cnn, gemm=True, **kw)
    off = engine.train(FedAvg(), quadrants, small_cnn, gemm=False, **kw)
    for a, b in zip(on, off):
        assert a.pop("round_losses") == pytest.approx(b.pop("round_losses"), abs=1e-6)
        assert a == pytest.approx(b, abs=1e-6)
    with pytest.raises(ValueError, match="gemm=True"):
        engine.train(FedAvg(), quadrants, lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 4)), gemm=True, **kw)


# --------------------------------------------------------------------------------------- every algorithm

N_CLIENTS = 8
PRIVATE = np.arange(N_CLIENTS) % 4 != 1  # clients 1 and 5 opt out
DP = {"clip": 0.5, "noise_multiplier": 0.5}
CLIP = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 1.0}
ALGORITHMS = {
    "local": Local(),
    "fedavg": FedAvg(),
    "fedavg_ft": FedAvgFT(ft_steps=2),
    "dp_fedavg": FedAvg(dp=DP),
    "dp_fedavg_server": DPFedAvgServer(server_dp=DP),
    "adaped": AdaPeD(psi0=1.0),
    "dp_adaped": AdaPeD(dp_mu=DP, dp_psi=DP),
    "adaped_unsampled": AdaPeDUnsampled(),
    "pfedme": PFedMe(),
    "perfedavg": PerFedAvg(),
    "quped": QuPeD(),
    "fml": FML(),
    "dp_fedavg_adaptive": DPFedAvgAdaptive(noise_multiplier=0.5, clip=CLIP, lams=[0.1]),
    "fedhdp": FedHDP(private=PRIVATE, r=0.5, noise_multiplier=0.5, clip=CLIP, lams=[0.1]),
    "hdp_fedavg": HDPFedAvg(private=PRIVATE, noise_multiplier=0.5, clip=CLIP),
}
LR = {"fml": 0.5}  # at 0.2 FML's accuracy stays flat over the 4 rounds here


@pytest.fixture(scope="module")
def quadrants():
    return make_quadrants(n_clients=N_CLIENTS, n_train=20, n_test=12)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_batched_equals_loop_on_a_cnn(quadrants, name):
    """The batched formulation (vmap, im2col + bmm) and the loop (the module's F.conv2d) agree to 1e-6 on a CNN,
    as on the MLP: float32 rounding (~1e-7 relative per layer) stays below it over these few steps."""
    assert_batched_equals_loop(ALGORITHMS[name], quadrants, small_cnn, clients_per_round=4, lr=LR.get(name, 0.2))


@pytest.mark.parametrize("broken", ["logits", "ce_grads"])
def test_batched_equals_loop_fails_when_the_formulations_differ(quadrants, monkeypatch, broken):
    """The check above can fail: a formulation that drops the last bias (logits) or its update (ce_grads) is
    caught, each on an algorithm that uses it."""
    if broken == "logits":
        real = batched_cnn.logits

        def wrong(model, params, x):
            return real(model, params, x) - params[f"{model.fc_layers[-1]}.bias"]

        monkeypatch.setattr(batched_cnn, "logits", wrong)
        algorithm = AdaPeD(psi0=1.0)
    else:
        real = batched_cnn.ce_grads

        def wrong(model, params, x, y, chunk=None, sgd=None):
            out, losses = real(model, params, x, y, chunk, sgd)
            bias = f"{model.fc_layers[-1]}.bias"
            out[bias].copy_(params[bias])  # the last bias not trained
            return out, losses

        monkeypatch.setattr(batched_cnn, "ce_grads", wrong)
        algorithm = FedAvg()
    with pytest.raises(AssertionError):
        assert_batched_equals_loop(algorithm, quadrants, small_cnn, clients_per_round=4)
