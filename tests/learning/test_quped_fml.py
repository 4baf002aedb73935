"""QuPeD (FP) and Federated Mutual Learning on the batched engine: learning, one local step against a plain-autograd
per-client reference, the pure-CE limits (lam_p = 0; alpha = beta = 1), and vmap == per-client loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import C, D, assert_batched_equals_loop, mlp
from torch.func import functional_call
from torch.nn import functional as F

from fedrepro.learning import engine
from fedrepro.learning.fml import FML
from fedrepro.learning.quped import QuPeD

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    """8 clients, each 3 of 6 Gaussian-blob classes (pathological non-IID), 60 train / 30 test rows."""
    return blobs_factory(seed=1)


ALGORITHMS = {"quped": QuPeD(), "fml": FML()}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_beats_chance(blobs, name):
    hist = engine.train(
        ALGORITHMS[name], blobs, mlp, batch_size=10, lr=0.1, rounds=20, tau=5, clients_per_round=4, eval_every=10
    )
    assert [h["round"] for h in hist] == [10, 20]
    assert hist[-1]["test_acc"] > 0.8  # chance: 1/3 per client
    assert np.isfinite(hist[-1]["train_loss"]) and np.isfinite(hist[-1]["kd"])


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_training_batched_equals_loop(blobs, name):
    assert_batched_equals_loop(ALGORITHMS[name], blobs, mlp)


# ------------------------------------------------------------------------------------------ reference steps


def kl_ref(teacher, student):
    """KL(softmax(teacher) || softmax(student)), batch mean, independent of losses.kd_loss."""
    return F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")


def leaf(p):
    return {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}


def sgd_ref(p, loss, lr, wd):
    g = torch.autograd.grad(loss, list(p.values()))
    return {k: (v - lr * (gk + wd * v)).detach() for (k, v), gk in zip(p.items(), g)}


def quped_reference(model, theta, w, x, y, lr, eta2, lam, wd):
    """One client's QuPeD iteration: theta step against the old w, then w step against the new theta."""
    th, lw = leaf(theta), functional_call(model, w, (x,)).detach()
    lt = functional_call(model, th, (x,))
    theta_new = sgd_ref(th, F.cross_entropy(lt, y) + lam * kl_ref(lw, lt), lr, wd)
    lt_new = functional_call(model, theta_new, (x,)).detach()
    wv = leaf(w)
    lw = functional_call(model, wv, (x,))
    return theta_new, sgd_ref(wv, F.cross_entropy(lw, y) + lam * kl_ref(lt_new, lw), eta2, wd)


def fml_reference(model, theta, w, x, y, lr, alpha, beta, wd):
    """One client's FML iteration: both losses at the current pair, partner logits detached."""
    th, wv = leaf(theta), leaf(w)
    lt, lw = functional_call(model, th, (x,)), functional_call(model, wv, (x,))
    local = alpha * F.cross_entropy(lt, y) + (1 - alpha) * kl_ref(lw.detach(), lt)
    meme = beta * F.cross_entropy(lw, y) + (1 - beta) * kl_ref(lt.detach(), lw)
    return sgd_ref(th, local, lr, wd), sgd_ref(wv, meme, lr, wd)


def perturbed_state(algo, model, m, seed):
    """theta_i, w_i and the global w all different (KD > 0, broadcast visible)."""
    torch.manual_seed(seed)
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    state.theta = {k: v + 0.3 * torch.randn_like(v) for k, v in state.theta.items()}
    state.w = {k: v + 0.3 * torch.randn_like(v) for k, v in state.w.items()}
    state.w_global = {k: v + 0.3 * torch.randn_like(v) for k, v in state.w_global.items()}
    return state


CASES = {
    "quped": (
        QuPeD(lam_p=0.7, global_lr_ratio=0.5, weight_decay=1e-2),
        lambda model, th, w, x, y, lr: quped_reference(model, th, w, x, y, lr, 0.5 * lr, 0.7, 1e-2),
    ),
    "fml": (
        FML(alpha=0.3, beta=0.6, weight_decay=1e-2),
        lambda model, th, w, x, y, lr: fml_reference(model, th, w, x, y, lr, 0.3, 0.6, 1e-2),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_step_matches_reference(name):
    algo, reference = CASES[name]
    model, m, lr = mlp(), 5, 0.4
    state = perturbed_state(algo, model, m, 0)
    sel = torch.tensor([0, 2, 3])
    algo.start_round(state, sel)
    for k, v in state.w.items():
        assert torch.equal(v[sel], state.w_global[k].expand_as(v[sel]))
    before = {a: {k: v.clone() for k, v in getattr(state, a).items()} for a in ("theta", "w")}
    x, y = torch.randn(3, 7, D), torch.randint(0, C, (3, 7))
    ce = algo.local_step(state, x, y, sel, lr)
    assert ce.shape == (3,)
    for j, i in enumerate(sel.tolist()):
        th, w = reference(
            model,
            {k: v[i] for k, v in before["theta"].items()},
            {k: v[i] for k, v in before["w"].items()},
            x[j],
            y[j],
            lr,
        )
        for k in th:
            torch.testing.assert_close(state.theta[k][i], th[k], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(state.w[k][i], w[k], atol=1e-6, rtol=1e-5)
        assert not all(torch.equal(state.w[k][i], before["w"][k][i]) for k in w)  # both models moved
        assert not all(torch.equal(state.theta[k][i], before["theta"][k][i]) for k in th)
        logits = functional_call(model, {k: v[i] for k, v in before["theta"].items()}, (x[j],))
        assert float(ce[j]) == pytest.approx(float(F.cross_entropy(logits, y[j])), abs=1e-6)
    for i in (1, 4):  # not selected: untouched
        for a in ("theta", "w"):
            assert all(torch.equal(getattr(state, a)[k][i], before[a][k][i]) for k in before[a])
    algo.sync(state, sel)
    for k, v in state.w_global.items():
        torch.testing.assert_close(v, state.w[k][sel].mean(0), atol=1e-7, rtol=0)
    assert algo.deployed_params(state) is state.theta


@pytest.mark.parametrize(
    "algo,eta2_ratio", [(QuPeD(lam_p=0.0, global_lr_ratio=0.5), 0.5), (FML(alpha=1.0, beta=1.0), 1.0)]
)
def test_without_distillation_both_models_take_plain_ce_steps(algo, eta2_ratio):
    """lam_p = 0 (QuPeD) / alpha = beta = 1 (FML): no KD term, so theta and w each take an SGD step on their own
    cross-entropy (weight decay included), whatever the partner model."""
    lr, wd = 0.3, algo.weight_decay
    state = perturbed_state(algo, mlp(), 4, 1)
    sel = torch.arange(4)
    algo.start_round(state, sel)
    theta0, w0 = ({k: v.clone() for k, v in p.items()} for p in (state.theta, state.w))
    x, y = torch.randn(4, 6, D), torch.randint(0, C, (4, 6))
    algo.local_step(state, x, y, sel, lr)
    g, _ = engine.client_grads(state.net, theta0, x, y)
    h, _ = engine.client_grads(state.net, w0, x, y)
    for k in theta0:
        torch.testing.assert_close(state.theta[k], theta0[k] - lr * (g[k] + wd * theta0[k]), atol=1e-6, rtol=0)
        torch.testing.assert_close(state.w[k], w0[k] - eta2_ratio * lr * (h[k] + wd * w0[k]), atol=1e-6, rtol=0)
    assert float(state.last_kd) > 1e-3  # the models do disagree: the KD term really was switched off
