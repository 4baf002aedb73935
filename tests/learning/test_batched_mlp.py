"""The engine's batched formulation of the MLPs (fedrepro.learning.batched_mlp): the hand-written gradient and the
fused SGD step (with and without Ditto's proximal term) equal autograd of the module in float64; the comparison
fails on a wrong backward; the engine takes the path on CPU and its histories equal the per-client loop."""

from __future__ import annotations

import pytest
import torch
from learning_helpers import assert_batched_equals_loop, assert_trained_alike, ditto_host, make_quadrants
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


def _sets(model, params, n_sets: int = 4):
    """``n_sets`` float64 parameter sets of the same clients, each perturbed differently."""
    g = torch.Generator().manual_seed(7)
    return [
        {k: v + 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in params.items()}
        for _ in range(n_sets)
    ]


def test_sets_side_by_side_step_as_each_set_alone():
    """Ditto's sets laid side by side (the global-model copy with weight decay, a lambda shared by all clients
    with and without decay: the one-pass pull to the anchor, per-client lambdas): one step of all of them, the first
    layer as one GEMM, equals each set's own fused step in float64; so do slices of the laid-out clients' rows (a
    client block), and the layout leaves the given sets untouched."""
    model, params, x, y = clients(MLP(*SHAPES["two hidden layers"]))
    lr = 0.3
    anchor = {k: v[0] * 0.5 for k, v in params.items()}
    uniform, mixed = torch.full((4,), 0.7, dtype=torch.float64), torch.tensor([0.0, 0.5, 2.0, 0.05]).double()
    decays = [(0.01, None), (0.0, (uniform, anchor)), (0.01, (uniform, anchor)), (0.01, (mixed, anchor))]
    sets = _sets(model, params)
    before = [{k: v.clone() for k, v in p.items()} for p in sets]
    laid = batched_mlp.side_by_side(model, sets)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(sets, before) for k in a)
    rows = slice(1, 3)
    block = [{k: v[rows] for k, v in p.items()} for p in laid]
    lam_rows = [(wd, None if prox is None else (prox[0][rows], anchor)) for wd, prox in decays]
    losses = batched_mlp.sgd_steps_side_by_side(model, block, x[rows], y[rows], lr, lam_rows)
    assert losses is not None and len(losses) == 4
    for s, (p, (wd, prox)) in enumerate(zip(before, decays)):
        want, want_loss = batched_mlp.ce_grads(model, p, x, y, sgd=(lr, wd), prox=prox)
        torch.testing.assert_close(losses[s], want_loss[rows], rtol=0, atol=1e-12)
        for k in p:
            torch.testing.assert_close(laid[s][k][rows], want[k][rows], rtol=0, atol=1e-12, msg=f"set {s} {k}")
            torch.testing.assert_close(laid[s][k][0], p[k][0], rtol=0, atol=0)  # rows outside the block: untouched


def test_sets_not_side_by_side_are_not_stepped_together():
    """Sets whose first layers are separate tensors (or laid out in another order) are left to step alone."""
    model, params, x, y = clients(MLP(*SHAPES["one hidden layer"]))
    sets = _sets(model, params, 2)
    decays = [(0.0, None), (0.0, None)]
    assert batched_mlp.sgd_steps_side_by_side(model, sets, x, y, 0.1, decays) is None
    laid = batched_mlp.side_by_side(model, sets)
    assert batched_mlp.sgd_steps_side_by_side(model, laid[::-1], x, y, 0.1, decays) is None
    assert batched_mlp.sgd_steps_side_by_side(model, laid, x, y, 0.1, decays) is not None


def test_the_side_by_side_check_fails_where_the_shared_product_is_wrong(monkeypatch):
    """The comparison above catches a first-layer step that takes one set's gradient for another's (the columns
    of the shared gradient shifted by one set)."""
    real = torch.Tensor.baddbmm_

    def shifted(self, a, b, **kw):
        return real(self, a.roll(a.shape[1] // 4, dims=1), b, **kw) if a.shape[1] == 4 * 7 else real(self, a, b, **kw)

    monkeypatch.setattr(torch.Tensor, "baddbmm_", shifted)
    with pytest.raises(AssertionError):
        test_sets_side_by_side_step_as_each_set_alone()


@pytest.mark.parametrize("name", ["dp_fedavg_adaptive", "fedhdp"])
def test_dittos_sets_step_together_in_training_as_one_at_a_time(name, monkeypatch):
    """The algorithms carrying Ditto's sets take their local steps side by side (every step of every round) and
    train as with the sets stepping one at a time: the same history and models, to float32 rounding."""
    from fedrepro.learning.ditto import Ditto

    data = make_quadrants(n_clients=8, n_train=20, n_test=12)
    kw = dict(rounds=3, batch_size=5, lr=0.2, tau=3, clients_per_round=4, seed=3, eval_every=1)
    real, together = batched_mlp.sgd_steps_side_by_side, []

    def counted(*a, **k):
        losses = real(*a, **k)
        together.append(losses is not None)
        return losses

    monkeypatch.setattr(batched_mlp, "sgd_steps_side_by_side", counted)
    alg = ditto_host(name)
    side = engine.train(alg, data, lambda: MLP(64, 4, (16,)), **kw), alg.final_models()
    assert len(together) == 3 * 3 and all(together)
    monkeypatch.setattr(Ditto, "together", lambda self, st, net: False)
    alg = ditto_host(name)
    alone = engine.train(alg, data, lambda: MLP(64, 4, (16,)), **kw), alg.final_models()
    assert len(together) == 9 and len({h["test_acc"] for h in side[0]}) > 1
    assert_trained_alike(side, alone)
