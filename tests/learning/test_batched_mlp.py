"""The engine's batched formulation of the MLPs (fedrepro.learning.batched_mlp): the hand-written gradient and the
fused SGD step (with and without Ditto's proximal term) equal autograd of the module in float64; the comparison
fails on a wrong backward; the engine takes the path on CPU and its histories equal the per-client loop."""

from __future__ import annotations

import pytest
import torch
from learning_helpers import assert_batched_equals_loop, make_quadrants
from torch.func import functional_call, grad_and_value
from torch.nn import functional as F

from fedrepro.learning import batched_mlp, engine
from fedrepro.learning.models import MLP, LeNet5
from fedrepro.learning.net import Net

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = {"one hidden layer": (12, 5, (7,)), "two hidden layers": (12, 5, (7, 6)), "no hidden layer": (12, 5, ())}


def clients(model: MLP, k: int = 4, b: int = 6, seed: int = 0):
    """Float64 parameters of ``k`` clients near ``model``'s, inputs (some rows all zero: bias-only units), labels."""
    g = torch.Generator().manual_seed(seed)
    model = model.double()
    params = {
        name: v.detach().expand(k, *v.shape) + 0.3 * torch.randn(k, *v.shape, generator=g, dtype=torch.float64)
        for name, v in model.named_parameters()
    }
    x = torch.randn(k, b, model.hidden[0].in_features if model.hidden else model.out.in_features, generator=g)
    x = x.double()
    x[:, 0] = 0.0
    y = torch.randint(0, model.out.out_features, (k, b), generator=g)
    return model, params, x, y


def reference(model, params, x, y):
    """vmap(grad_and_value) of the module's mean cross-entropy: the gradients the formulation must equal."""
    loss = lambda p, xb, yb: F.cross_entropy(functional_call(model, p, (xb,)), yb)  # noqa: E731
    return torch.vmap(grad_and_value(loss))(params, x, y)


def assert_grads_equal_autograd(model, params, x, y):
    ref, ref_loss = reference(model, params, x, y)
    grads, losses = batched_mlp.ce_grads(model, params, x, y)
    torch.testing.assert_close(losses, ref_loss, rtol=0, atol=1e-12)
    for name, g in ref.items():
        torch.testing.assert_close(grads[name], g, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_ce_grads_equal_autograd(shape):
    model, params, x, y = clients(MLP(*SHAPES[shape]))
    assert batched_mlp.supports(model)
    assert_grads_equal_autograd(model, params, x, y)
    torch.testing.assert_close(
        batched_mlp.forward(model, params, x)[0],
        torch.vmap(lambda p, xb: functional_call(model, p, (xb,)))(params, x),
        rtol=0,
        atol=1e-12,
    )


def test_grad_check_fails_on_a_wrong_backward(monkeypatch):
    """The comparison above catches a backward whose ReLU mask is wrong (every unit passes its gradient)."""
    model, params, x, y = clients(MLP(*SHAPES["two hidden layers"]))
    real = batched_mlp.forward

    def unmasked(model, params, x):  # the layer inputs a backward sees: negative pre-activations kept
        logits, inputs = real(model, params, x)
        return logits, [inputs[0]] + [h - 1.0 for h in inputs[1:]]

    monkeypatch.setattr(batched_mlp, "forward", unmasked)
    with pytest.raises(AssertionError):
        assert_grads_equal_autograd(model, params, x, y)


@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
@pytest.mark.parametrize("prox", [None, "mixed", "uniform"])
def test_fused_step_equals_gradient_then_step(prox, inplace):
    """``sgd=(lr, wd)`` gives p - lr (g + wd p); with ``prox=(lam, anchor)`` p - lr (g + wd p + lam_k (p - anchor)),
    for per-client lambdas and for one lambda shared by all (there with lr (wd + lam) = 1: no division by the
    decay). ``inplace`` overwrites the inputs with the result; otherwise they are untouched."""
    model, params, x, y = clients(MLP(*SHAPES["two hidden layers"]))
    lr, wd = 0.3, 0.01
    lam = {
        None: None,
        "mixed": torch.tensor([0.0, 0.5, 2.0, 0.05], dtype=torch.float64),
        "uniform": torch.full((4,), 1 / lr - wd, dtype=torch.float64),
    }[prox]
    anchor = {k: v[0] * 0.5 for k, v in params.items()}
    ref, _ = reference(model, params, x, y)
    before = {k: v.clone() for k, v in params.items()}
    stepped, _ = batched_mlp.ce_grads(
        model, params, x, y, sgd=(lr, wd), prox=None if lam is None else (lam, anchor), inplace=inplace
    )
    for k, p in before.items():
        pull = 0.0 if lam is None else lam.reshape(-1, *([1] * (p.dim() - 1))) * (p - anchor[k])
        torch.testing.assert_close(stepped[k], p - lr * (ref[k] + wd * p + pull), rtol=0, atol=1e-12, msg=k)
        assert (stepped[k].data_ptr() == params[k].data_ptr()) == inplace
        if not inplace:
            torch.testing.assert_close(params[k], p, rtol=0, atol=0)
    with pytest.raises(ValueError, match="prox needs sgd"):
        batched_mlp.ce_grads(model, params, x, y, prox=(torch.zeros(4), anchor))


@pytest.mark.parametrize("vectorize", [True, False])
def test_engine_prox_step_is_dittos_rule(vectorize):
    """engine.client_sgd(prox=...) on the formulation and on the per-client loop: Ditto's personal step."""
    model, params, x, y = clients(MLP(*SHAPES["one hidden layer"]))
    params = {k: v.float() for k, v in params.items()}
    x = x.float()
    net = Net(model.float(), vectorize=vectorize)
    lam = torch.tensor([0.0, 0.5, 2.0, 0.05])
    anchor = {k: v[1].clone() for k, v in params.items()}
    got, _ = engine.client_sgd(net, params, x, y, 0.2, 0.01, prox=(lam, anchor))
    grads, _ = engine.client_grads(net, params, x, y)
    for k, p in params.items():
        lam_k = lam.reshape(-1, *([1] * (p.dim() - 1)))
        want = p - 0.2 * (grads[k] + lam_k * (p - anchor[k]) + 0.01 * p)
        torch.testing.assert_close(got[k], want, rtol=1e-5, atol=1e-6, msg=k)


def test_net_takes_the_formulation_of_the_model():
    assert Net(MLP(4, 3)).formulation is batched_mlp
    assert Net(MLP(4, 3), gemm=False).formulation is None
    assert Net(LeNet5()).formulation is not batched_mlp


@pytest.mark.parametrize("name", ["fedavg", "dp_fedavg_adaptive", "fedhdp"])
def test_engine_on_the_formulation_equals_the_loop(name):
    """A few algorithms' histories on an MLP, formulation vs per-client loop (test_engine covers every algorithm
    on the MLP; these carry Ditto's personal models, the path FedHDP's tables take)."""
    import numpy as np

    from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
    from fedrepro.learning.fedavg import FedAvg
    from fedrepro.papers.fedhdp.fedhdp import FedHDP

    clip = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 1.0}
    private = np.arange(8) % 4 != 1
    algorithm = {
        "fedavg": FedAvg(),
        "dp_fedavg_adaptive": DPFedAvgAdaptive(noise_multiplier=0.5, clip=clip, lams=[0.1, 1.0]),
        "fedhdp": FedHDP(private=private, r=0.5, noise_multiplier=0.5, clip=clip, lams=[0.1, (0.5, 0.05)]),
    }[name]
    data = make_quadrants(n_clients=8, n_train=20, n_test=12)
    assert_batched_equals_loop(algorithm, data, lambda: MLP(64, 4, (16,)), clients_per_round=4)
