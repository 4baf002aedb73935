"""The engine's batched formulation of the CNNs (fedrepro.learning.batched_cnn): im2col + matmul equals
F.conv2d and its gradients, pool-then-ReLU equals ReLU-then-pool with ties, the logits equal the module's forward,
and every algorithm's history is the same with and without vmap on a CNN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import assert_batched_equals_loop, make_quadrants, small_cnn
from torch import nn
from torch.nn import functional as F

from fedrepro.learning import batched_cnn, engine
from fedrepro.learning.dp_fedavg import DPFedAvgServer
from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
from fedrepro.learning.fedavg import FedAvg, FedAvgFT
from fedrepro.learning.fml import FML
from fedrepro.learning.local import Local
from fedrepro.learning.models import MLP, Cifar100CNN, ConvNet, FedHDPCNN, LeNet5
from fedrepro.learning.net import Net
from fedrepro.learning.perfedavg import PerFedAvg
from fedrepro.learning.pfedme import PFedMe
from fedrepro.learning.quped import QuPeD
from fedrepro.papers.adaped.adaped import AdaPeD
from fedrepro.papers.adaped.adaped_unsampled import AdaPeDUnsampled
from fedrepro.papers.fedhdp.fedhdp import FedHDP
from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvg

pytestmark = pytest.mark.usefixtures("one_thread")


def batch_last(x: torch.Tensor) -> torch.Tensor:
    return x.permute(1, 2, 3, 0)


# ------------------------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize("channels, kernel, padding", [(1, (5, 5), (0, 0)), (3, (3, 2), (1, 0)), (4, (3, 3), (1, 1))])
def test_conv2d_and_its_gradients_equal_torch(channels, kernel, padding):
    torch.manual_seed(0)
    x = torch.randn(5, channels, 9, 8, dtype=torch.float64)
    w = torch.randn(6, channels, *kernel, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    g = torch.randn_like(F.conv2d(x, w, b, padding=padding))

    def ours(x, w, b):
        return batched_cnn.conv2d(batch_last(x).contiguous(), w, b, padding).permute(3, 0, 1, 2)

    def torchs(x, w, b):
        return F.conv2d(x, w, b, padding=padding)

    out, vjp_ours = torch.func.vjp(ours, x, w, b)
    ref, vjp_ref = torch.func.vjp(torchs, x, w, b)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, r in zip(vjp_ours(g), vjp_ref(g)):  # d/dx is col2im (Im2col.backward), d/dw and d/db the matmul's
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)
    # the same under vmap over 3 "clients" with their own weights
    xs, ws, bs = (
        torch.randn(3, *x.shape, dtype=x.dtype),
        torch.randn(3, *w.shape, dtype=w.dtype),
        torch.randn(3, 6, dtype=b.dtype),
    )
    gs = torch.randn(3, *g.shape, dtype=g.dtype)
    batched = torch.func.vjp(torch.vmap(ours), xs, ws, bs)[1](gs)
    for i in range(3):
        for a, r in zip(batched, torch.func.vjp(torchs, xs[i], ws[i], bs[i])[1](gs[i])):
            torch.testing.assert_close(a[i], r, rtol=0, atol=1e-12)


def test_im2col_gradient_is_checked():
    """gradcheck of Im2col.backward (col2im) against finite differences; and a wrong col2im fails it."""
    h = torch.randn(2, 6, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: batched_cnn.Im2col.apply(t, 3, 2), (h,))

    class Broken(batched_cnn.Im2col):
        @staticmethod
        def backward(ctx, grad_cols):
            grad_h, _, _ = batched_cnn.Im2col.backward(ctx, grad_cols)
            return grad_h.roll(1, dims=1), None, None  # the slice-adds one row off

    assert not torch.autograd.gradcheck(lambda t: Broken.apply(t, 3, 2), (h,), raise_exception=False)


def test_pool_before_relu_is_relu_before_pool_with_ties():
    """Same values and the same gradient element, including ties at a positive value (a flat image region gives
    bias-only outputs) and windows whose max is <= 0."""
    z = torch.tensor(
        [
            [
                [
                    [0.5, 0.5, -1.0, -2.0, 0.0, 0.3],
                    [0.5, 0.2, -3.0, -1.0, 0.0, 0.3],
                    [0.0, -1.0, 2.0, 1.0, 0.7, 0.7],
                    [-0.0, 0.0, 2.0, 2.0, 0.7, 0.7],
                ]
            ]
        ],
        dtype=torch.float64,
    )  # (B=1, C=1, 4, 6)
    z = torch.cat([z, -z.flip(-1)], 1)  # two channels
    g = torch.arange(1.0, 1 + 2 * 2 * 3, dtype=z.dtype).view(1, 2, 2, 3)
    ref, ref_vjp = torch.func.vjp(lambda t: F.max_pool2d(F.relu(t), 2), z)
    ours, ours_vjp = torch.func.vjp(lambda t: batched_cnn.max_pool_relu(batch_last(t), 2).permute(3, 0, 1, 2), z)
    assert torch.equal(ours, ref)
    assert torch.equal(ours_vjp(g)[0], ref_vjp(g)[0])
    assert ours_vjp(g)[0].count_nonzero() == 6  # the windows with a positive max, one element each


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
    for model in (Strided(stride=2), Strided(padding="same"), Strided(bias=False), MLP(4, 3)):
        assert not batched_cnn.supports(model)
        assert not Net(model).gemm
        with pytest.raises(ValueError, match="gemm=True"):
            Net(model, gemm=True)
    assert Net(LeNet5()).gemm and not Net(LeNet5(), gemm=False).gemm


def test_net_switches_formulation(monkeypatch):
    """The batched formulation runs only under vectorize=True; the loop runs the module's forward."""
    calls = []
    real = batched_cnn.logits
    monkeypatch.setattr(batched_cnn, "logits", lambda *a: calls.append(1) or real(*a))
    net = Net(small_cnn())
    params = net.replicate(2)
    x, y = torch.rand(2, 3, 1, 8, 8), torch.zeros(2, 3, dtype=torch.long)
    engine.client_grads(net, params, x, y)
    assert calls == [1]
    net.vectorize = False
    engine.client_grads(net, params, x, y)
    assert calls == [1]


def test_train_gemm_switch(quadrants):
    """engine.train(gemm=...): both formulations give the same history; an unsupported model is refused."""
    kw = dict(batch_size=5, lr=0.2, rounds=3, tau=3, clients_per_round=4, seed=1)
    on = engine.train(FedAvg(), quadrants, small_cnn, gemm=True, **kw)
    off = engine.train(FedAvg(), quadrants, small_cnn, gemm=False, **kw)
    for a, b in zip(on, off):
        assert a == pytest.approx(b, abs=1e-6)
    with pytest.raises(ValueError, match="gemm=True"):
        engine.train(FedAvg(), quadrants, lambda: MLP(64, 4), gemm=True, **kw)


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


def test_batched_equals_loop_fails_when_the_formulations_differ(quadrants, monkeypatch):
    """The check above can fail: a formulation that drops the last bias is caught."""
    real = batched_cnn.logits

    def wrong(model, params, x):
        return real(model, params, x) - params[f"{model.fc_layers[-1]}.bias"]

    monkeypatch.setattr(batched_cnn, "logits", wrong)
    with pytest.raises(AssertionError):
        assert_batched_equals_loop(FedAvg(), quadrants, small_cnn, clients_per_round=4)
