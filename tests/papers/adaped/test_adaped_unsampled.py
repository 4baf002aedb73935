"""AdaPeD with unsampled client iterations (Alg. 7, App. H.2): unsampled clients step theta only, against the last
*received* global parameters; sampled clients do exactly Alg. 2; with K = m it is AdaPeD."""

from __future__ import annotations

import pytest
import torch
from learning_helpers import C, D, mlp
from torch.func import functional_call
from torch.nn import functional as F

from fedrepro.learning import engine
from fedrepro.papers.adaped.adaped import AdaPeD
from fedrepro.papers.adaped.adaped_unsampled import AdaPeDUnsampled

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    """9 clients, 3 of 6 Gaussian-blob classes each, 60 train / 30 test per client."""
    return blobs_factory(n_clients=9, seed=4)


def test_full_participation_is_adaped(blobs):
    kw = dict(batch_size=10, lr=0.1, rounds=4, tau=3, eval_every=2, seed=5)
    assert engine.train(AdaPeDUnsampled(), blobs, mlp, **kw) == engine.train(AdaPeD(), blobs, mlp, **kw)


def test_unsampled_step_uses_received_copies():
    torch.manual_seed(0)
    model, m, lr, wd = mlp(), 4, 0.3, 1e-3
    algo = AdaPeDUnsampled(psi0=0.7, psi_min=0.5, weight_decay=wd)
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    sel = torch.tensor([0, 1])
    algo.start_round(state, sel)
    x, y = torch.randn(2, 5, D), torch.randint(0, C, (2, 5))
    algo.local_step(state, x, y, sel, lr)
    algo.sync(state, sel)
    # a new period with client 1 sampled again: client 0's local mu differs from what it received
    algo.start_round(state, torch.tensor([1, 2]))
    assert not all(torch.equal(state.mu[k][0], state.mu_received[k][0]) for k in state.mu)
    theta0 = {k: v.clone() for k, v in state.theta.items()}
    xu, yu = torch.randn(2, 5, D), torch.randint(0, C, (2, 5))
    unsel = torch.tensor([0, 3])
    algo.unsampled_step(state, xu, yu, unsel, lr)
    for j, i in enumerate(unsel.tolist()):
        th = {k: v[i].clone().requires_grad_(True) for k, v in theta0.items()}
        mu = {k: v[i] for k, v in state.mu_received.items()}
        lt, lm = functional_call(model, th, (xu[j],)), functional_call(model, mu, (xu[j],))
        kl = F.kl_div(F.log_softmax(lt, -1), F.log_softmax(lm, -1), log_target=True, reduction="batchmean")
        loss = F.cross_entropy(lt, yu[j]) + kl / (2 * state.psi_received[i])
        grads = torch.autograd.grad(loss, list(th.values()))
        for (k, v), g in zip(th.items(), grads):
            torch.testing.assert_close(state.theta[k][i], v.detach() - lr * (g + wd * v.detach()), atol=1e-6, rtol=1e-5)
    for k in theta0:  # sampled clients are not touched by the unsampled step
        torch.testing.assert_close(state.theta[k][1:3], theta0[k][1:3], atol=0, rtol=0)
    assert state.psi_received[3] == pytest.approx(0.7)  # never sampled: the initialization psi^0
    assert state.unsynced.tolist() == [1, 0, 0, 1]


def test_unsampled_clients_train_and_cap(blobs):
    kw = dict(batch_size=10, lr=0.05, rounds=4, tau=3, clients_per_round=3, eval_every=4, seed=1)
    free = engine.train(AdaPeDUnsampled(), blobs, mlp, **kw)[-1]
    plain = engine.train(AdaPeD(), blobs, mlp, **kw)[-1]
    capped = engine.train(AdaPeDUnsampled(max_unsynced=0), blobs, mlp, **kw)[-1]
    assert free["test_acc"] > 0.8
    # with K = 3 of 9 clients, clients that also train while unsampled end far better than Alg. 2's
    assert free["test_acc"] > plain["test_acc"] + 0.05
    assert capped["test_acc"] < free["test_acc"]
