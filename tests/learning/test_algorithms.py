"""Learning algorithms on the batched engine: Local, FedAvg(+FT), DP-FedAvg, AdaPeD / DP-AdaPeD (Alg. 2), and the
user-level DP hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from learning_helpers import C, D, mlp
from torch.func import functional_call
from torch.nn import functional as F

from fedrepro.learning import dp, engine
from fedrepro.learning.fedavg import FedAvg, FedAvgFT
from fedrepro.learning.local import Local
from fedrepro.papers.adaped.adaped import AdaPeD, psi_grad
from fedrepro.privacy import calibrate_noise_multiplier

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    """8 clients, 3 of 6 Gaussian-blob classes each (pathological non-IID), 60 train / 30 test per client."""
    return blobs_factory(seed=0)


DP = {"clip": 1.0, "noise_multiplier": 0.3}
ALGORITHMS = {
    "local": Local(),
    "fedavg": FedAvg(),
    "fedavg_ft": FedAvgFT(ft_steps=5),
    "adaped": AdaPeD(),
    "dp_fedavg": FedAvg(dp=DP),
    "dp_adaped": AdaPeD(dp_mu=DP, dp_psi=DP),
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_beats_chance(blobs, name):
    hist = engine.train(
        ALGORITHMS[name], blobs, mlp, batch_size=10, lr=0.1, rounds=20, tau=5, clients_per_round=4, eval_every=10
    )
    assert hist[0]["round"] == 10 and hist[-1]["round"] == 20
    assert hist[-1]["test_acc"] > 0.8  # chance: 1/3 per client (1/6 over all classes)
    assert np.isfinite(hist[-1]["train_loss"])


def test_fedavg_ft_without_steps_is_fedavg(blobs):
    kw = dict(batch_size=10, lr=0.1, rounds=4, tau=5, clients_per_round=4, eval_every=2)
    plain = engine.train(FedAvg(), blobs, mlp, **kw)
    assert engine.train(FedAvgFT(ft_steps=0), blobs, mlp, **kw) == plain
    tuned = engine.train(FedAvgFT(ft_steps=3), blobs, mlp, **kw)
    assert [h["train_loss"] for h in tuned] == [h["train_loss"] for h in plain]  # training itself unchanged
    assert tuned[-1]["test_loss"] != plain[-1]["test_loss"]


def test_dp_fedavg_without_clipping_or_noise_is_fedavg(blobs):
    kw = dict(batch_size=10, lr=0.1, rounds=3, tau=5, clients_per_round=4)
    plain = engine.train(FedAvg(), blobs, mlp, **kw)
    same = engine.train(FedAvg(dp={"clip": 1e9, "noise_multiplier": 0.0}), blobs, mlp, **kw)
    assert len(same) == len(plain)
    for a, b in zip(same, plain):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-6) for k in a)
    assert engine.train(FedAvg(dp={"clip": 1e-3, "noise_multiplier": 0.0}), blobs, mlp, **kw) != plain


# ----------------------------------------------------------------------------------------------------- AdaPeD


def kl_reference(teacher, student):
    return F.kl_div(F.log_softmax(student, -1), F.log_softmax(teacher, -1), log_target=True, reduction="batchmean")


def adaped_reference(model, theta, mu, psi, x, y, lr, eta2, eta3, c, wd, psi_min):
    """One client's Alg. 2 iteration (lines 10-15) with plain autograd."""

    def f(p, requires_grad=False):
        p = {k: v.detach().clone().requires_grad_(requires_grad) for k, v in p.items()}
        return p, functional_call(model, p, (x,))

    th, lt = f(theta, True)
    _, lm = f(mu)
    g = torch.autograd.grad(F.cross_entropy(lt, y) + kl_reference(lm, lt) / (2 * psi), list(th.values()))
    theta_new = {k: v - lr * (gk + wd * v) for (k, v), gk in zip(th.items(), g)}
    _, lt_new = f(theta_new)
    mu_v, lm = f(mu, True)
    h = torch.autograd.grad(kl_reference(lm, lt_new) / (2 * psi), list(mu_v.values()))
    mu_new = {k: v - eta2 * (hk + wd * v) for (k, v), hk in zip(mu_v.items(), h)}
    _, lm_new = f(mu_new)
    k = 1 / (2 * psi) - c * kl_reference(lm_new, lt_new) / (2 * psi**2)
    return theta_new, mu_new, torch.clamp(psi - eta3 * k, min=psi_min)


def test_adaped_step_matches_reference():
    torch.manual_seed(0)
    model, m, lr = mlp(), 5, 0.2
    algo = AdaPeD(psi0=0.8, psi_min=0.5, eta2_ratio=0.5, eta3=0.3, c=5.0, weight_decay=1e-2)
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    state.theta = {k: v + 0.3 * torch.randn_like(v) for k, v in state.theta.items()}  # theta_i != mu: KD > 0
    sel = torch.tensor([0, 2, 3])
    algo.start_round(state, sel)
    before = {k: {n: v.clone() for n, v in getattr(state, k).items()} for k in ("theta", "mu")}
    psi_before = state.psi.clone()
    x, y = torch.randn(3, 7, D), torch.randint(0, C, (3, 7))
    algo.local_step(state, x, y, sel, lr)
    for j, i in enumerate(sel.tolist()):
        th, mu, psi = adaped_reference(
            model,
            {k: v[i] for k, v in before["theta"].items()},
            {k: v[i] for k, v in before["mu"].items()},
            psi_before[i],
            x[j],
            y[j],
            lr,
            0.5 * lr,
            0.3,
            5.0,
            1e-2,
            0.5,
        )
        for k in th:
            torch.testing.assert_close(state.theta[k][i], th[k], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(state.mu[k][i], mu[k], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(state.psi[i], psi, atol=1e-6, rtol=1e-5)
    for i in (1, 4):  # not selected: untouched
        assert all(torch.equal(state.theta[k][i], before["theta"][k][i]) for k in state.theta)
        assert state.psi[i] == psi_before[i]
    algo.sync(state, sel)
    for k, v in state.mu_global.items():
        torch.testing.assert_close(v, state.mu[k][sel].mean(0))
    assert state.psi_global == pytest.approx(float(state.psi[sel].mean()))


def test_adaped_mu_moves_only_through_kd():
    """With the KD weight 1/(2 psi) ~ 0 the global-model copies stay put, and theta takes a plain CE step."""
    torch.manual_seed(1)
    model, m = mlp(), 4
    algo = AdaPeD(psi0=1e12, psi_min=1.0, weight_decay=0.0)
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    state.theta = {k: v + 0.3 * torch.randn_like(v) for k, v in state.theta.items()}
    sel = torch.arange(m)
    algo.start_round(state, sel)
    theta0, mu0 = ({k: v.clone() for k, v in p.items()} for p in (state.theta, state.mu))
    x, y = torch.randn(m, 6, D), torch.randint(0, C, (m, 6))
    algo.local_step(state, x, y, sel, 0.5)
    grads, _ = engine.client_grads(state.net, theta0, x, y)
    for k in mu0:
        torch.testing.assert_close(state.mu[k], mu0[k], atol=1e-9, rtol=0)
        torch.testing.assert_close(state.theta[k], theta0[k] - 0.5 * grads[k], atol=1e-6, rtol=0)


def test_psi_update_sign_and_floor():
    # hand-computed k = 1/(2 psi) - c KD / (2 psi^2): psi = 1, KD = 0.3, c = 5 -> 0.5 - 0.75 = -0.25 (psi grows)
    assert float(psi_grad(torch.tensor(1.0), torch.tensor(0.3), 5.0)) == pytest.approx(-0.25)
    assert float(psi_grad(torch.tensor(2.0), torch.tensor(0.0), 5.0)) == pytest.approx(0.25)  # KD = 0: shrinks
    # theta = mu (KD ~ 0) and a large eta3: psi is driven down and must stop at psi_min
    torch.manual_seed(2)
    algo = AdaPeD(psi0=0.9, psi_min=0.5, eta3=1.0)
    state = algo.init_state(engine.Net(mlp()), 3, torch.Generator())
    sel = torch.arange(3)
    algo.start_round(state, sel)
    for step in range(4):
        algo.local_step(state, torch.randn(3, 5, D), torch.randint(0, C, (3, 5)), sel, 1e-3)
        assert (state.psi >= 0.5).all()
        if step == 0:
            assert (state.psi < 0.9).all()
    assert (state.psi == 0.5).all()


def test_psi_stays_above_floor_in_training(blobs):
    seen = []
    algo = AdaPeD(psi0=0.6, psi_min=0.5, eta3=0.5, dp_psi={"clip": 1.0, "noise_multiplier": 2.0})
    engine.train(
        algo,
        blobs,
        mlp,
        batch_size=10,
        lr=0.1,
        rounds=6,
        tau=5,
        clients_per_round=4,
        eval_every=1,
        callback=lambda info: seen.append(info["eval"]["psi"]),
    )
    assert min(seen) >= 0.5 and len(set(seen)) > 1


# --------------------------------------------------------------------------------------------------------- DP


def stacked_trees(n, scale, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": scale * torch.randn(n, 3, 4, generator=g),
        "b": scale * torch.randn(n, 4, generator=g),
        "s": scale * torch.randn(n, generator=g),
    }


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 6),
    scale=st.floats(1e-3, 1e3),
    clip=st.floats(1e-2, 10.0),
    seed=st.integers(0, 2**16),
    drop=st.integers(0, 5),
)
def test_sum_of_clipped_updates_has_sensitivity_clip(n, scale, clip, seed, drop):
    tree = stacked_trees(n, scale, seed)
    drop %= n
    full = {k: v.sum(0) for k, v in dp.clip_per_client(tree, clip).items()}
    keep = torch.arange(n) != drop
    rest = {k: v.sum(0) for k, v in dp.clip_per_client({k: v[keep] for k, v in tree.items()}, clip).items()}
    diff = torch.sqrt(sum(((full[k] - rest[k]).double() ** 2).sum() for k in full))
    assert diff <= clip * (1 + 1e-5)


def test_clip_per_client_norms():
    tree = stacked_trees(5, 1.0, 0)
    tree["w"][1] *= 100  # one large client
    tree = {k: v * torch.tensor([1, 1, 1e-3, 1, 1]).reshape(-1, *[1] * (v.dim() - 1)) for k, v in tree.items()}
    before = dp.client_norms(tree)
    clipped = dp.clip_per_client(tree, 2.0)
    after = dp.client_norms(clipped)
    torch.testing.assert_close(after, torch.minimum(before, torch.tensor(2.0)))
    for k in tree:  # small client untouched; clipped ones only rescaled (direction kept over all leaves jointly)
        torch.testing.assert_close(clipped[k][2], tree[k][2])
        torch.testing.assert_close(clipped[k][1], tree[k][1] * (2.0 / before[1]))
    k_clip = dp.clip_per_client(torch.tensor([-3.0, 0.5, 2.0]), 1.0)  # scalar psi gradients: |k| <= C2
    torch.testing.assert_close(k_clip, torch.tensor([-1.0, 0.5, 1.0]))


def test_gaussian_mechanism_noise():
    mech = dp.GaussianMechanism.parse({"clip": 0.5, "noise_multiplier": 2.0})
    assert mech.std == 1.0 and dp.GaussianMechanism.parse(None) is None
    zeros = {"a": torch.zeros(4, 50_000)}
    out = mech(zeros, torch.Generator().manual_seed(0))["a"]
    assert out.std().item() == pytest.approx(1.0, rel=0.02) and abs(out.mean().item()) < 0.01
    assert torch.equal(mech(zeros, torch.Generator().manual_seed(0))["a"], out)
    with pytest.raises(ValueError):
        dp.GaussianMechanism(0.0, 1.0)


def test_calibrated_noise_comes_from_privacy_module():
    mech = dp.calibrated(1.5, target_epsilon=3.0, delta=1e-5, steps=100, sampling_rate=0.2)
    ref = calibrate_noise_multiplier(3.0, 1e-5, 100, 0.2, "rdp").noise_multiplier
    assert mech.clip == 1.5 and mech.noise_multiplier == ref


def test_local_trains_every_client_whatever_the_sampling(blobs):
    """Local training has no communication: client sampling must not gate its steps."""
    algo, m = Local(), blobs.n_clients
    assert Local.steps_unsampled
    state = algo.init_state(engine.Net(mlp()), m, torch.Generator())
    before = {k: v.clone() for k, v in state.theta.items()}
    algo.local_step(state, torch.randn(1, 4, D), torch.randint(0, C, (1, 4)), torch.tensor([0]), 0.1)
    algo.unsampled_step(state, torch.randn(m - 1, 4, D), torch.randint(0, C, (m - 1, 4)), torch.arange(1, m), 0.1)
    assert all(not all(torch.equal(state.theta[k][i], before[k][i]) for k in before) for i in range(m))
    # and through the round loop: K = 1 of 8 per round, yet all clients learn
    hist = engine.train(
        Local(), blobs, mlp, batch_size=10, lr=0.1, rounds=10, tau=5, clients_per_round=1, eval_every=10
    )
    assert hist[-1]["test_acc"] > 0.8


# ------------------------------------------------------------------------------------ DP-FedAvg, server-side noise


def test_dp_fedavg_server_without_clipping_or_noise_is_fedavg(blobs):
    from fedrepro.learning.dp_fedavg import DPFedAvgServer

    kw = dict(batch_size=10, lr=0.1, rounds=3, tau=5, clients_per_round=4, eval_every=1)
    plain = engine.train(FedAvg(), blobs, mlp, **kw)
    same = engine.train(DPFedAvgServer({"clip": 1e9, "noise_multiplier": 0.0}), blobs, mlp, **kw)
    for a, b in zip(same, plain):
        assert all(a[k] == pytest.approx(b[k], abs=1e-5) for k in a)
    with pytest.raises(ValueError, match="server_dp"):
        DPFedAvgServer(None)


def test_dp_fedavg_server_clips_updates_and_noises_the_sum():
    from fedrepro.learning.dp_fedavg import DPFedAvgServer

    torch.manual_seed(0)
    m, C_clip = 5, 0.01
    algo = DPFedAvgServer({"clip": C_clip, "noise_multiplier": 0.0}, weight_decay=0.0)
    state = algo.init_state(engine.Net(mlp()), m, torch.Generator())
    sel = torch.tensor([0, 2, 4])
    w0 = {k: v.clone() for k, v in state.global_params.items()}
    algo.start_round(state, sel)
    algo.local_step(state, torch.randn(3, 6, D), torch.randint(0, C, (3, 6)), sel, 1.0)
    deltas = {k: v - w0[k] for k, v in state.local.items()}
    algo.sync(state, sel)
    expected = {k: w0[k] + v.sum(0) / 3 for k, v in dp.clip_per_client(deltas, C_clip).items()}
    for k in expected:
        torch.testing.assert_close(state.global_params[k], expected[k])
    moved = torch.sqrt(sum(((state.global_params[k] - w0[k]) ** 2).sum() for k in w0))
    assert moved <= C_clip * (1 + 1e-5)  # the mean of updates clipped to C moves w by at most C
    # noise: z C / K per coordinate on the released mean
    noisy = DPFedAvgServer({"clip": 1.0, "noise_multiplier": 3.0}, weight_decay=0.0)
    st = noisy.init_state(engine.Net(mlp()), m, torch.Generator().manual_seed(1))
    base = {k: v.clone() for k, v in st.global_params.items()}
    noisy.start_round(st, sel)  # no local step: zero updates, only noise
    noisy.sync(st, sel)
    drift = torch.cat([(st.global_params[k] - base[k]).flatten() for k in base])
    assert drift.std().item() == pytest.approx(3.0 / 3, rel=0.15)
