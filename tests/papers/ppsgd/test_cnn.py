"""Fig. 1d's CNN PPSGD (fedrepro.papers.ppsgd.cnn): architecture, vmapped per-user gradients vs a loop, the alpha
limits, the factor L on the theta step, and the joint clipping of (W, w)."""

import numpy as np
import pytest
import torch

from fedrepro.papers.ppsgd import cnn
from fedrepro.papers.ppsgd.experiments.cnn import local_poor

pytestmark = pytest.mark.usefixtures("one_thread")


def _state(n=5, k=10, seed=0):
    s = cnn.init_state(n, k, np.random.default_rng(seed))
    s.theta += 0.1 * torch.randn(s.theta.shape, generator=torch.Generator().manual_seed(seed))
    return s


def _batch(L=3, m=4, k=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(L, m, 28, 28, generator=g)
    Y = torch.nn.functional.one_hot(torch.randint(0, k, (L, m), generator=g), k).float() - 0.1
    return X, Y


def _snapshot(s):
    return {k: v.clone() for k, v in s.W.items()}, s.w.clone(), s.theta.clone()


@pytest.mark.parametrize("padding, dense", [("valid", 512 * 32 + 32), ("same_second", 800 * 32 + 32)])
def test_architecture_parameter_counts(padding, dense):
    W = cnn.init_representation(padding)
    assert W["c1w"].numel() + W["c1b"].numel() == 1_040
    assert W["c2w"].numel() + W["c2b"].numel() == 8_224
    assert W["dw"].numel() + W["db"].numel() == dense  # notes §2.5's 25,632: 5x5 kept by the 2nd pool
    assert cnn.features(W, torch.rand(2, 3, 28, 28), padding).shape == (2, 3, 32)
    torch.testing.assert_close(cnn.init_representation(padding)["c1w"], W["c1w"])  # fixed seed, as the code


def test_vmapped_user_gradients_equal_a_per_user_loop():
    s = _state()
    X, Y = _batch()
    users = torch.tensor([4, 0, 2])
    gW, gw, gth = cnn.user_gradients(s, users, X, Y, "valid")
    for j, u in enumerate(users.tolist()):
        W = {k: v.clone().requires_grad_() for k, v in s.W.items()}
        w = s.w.clone().requires_grad_()
        th = s.theta[u].clone().requires_grad_()
        loss = torch.mean((cnn.features(W, X[j]) @ (w + th) - Y[j]) ** 2)
        loss.backward()
        torch.testing.assert_close(gw[j], w.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(gth[j], th.grad, rtol=1e-4, atol=1e-6)
        for k in W:
            torch.testing.assert_close(gW[k][j], W[k].grad, rtol=1e-4, atol=1e-6)


def test_alpha_limits_and_the_factor_L_on_theta():
    X, Y = _batch()
    users = np.array([1, 3, 4])
    s = _state()
    W0, w0, th0 = _snapshot(s)
    _, _, gth = cnn.user_gradients(s, torch.as_tensor(users), X, Y, "valid")
    cnn.round_step(s, users, X, Y, 0.0, 0.2, 5.0, 1.0, torch.Generator().manual_seed(0))  # alpha = 0
    assert all(torch.equal(s.W[k], W0[k]) for k in W0) and torch.equal(s.w, w0)
    torch.testing.assert_close(s.theta[users], th0[users] - 3 * 0.2 * gth)  # L eta_theta g
    assert torch.equal(s.theta[[0, 2]], th0[[0, 2]])  # unsampled: untouched
    s = _state()
    W0, w0, th0 = _snapshot(s)
    cnn.round_step(s, users, X, Y, 0.3, 0.0, 0.0, 1.0, torch.Generator().manual_seed(0))  # alpha = inf
    assert torch.equal(s.theta, th0) and not torch.equal(s.w, w0)


def test_joint_clipping_bounds_one_users_global_step():
    X, Y = _batch(L=1)
    X = X * 30  # large gradients: the user is clipped
    s = _state()
    W0, w0, _ = _snapshot(s)
    out = cnn.round_step(s, np.array([2]), X, Y, 0.5, 0.1, 0.0, 0.25, torch.Generator().manual_seed(0))
    assert float(out["norms"][0]) > 0.25
    moved = (s.w - w0).pow(2).sum() + sum((s.W[k] - W0[k]).pow(2).sum() for k in W0)
    assert float(moved.sqrt()) == pytest.approx(0.5 * 0.25, rel=1e-4)  # eta_w * C: clipped jointly to C


def test_local_poor_check():
    assert local_poor({"s0": {"0": 0.2, "1": 0.8, "inf": 0.7}}).passed
    assert not local_poor({"s0": {"0": 0.75, "1": 0.8, "inf": 0.7}}).passed
    assert not local_poor({"s3": {"0": 0.2, "1": 0.8}}).passed  # no sigma = 0 panel: cannot judge
