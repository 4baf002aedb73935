"""FedHDP's learning algorithms (Aldaghri et al., Alg. 2): adaptive clipping (Andrew et al. 2019), the Ditto
personal models, FedHDP's per-group DP aggregation with ratio r, and the reductions the issue asks for: r = 1 without
personalization is DP-FedAvg (exactly, same noise), all clients non-private is FedAvg + Ditto (against an independent
plain-autograd reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from learning_helpers import assert_batched_equals_loop, mlp
from torch.func import functional_call
from torch.nn import functional as F

from fedrepro.learning import engine
from fedrepro.learning.adaptive_clip import AdaptiveClip, effective_noise_multiplier, update_noise_multiplier
from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.net import put, stack
from fedrepro.papers.fedhdp.fedhdp import FedHDP
from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvg, HDPFedAvgRelease

pytestmark = pytest.mark.usefixtures("one_thread")

N_CLIENTS = 8
OPT_OUT = np.zeros(N_CLIENTS, bool)
OPT_OUT[[1, 6]] = True  # two non-private clients
PRIVATE = ~OPT_OUT
CLIP = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 1.0}
KW = dict(batch_size=10, lr=0.2, rounds=6, tau=4, clients_per_round=4, eval_every=2, seed=5)


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    return blobs_factory(seed=0)


# ------------------------------------------------------------------------------------------- adaptive clipping


@pytest.mark.parametrize("z_eff,expected", [(1.5, 1.5172), (4.0, 4.3644), (1.0, 1.0050)])
def test_update_noise_from_effective(z_eff, expected):
    """Notes section 3 (derived there): TFF's count std 0.05 x 100 clients = 5 gives these update multipliers."""
    z = update_noise_multiplier(z_eff, 5.0)
    assert z == pytest.approx(expected, abs=1e-4)
    assert effective_noise_multiplier(z, 5.0) == pytest.approx(z_eff, rel=1e-12)
    assert z**-2 + (2 * 5.0) ** -2 == pytest.approx(z_eff**-2, rel=1e-12)


def test_update_noise_needs_enough_count_noise():
    with pytest.raises(ValueError, match="z_count"):
        update_noise_multiplier(2.0, 1.0)  # z_eff must stay below 2 z_count
    assert update_noise_multiplier(0.0, 0.0) == 0.0


def test_adaptive_clip_closed_form_step():
    ac = AdaptiveClip(init=2.0, quantile=0.3, lr=0.2)
    bits = AdaptiveClip.bits(torch.tensor([0.1, 1.9, 2.0, 2.5, 7.0]), 2.0)  # <= S: 3 of 5 unclipped
    assert bits.tolist() == [1, 1, 1, 0, 0]
    assert ac.update(2.0, bits) == pytest.approx(2.0 * math.exp(-0.2 * (0.6 - 0.3)))
    assert AdaptiveClip(init=2.0, lr=0.0).update(2.0, bits) == 2.0


@pytest.mark.parametrize("quantile", [0.5, 0.8])
def test_adaptive_clip_tracks_the_quantile(quantile):
    """Andrew et al.'s geometric rule drives S to the target quantile of the norms (here U(0, 2): 2 x kappa), also
    with noise on the count."""
    ac = AdaptiveClip(init=0.05, quantile=quantile, lr=0.05, count_std=1.0)
    g = torch.Generator().manual_seed(0)
    S, tail = ac.init, []
    for t in range(3000):
        norms = 2 * torch.rand(100, generator=g, dtype=torch.float64)
        S = ac.update(S, AdaptiveClip.bits(norms, S), g)
        if t >= 1000:
            tail.append(S)
    assert np.mean(tail) == pytest.approx(2 * quantile, abs=0.05)


# ---------------------------------------------------------------------------------------- FedHDP aggregation


def _state_after_sync(algo, deltas_by_client, selected, private):
    """Run one sync on hand-made client models: local = global + delta."""
    net = engine.Net(torch.nn.Linear(3, 1, bias=False))
    st = algo.init_state(net, len(private), torch.Generator().manual_seed(0))
    w0 = {k: v.clone() for k, v in st.global_params.items()}
    sel = torch.tensor(selected)
    algo.start_round(st, sel)
    st.local = {"weight": w0["weight"].unsqueeze(0) + torch.tensor(deltas_by_client, dtype=torch.float32)[:, None]}
    algo.sync(st, sel)
    return st, w0


@pytest.mark.parametrize("r", [0.0, 0.25, 1.0])
def test_fedhdp_weighted_group_means(r):
    """No noise, fixed clip 1: Delta = w_np mean_np + w_p mean_p(clipped), w_p / w_np = r per client."""
    private = np.array([True, True, True, False, False])
    deltas = [[3.0, 0.0, 4.0], [0.3, 0.0, 0.4], [0.0, 0.6, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 10.0]]
    algo = FedHDP(private=private, r=r, noise_multiplier=0.0, clip=1.0)
    st, w0 = _state_after_sync(algo, deltas, [0, 1, 2, 3, 4], private)
    clipped_p = np.array([[0.6, 0.0, 0.8], [0.3, 0.0, 0.4], [0.0, 0.6, 0.0]])  # norm 5 -> 1
    mean_p, mean_np = clipped_p.mean(0), np.array([[2.0, 2.0, 0.0], [0.0, 0.0, 10.0]]).mean(0)  # np unclipped
    w_np, w_p = 2 / (2 + 3 * r), 3 * r / (2 + 3 * r)
    expected = w_np * mean_np + w_p * mean_p
    got = (st.global_params["weight"] - w0["weight"]).numpy().ravel()
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_fedhdp_clip_nonprivate_and_bits():
    private = np.array([True, False])
    algo = FedHDP(private=private, r=1.0, clip={"init": 1.0, "quantile": 0.5, "lr": 0.5}, clip_nonprivate=True)
    st, w0 = _state_after_sync(algo, [[0.0, 0.0, 0.5], [0.0, 4.0, 0.0]], [0, 1], private)
    np.testing.assert_allclose((st.global_params["weight"] - w0["weight"]).numpy().ravel(), [0, 0.5, 0.25], atol=1e-6)
    assert st.clip == pytest.approx(math.exp(-0.5 * (0.5 - 0.5)))  # one of two unclipped: b_bar = kappa
    st2, _ = _state_after_sync(
        FedHDP(private=private, r=1.0, clip={"init": 1.0, "lr": 0.5}), [[0, 0, 0.5], [0, 4, 0]], [0, 1], private
    )
    assert st2.clip == pytest.approx(math.exp(-0.5 * (1.0 - 0.5)))  # only the private client reports


def test_fedhdp_private_group_noise_std():
    """The private group mean gets N(0, (z S / N_p)^2) per coordinate, weighted by w_p."""
    private = np.array([True] * 4 + [False] * 2)
    net = engine.Net(torch.nn.Linear(400, 50))
    z, S, r = 2.0, 0.5, 0.5
    algo = FedHDP(private=private, r=r, noise_multiplier=z, clip=S)
    st = algo.init_state(net, 6, torch.Generator().manual_seed(1))
    sel = torch.arange(6)
    w0 = {k: v.clone() for k, v in st.global_params.items()}
    algo.start_round(st, sel)
    algo.sync(st, sel)  # zero deltas: the update is pure noise
    noise = torch.cat([(st.global_params[k] - w0[k]).ravel() for k in w0])
    w_p = r * 4 / (2 + r * 4)
    assert noise.std().item() == pytest.approx(w_p * z * S / 4, rel=0.02)
    assert abs(noise.mean().item()) < 0.01 * w_p * z * S / 4 * 5


# --------------------------------------------------------------------------------------------- reductions


def _same_history(a, b, keys=("test_acc", "test_acc_weighted", "train_loss", "clip"), tol=1e-5):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        for k in keys:
            assert x[k] == pytest.approx(y[k], abs=tol), k


def _params_close(p, q, atol=1e-5):
    for k in p:
        torch.testing.assert_close(p[k], q[k], atol=atol, rtol=0)


@pytest.mark.parametrize("private", [None, PRIVATE], ids=["all_private", "two_opt_out"])
def test_fedhdp_r1_without_personalization_is_dp_fedavg(blobs, private):
    """Acceptance: FedHDP with r = 1, no personalization (all updates clipped) is DP-FedAvg with adaptive clipping;
    with opt-out clients too, because the private group's noise z S / N_p weighted by N_p / K is DP-FedAvg's z S / K
    (notes section 7.4). The same noise draws: the histories and final models agree to float rounding."""
    fedhdp = FedHDP(private=private, r=1.0, noise_multiplier=1.3, clip=CLIP, clip_nonprivate=True)
    dp = DPFedAvgAdaptive(noise_multiplier=1.3, clip=CLIP)
    h1, h2 = engine.train(fedhdp, blobs, mlp, **KW), engine.train(dp, blobs, mlp, **KW)
    _same_history(h1, h2)
    _params_close(fedhdp.state.global_params, dp.state.global_params)
    assert fedhdp.state.clip == pytest.approx(dp.state.clip, rel=1e-6) and fedhdp.state.clip != CLIP["init"]
    # and HDP-FedAvg is FedHDP at r = 1
    hdp = HDPFedAvg(private=private, noise_multiplier=1.3, clip=CLIP, clip_nonprivate=True)
    _same_history(engine.train(hdp, blobs, mlp, **KW), h1, tol=0)


def test_fedhdp_r1_with_personalization_is_dp_fedavg_ditto(blobs):
    fedhdp = FedHDP(private=None, r=1.0, noise_multiplier=0.8, clip=CLIP, lams=[0.1, 1.0])
    dp = DPFedAvgAdaptive(noise_multiplier=0.8, clip=CLIP, lams=[0.1, 1.0])
    _same_history(engine.train(fedhdp, blobs, mlp, **KW), engine.train(dp, blobs, mlp, **KW))
    for a, b in zip(fedhdp.final_models()["personal"], dp.final_models()["personal"]):
        _params_close(a, b)


def test_r_below_one_differs_from_dp_fedavg(blobs):
    """The reduction test above can fail: another ratio changes the model."""
    a = FedHDP(private=PRIVATE, r=0.1, noise_multiplier=1.3, clip=CLIP, clip_nonprivate=True)
    b = DPFedAvgAdaptive(noise_multiplier=1.3, clip=CLIP)
    engine.train(a, blobs, mlp, **KW), engine.train(b, blobs, mlp, **KW)
    assert not torch.allclose(a.state.global_params["out.weight"], b.state.global_params["out.weight"], atol=1e-3)


def test_hdp_fedavg_unclipped_differs_from_dp_fedavg(blobs):
    """The reduction above holds because every update is clipped (Alg. 2's reading, the config's): with the opt-out
    clients' updates unclipped, HDP-FedAvg's global model is not DP-FedAvg's (the equality check can fail)."""
    hdp = HDPFedAvg(private=PRIVATE, noise_multiplier=1.3, clip=CLIP, clip_nonprivate=False)
    dp = DPFedAvgAdaptive(noise_multiplier=1.3, clip=CLIP)
    engine.train(hdp, blobs, mlp, **KW), engine.train(dp, blobs, mlp, **KW)
    assert not torch.allclose(hdp.state.global_params["out.weight"], dp.state.global_params["out.weight"], atol=1e-3)


class RefFedAvgDitto(FedAvg):
    """Independent reference: FedAvg (no weight decay) + Ditto personal models updated one client at a time with
    plain autograd: v_j <- v_j - lr (grad f_j(v_j) + lam (v_j - w))."""

    def __init__(self, lam):
        super().__init__(weight_decay=0.0)
        self.lam = lam

    def init_state(self, net, n_clients, generator):
        st = super().init_state(net, n_clients, generator)
        st.personal, st.trained = {}, set()
        self.st = st
        return st

    def start_round(self, st, selected):
        super().start_round(st, selected)
        st.anchor = {k: v.clone() for k, v in st.global_params.items()}
        for j in selected.tolist():
            st.personal.setdefault(j, {k: v.clone() for k, v in st.global_params.items()})

    def local_step(self, st, x, y, selected, lr):
        losses = super().local_step(st, x, y, selected, lr)
        for i, j in enumerate(selected.tolist()):
            p = {k: v.detach().clone().requires_grad_(True) for k, v in st.personal[j].items()}
            loss = F.cross_entropy(functional_call(st.net.model, p, (x[i],)), y[i])
            grads = dict(zip(p, torch.autograd.grad(loss, list(p.values()))))
            st.personal[j] = {k: (p[k] - lr * (grads[k] + self.lam * (p[k] - st.anchor[k]))).detach() for k in p}
            st.trained.add(j)
        return losses

    def deployed_params(self, st, ctx=None):
        out = stack(st.global_params, st.n_clients)
        for j in st.trained:
            put(out, torch.tensor([j]), {k: v.unsqueeze(0) for k, v in st.personal[j].items()})
        return out


def test_all_nonprivate_is_fedavg_plus_ditto(blobs):
    """Acceptance: every client non-private (no noise, no clipping) is FedAvg + Ditto."""
    lam = 0.5
    fedhdp = FedHDP(private=np.zeros(N_CLIENTS, bool), r=0.3, noise_multiplier=5.0, clip=CLIP, lams=[lam])
    ref = RefFedAvgDitto(lam)
    h1, h2 = engine.train(fedhdp, blobs, mlp, **KW), engine.train(ref, blobs, mlp, **KW)
    _same_history(h1, h2, keys=("test_acc", "test_acc_weighted", "train_loss", "test_loss"))
    _params_close(fedhdp.state.global_params, ref.st.global_params)
    personal = fedhdp.final_models()["personal"][0]
    for j in ref.st.trained:
        _params_close({k: v[j] for k, v in personal.items()}, ref.st.personal[j])
    assert fedhdp.state.ditto.trained.sum().item() == len(ref.st.trained) < N_CLIENTS + 1


def test_r0_never_trains_private_clients(blobs):
    """r = 0: the server uses only non-private clients; private personal models stay the global model."""
    algo = FedHDP(private=PRIVATE, r=0.0, noise_multiplier=1.0, clip=CLIP, lams=[0.05])
    engine.train(algo, blobs, mlp, **dict(KW, rounds=30, tau=1, eval_every=30))
    st = algo.state
    assert not st.ditto.trained[torch.from_numpy(PRIVATE)].any()
    assert st.ditto.trained[torch.from_numpy(OPT_OUT)].any()
    models = algo.final_models()
    _params_close({k: v[0] for k, v in models["personal"][0].items()}, st.global_params, atol=0)
    assert st.skipped > 0  # some rounds sampled no non-private client (4 of 8, 2 opt-out)


def test_r0_nonprivate_population_samples_only_the_non_private_clients(blobs, monkeypatch):
    """r0_population='nonprivate': every round's clients are the non-private ones (all of them, 2 < K = 4), so no
    round is skipped; the default reading samples all clients and skips rounds without a non-private one."""
    seen = []
    start_round = FedHDP.start_round
    monkeypatch.setattr(
        FedHDP, "start_round", lambda self, st, sel: (seen.append(sel.tolist()), start_round(self, st, sel))
    )
    algo = FedHDP(private=PRIVATE, r=0.0, noise_multiplier=1.0, clip=CLIP, lams=[0.05], r0_population="nonprivate")
    engine.train(algo, blobs, mlp, **dict(KW, rounds=10, tau=1, eval_every=10))
    assert seen == [np.flatnonzero(OPT_OUT).tolist()] * 10 and algo.state.skipped == 0
    seen.clear()
    engine.train(FedHDP(private=PRIVATE, r=0.0, clip=CLIP), blobs, mlp, **dict(KW, rounds=10, tau=1, eval_every=10))
    assert all(len(s) == KW["clients_per_round"] for s in seen) and any(
        set(s) & set(np.flatnonzero(PRIVATE)) for s in seen
    )
    with pytest.raises(ValueError, match="r0_population"):
        FedHDP(private=PRIVATE, r=0.0, r0_population="private")


def test_fedhdp_batched_equals_loop(blobs):
    assert_batched_equals_loop(FedHDP(private=PRIVATE, r=0.5, noise_multiplier=0.5, clip=CLIP, lams=[0.1]), blobs, mlp)


def test_fedhdp_learns(blobs):
    algo = FedHDP(
        private=PRIVATE, r=0.5, noise_multiplier=0.3, clip={"init": 1.0, "lr": 0.2, "count_std": 1.0}, lams=[0.05]
    )
    hist = engine.train(algo, blobs, mlp, batch_size=10, lr=0.1, rounds=20, tau=5, clients_per_round=4, eval_every=10)
    assert hist[-1]["test_acc"] > 0.8  # per client chance 1/3


def test_nonprivate_method_clipped_is_alg2_without_noise(blobs):
    """The NON-PRIVATE method read as Alg. 2 without noise (``clip_nonprivate: true``, reading e of the forensics):
    every update clipped to the adaptive clip, neither update nor count noised, which is DP-FedAvg with z = 0 and a
    noiseless count. Unclipped (the config's reading) it is FedAvg, whose model differs: the clipping acts."""
    from fedrepro.papers.fedhdp.experiments.training import build

    spec = {"algorithm": "nonprivate", "clip_nonprivate": True}
    clipped = build(spec, PRIVATE, [], 1.3, CLIP, 0.0)
    alg2 = DPFedAvgAdaptive(noise_multiplier=0.0, clip={**CLIP, "count_std": 0.0})
    _same_history(engine.train(clipped, blobs, mlp, **KW), engine.train(alg2, blobs, mlp, **KW))
    _params_close(clipped.state.global_params, alg2.state.global_params)
    assert clipped.state.clip != CLIP["init"]
    plain = build({**spec, "clip_nonprivate": False}, PRIVATE, [], 1.3, CLIP, 0.0)
    fedavg = FedAvg()
    _same_history(engine.train(plain, blobs, mlp, **KW), engine.train(fedavg, blobs, mlp, **KW), keys=("test_acc",))
    assert not torch.allclose(
        plain.state.global_params["out.weight"], clipped.state.global_params["out.weight"], atol=1e-3
    )


# ------------------------------------------------------------------------- a method's messages released (compare)


class _MessageFedAvg(FedAvg):
    """FedAvg whose server sees only the protocol's release: each client sends its local update, the server adds."""

    def init_state(self, net, n_clients, generator):
        self.state = super().init_state(net, n_clients, generator)
        return self.state

    def client_message(self, state, selected):
        return {k: v - state.global_params[k] for k, v in state.local.items()}

    def server_update(self, state, selected, released):
        state.global_params = {k: w + released[k] for k, w in state.global_params.items()}
        state.local = None


def _release(noise_multiplier: float) -> HDPFedAvgRelease:
    clip = AdaptiveClip.parse(CLIP)
    return HDPFedAvgRelease(torch.from_numpy(PRIVATE), noise_multiplier, clip, clip.init)


def test_released_messages_give_hdp_fedavgs_model_draw_for_draw(blobs):
    """HDPFedAvgRelease is HDP-FedAvg's server step applied to what a method sends: FedAvg sending its local update
    through it has HDP-FedAvg's histories (clip norm included) and global model. It can fail: the same release without
    its noise, or the engine's plain sync, gives another model."""
    hdp = HDPFedAvg(private=PRIVATE, noise_multiplier=1.3, clip=CLIP)
    ref = engine.train(hdp, blobs, mlp, **KW)
    mine = _MessageFedAvg(weight_decay=0.0)
    _same_history(engine.train(mine, blobs, mlp, **KW, release=_release(1.3)), ref)
    _params_close(mine.state.global_params, hdp.state.global_params)
    for other in (_release(0.0), None):
        algo = _MessageFedAvg(weight_decay=0.0)
        engine.train(algo, blobs, mlp, **KW, release=other)
        got, want = algo.state.global_params, hdp.state.global_params
        assert max((got[k] - want[k]).abs().max() for k in got) > 1e-3


def test_a_released_method_may_not_sample_its_own_population(blobs):
    class Narrow(_MessageFedAvg):
        def init_state(self, net, n_clients, generator):
            self.population = np.arange(2)
            return super().init_state(net, n_clients, generator)

    with pytest.raises(ValueError, match="population of its own"):
        engine.train(Narrow(weight_decay=0.0), blobs, mlp, **KW, release=_release(1.3))
