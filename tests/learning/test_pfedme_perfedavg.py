"""pFedMe and Per-FedAvg (FO) baselines on the batched engine: learning, one local step against plain autograd, the
proximal inner solve, Per-FedAvg with alpha = 0 == a FedAvg step on D', vmap == per-client loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import C, D, assert_batched_equals_loop, mlp
from torch.func import functional_call
from torch.nn import functional as F

from fedrepro.learning import engine
from fedrepro.learning.data import ClientData
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.models import Linear
from fedrepro.learning.net import sgd, stack
from fedrepro.learning.perfedavg import PerFedAvg
from fedrepro.learning.pfedme import PFedMe

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    """8 clients, 3 of 6 Gaussian-blob classes each (pathological non-IID), 60 train / 30 test rows per client."""
    return blobs_factory(seed=1)


def grads_of(model, params, x, y):
    """Plain-autograd gradient of one client's mean cross-entropy."""
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    loss = F.cross_entropy(functional_call(model, p, (x,)), y)
    return dict(zip(p, torch.autograd.grad(loss, list(p.values()))))


def assert_params_close(a, b, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-5)


ALGORITHMS = {
    "pfedme": PFedMe(),
    "pfedme_k2": PFedMe(lam=0.1, personal_lr=0.1, beta=0.7),
    "perfedavg": PerFedAvg(),
    "perfedavg_k2": PerFedAvg(alpha=1e-4, eval_steps=2),
}


@pytest.mark.parametrize("name", ["pfedme", "perfedavg"])
def test_beats_chance(blobs, name):
    hist = engine.train(
        ALGORITHMS[name], blobs, mlp, batch_size=10, lr=0.1, rounds=20, tau=5, clients_per_round=4, eval_every=10
    )
    assert [h["round"] for h in hist] == [10, 20]
    assert hist[-1]["test_acc"] > 0.8  # chance: 1/3 per client (1/6 over all classes)
    assert np.isfinite(hist[-1]["train_loss"])


# ------------------------------------------------------------------------------------------------------ pFedMe


def pfedme_reference(model, w, theta, x, y, lr, lam, eta_p, inner, wd):
    """One client's pFedMe local step (userpFedMe.train) with plain autograd: K_p prox steps on the same batch."""
    for _ in range(inner):
        g = grads_of(model, theta, x, y)
        theta = {k: v - eta_p * (g[k] + lam * (v - w[k]) + wd * v) for k, v in theta.items()}
    return {k: v - lr * lam * (v - theta[k]) for k, v in w.items()}, theta


@pytest.mark.parametrize("restart", [True, False], ids=["restart", "keep_theta"])
def test_pfedme_steps_match_reference(restart):
    torch.manual_seed(0)
    model, m, lr, lam, eta_p, inner, wd, beta = mlp(), 5, 0.3, 0.7, 0.15, 3, 1e-2, 0.6
    algo = PFedMe(
        lam=lam, personal_lr=eta_p, inner_steps=inner, beta=beta, weight_decay=wd, restart_from_global=restart
    )
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    state.global_params = {k: v + 0.2 * torch.randn_like(v) for k, v in state.global_params.items()}  # w != init
    state.theta = {k: v + 0.3 * torch.randn_like(v) for k, v in state.theta.items()}  # distinct theta_hat_i
    theta0 = {k: v.clone() for k, v in state.theta.items()}
    w0 = dict(state.global_params)
    sel = torch.tensor([0, 2, 3])
    algo.start_round(state, sel)
    batches = [(torch.randn(3, 7, D), torch.randint(0, C, (3, 7))) for _ in range(2)]
    for x, y in batches:  # two local steps: the second solve is warm-started from the first theta_hat
        losses = algo.local_step(state, x, y, sel, lr)
        assert losses.shape == (3,)
    ref_w = []
    for j, i in enumerate(sel.tolist()):
        w, theta = dict(w0), (w0 if restart else {k: v[i] for k, v in theta0.items()})
        for x, y in batches:
            w, theta = pfedme_reference(model, w, theta, x[j], y[j], lr, lam, eta_p, inner, wd)
        assert_params_close({k: v[j] for k, v in state.local.items()}, w)
        assert_params_close({k: v[i] for k, v in state.theta.items()}, theta)
        ref_w.append(w)
    for i in (1, 4):  # not selected: deployed models untouched
        assert all(torch.equal(state.theta[k][i], theta0[k][i]) for k in theta0)
    algo.sync(state, sel)
    assert state.local is None
    assert_params_close(
        state.global_params, {k: (1 - beta) * w0[k] + beta * torch.stack([w[k] for w in ref_w]).mean(0) for k in w0}
    )
    assert algo.deployed_params(state) is state.theta


def test_pfedme_deploys_local_model_as_official_code():
    """deployed="local": each client deploys its w_i of its last period (the official code's personalized
    evaluation), a client never selected the template initialization; the training itself is unchanged."""
    torch.manual_seed(2)
    model, m = mlp(), 5
    x, y = torch.randn(2, 7, D), torch.randint(0, C, (2, 7))
    runs = {}
    for deployed in ("theta", "local"):
        algo = PFedMe(lam=0.5, personal_lr=0.1, deployed=deployed)
        state = algo.init_state(engine.Net(model), m, torch.Generator())
        init = {k: v.clone() for k, v in algo.deployed_params(state).items()}
        sel = torch.tensor([1, 3])
        algo.start_round(state, sel)
        algo.local_step(state, x, y, sel, 0.2)
        local = {k: v.clone() for k, v in state.local.items()}
        algo.sync(state, sel)
        runs[deployed] = state
    theta, local_state = runs["theta"], runs["local"]
    assert_params_close(local_state.global_params, theta.global_params, atol=0)
    assert_params_close(local_state.theta, theta.theta, atol=0)
    deployed = PFedMe(deployed="local").deployed_params(local_state)
    for k in init:
        torch.testing.assert_close(deployed[k][sel], local[k], atol=0, rtol=0)
        torch.testing.assert_close(deployed[k][[0, 2, 4]], init[k][[0, 2, 4]], atol=0, rtol=0)
        assert not torch.equal(deployed[k][sel], local_state.theta[k][sel])
    assert PFedMe().deployed_params(theta) is theta.theta
    with pytest.raises(ValueError, match="deployed"):
        PFedMe(deployed="w")


def test_pfedme_inner_solve_is_proximal():
    """Many inner steps reach the prox point: grad f(theta) + lam (theta - w) + wd theta = 0 (softmax regression, so
    the inner problem is strongly convex); a large lam pins theta_hat to w and the w update becomes (approximately) a
    gradient step at w."""
    torch.manual_seed(3)
    model, m, lr = Linear(D, C), 4, 0.2
    x, y = torch.randn(m, 12, D), torch.randint(0, C, (m, 12))
    sel = torch.arange(m)
    dist = {}
    for lam, eta_p in ((3.0, 0.2), (1e3, 5e-4)):
        algo = PFedMe(lam=lam, personal_lr=eta_p, inner_steps=150, weight_decay=1e-3)
        state = algo.init_state(engine.Net(model), m, torch.Generator())
        w = dict(state.global_params)
        algo.start_round(state, sel)
        algo.local_step(state, x, y, sel, lr)
        grads, _ = engine.client_grads(state.net, state.theta, x, y)
        for k, t in state.theta.items():
            residual = grads[k] + lam * (t - w[k]) + 1e-3 * t
            assert residual.abs().max() < 1e-4, k
        dist[lam] = max(float((t - w[k]).abs().max()) for k, t in state.theta.items())
        if lam > 100:  # w_i <- w_i - lr lam (w_i - theta_hat) ~ w_i - lr (grad f(w_i) + wd w_i)
            g_w, _ = engine.client_grads(state.net, stack(w, m), x, y)
            for k, v in state.local.items():
                torch.testing.assert_close(v, w[k] - lr * (g_w[k] + 1e-3 * w[k]), atol=1e-4, rtol=0)
    assert dist[1e3] < 1e-3 < dist[3.0]


# -------------------------------------------------------------------------------------------------- Per-FedAvg


def test_perfedavg_step_matches_reference():
    torch.manual_seed(1)
    model, m, B, lr, alpha, wd = mlp(), 5, 6, 0.3, 0.05, 1e-2
    algo = PerFedAvg(alpha=alpha, weight_decay=wd)
    assert algo.batches_per_step == 2 and algo.eval_steps == 1
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    sel = torch.tensor([1, 2, 4])
    algo.start_round(state, sel)
    state.local = {k: v + 0.2 * torch.randn_like(v) for k, v in state.local.items()}  # distinct w_i
    w0 = {k: v.clone() for k, v in state.local.items()}
    x, y = torch.randn(3, 2 * B, D), torch.randint(0, C, (3, 2 * B))
    losses = algo.local_step(state, x, y, sel, lr)
    for j in range(3):
        w = {k: v[j] for k, v in w0.items()}
        g = grads_of(model, w, x[j, :B], y[j, :B])
        adapted = {k: v - alpha * (g[k] + wd * v) for k, v in w.items()}
        g2 = grads_of(model, adapted, x[j, B:], y[j, B:])
        assert_params_close(
            {k: v[j] for k, v in state.local.items()}, {k: v - lr * (g2[k] + wd * v) for k, v in w.items()}
        )
        ref_loss = F.cross_entropy(functional_call(model, w, (x[j, :B],)), y[j, :B])
        torch.testing.assert_close(losses[j], ref_loss, atol=1e-6, rtol=0)
    local = state.local
    algo.sync(state, sel)
    assert state.local is None
    assert_params_close(state.global_params, {k: v.mean(0) for k, v in local.items()})


def test_perfedavg_alpha0_is_fedavg_step_on_second_batch():
    torch.manual_seed(2)
    model, m, B, lr = mlp(), 4, 5, 0.4
    x, y = torch.randn(m, 2 * B, D), torch.randint(0, C, (m, 2 * B))
    sel = torch.arange(m)
    out = []
    for algo, xb, yb in ((PerFedAvg(alpha=0.0), x, y), (FedAvg(), x[:, B:], y[:, B:])):
        state = algo.init_state(engine.Net(model), m, torch.Generator())
        algo.start_round(state, sel)
        algo.local_step(state, xb, yb, sel, lr)
        out.append(state.local)
    assert_params_close(*out, atol=1e-7)
    algo = PerFedAvg(alpha=0.5)  # ... and alpha > 0 is not
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    algo.start_round(state, sel)
    algo.local_step(state, x, y, sel, lr)
    assert any((state.local[k] - out[1][k]).abs().max() > 1e-4 for k in out[1])


def test_perfedavg_evaluation_adapts_without_touching_training(blobs):
    kw = dict(batch_size=10, lr=0.1, rounds=4, tau=3, clients_per_round=4, eval_every=2)
    plain = engine.train(PerFedAvg(alpha=0.1, eval_steps=0), blobs, mlp, **kw)
    adapted = engine.train(PerFedAvg(alpha=0.1, eval_steps=2), blobs, mlp, **kw)
    assert [h["train_loss"] for h in adapted] == [h["train_loss"] for h in plain]
    assert adapted[-1]["test_loss"] != plain[-1]["test_loss"]


def test_perfedavg_deployed_is_alpha_step_from_global(blobs):
    data = ClientData(blobs)
    n, B, alpha, wd = data.n_clients, 10, 0.3, 1e-3
    algo = PerFedAvg(alpha=alpha, weight_decay=wd)
    state = algo.init_state(engine.Net(mlp()), n, torch.Generator())

    def ctx():  # the engine's scheduled lr (0.05) must not be used for the adaptation step
        return engine.EvalContext(data, np.random.default_rng(5), B, lr=0.05, iters_per_epoch=6)

    deployed = algo.deployed_params(state, ctx())
    x, y = data.sample(np.arange(n), B, np.random.default_rng(5))
    stacked = stack(state.global_params, n)
    g, _ = engine.client_grads(state.net, stacked, x, y)
    assert_params_close(deployed, sgd(stacked, g, alpha, wd))
    assert_params_close(PerFedAvg(eval_steps=0).deployed_params(state, ctx()), stacked, atol=0)


# ------------------------------------------------------------------------------------------- vmap == per-client


@pytest.mark.parametrize("name", ["pfedme_k2", "perfedavg_k2"])
def test_training_batched_equals_loop(blobs, name):
    assert_batched_equals_loop(ALGORITHMS[name], blobs, mlp)
