"""A method from outside the package under PPSGD's protocols (fedrepro.papers.ppsgd.method): the protocol is PPSGD's
own (a FedAvg step with clip-only dp is PPSGD's global-learning round, on the linear model and on Fig. 1d's CNN), the
noise shares sum to PPSGD's server noise, diverging steps are dropped like PPSGD's, and what the protocol cannot give
a method is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ppsgd_clients import blob_clients

from fedrepro.errors import ConfigError
from fedrepro.learning.dp import GaussianMechanism, SharedNoiseMechanism
from fedrepro.learning.engine import Diverged
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.net import Net
from fedrepro.papers.ppsgd import cnn, method, ppsgd_exp
from fedrepro.papers.ppsgd.clients import Clients
from fedrepro.papers.ppsgd.experiments import linear as lin
from fedrepro.papers.ppsgd.grid import run_grid

pytestmark = pytest.mark.usefixtures("one_thread")


def _params(**over) -> dict:
    p = {
        "m": 5,
        "users_per_round": 3,
        "epochs": 3,
        "steps": [0.01, 0.05],
        "alphas": [0, 1, ".inf"],
        "sigmas": [0, 3],
        "clip": 2.0,
        "delta": 1e-4,
        "target_offset": 0.1,
        "eval_every": 4,
        "max_rounds": None,
        "select": "max_test_accuracy_over_steps",
        "chunk": 8,
        "dtype": "float64",
        "checks": {},
        "method": None,
    }
    return p | over


def test_a_fedavg_round_with_clip_only_dp_is_ppsgd_global_learning_linear():
    """Global learning (alpha_c = inf: eta_theta = 0) in PPSGD-exp: w <- w - step (1/L) sum_i clip_C(g_i). A FedAvg
    client step on the protocol's model and loss with dp = clip C, sigma 0, averaged: the same w."""
    rng = np.random.default_rng(0)
    L, m, d, K, C, step = 4, 5, 6, 3, 0.5, 0.3
    X, lab = rng.standard_normal((L, m, d)), rng.integers(K, size=(L, m))
    Y = np.eye(K)[lab] - 0.1
    state = ppsgd_exp.State(rng.standard_normal((d, K, 1)), np.zeros((L, d, K, 1)))
    model = method.Linear(d, K)
    model.w.data = torch.from_numpy(state.w[..., 0].copy())
    net = Net(model.double(), loss=method.squared_loss(0.1, K, half_sum=True))
    ppsgd_exp.round_step(state, np.arange(L), X, Y, np.array([step]), np.array([0.0]), 0.0, C, rng)
    algo = FedAvg(weight_decay=0.0, dp=SharedNoiseMechanism(C, 0.0))
    st = algo.init_state(net, L, torch.Generator())
    sel = torch.arange(L)
    algo.start_round(st, sel)
    algo.local_step(st, torch.from_numpy(X), torch.from_numpy(lab), sel, step)
    algo.sync(st, sel)
    np.testing.assert_allclose(st.global_params["w"].numpy(), state.w[..., 0], rtol=1e-12, atol=1e-12)
    # the check can fail: without clipping (some gradient norm exceeds C here) the step is another one
    plain = FedAvg(weight_decay=0.0)
    st2 = plain.init_state(net, L, torch.Generator())
    plain.start_round(st2, sel)
    plain.local_step(st2, torch.from_numpy(X), torch.from_numpy(lab), sel, step)
    plain.sync(st2, sel)
    assert not np.allclose(st2.global_params["w"].numpy(), state.w[..., 0])


def test_a_fedavg_round_with_clip_only_dp_is_ppsgd_global_learning_cnn():
    """The same for Fig. 1d's CNN: (W, w) clipped jointly per user, mean squared loss over rows and outputs, the
    global model initialized as PPSGD's rows (cnn.GlobalModel from cnn.init_state)."""
    rng = np.random.default_rng(1)
    L, m, K, C, step = 3, 4, 10, 0.6, 0.5
    s = cnn.init_state(L, K, np.random.default_rng([7, 2]))
    net = Net(cnn.GlobalModel(s.W, s.w), loss=method.squared_loss(0.1, K, half_sum=False))
    X = torch.from_numpy(rng.random((L, m, 28, 28)).astype(np.float32))
    lab = torch.from_numpy(rng.integers(K, size=(L, m)))
    Y = torch.nn.functional.one_hot(lab, K).float() - 0.1
    algo = FedAvg(weight_decay=0.0, dp=SharedNoiseMechanism(C, 0.0))
    st = algo.init_state(net, L, torch.Generator())
    sel = torch.arange(L)
    algo.start_round(st, sel)
    algo.local_step(st, X.reshape(L, m, 784), lab, sel, step)
    algo.sync(st, sel)
    out = cnn.round_step(s, np.arange(L), X, Y, step, 0.0, 0.0, C, torch.Generator())
    assert float(out["norms"].max()) > C  # clipping is exercised
    for k, v in s.W.items():
        torch.testing.assert_close(st.global_params[k], v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(st.global_params["w"], s.w, rtol=1e-5, atol=1e-6)


def test_shared_noise_sums_to_the_servers_noise_and_per_client_noise_does_not():
    """n clients' shares: the sum of their noise has std sigma C (the server's mechanism); the per-client mechanism
    (DP-FedAvg's local noise) would give sigma C sqrt(n): the check tells the two apart."""
    n, sigma, C, draws = 9, 2.0, 0.5, 4000
    zeros = {"g": torch.zeros(n, draws, dtype=torch.float64)}
    gen = torch.Generator().manual_seed(0)
    shared = SharedNoiseMechanism(C, sigma)(zeros, gen)["g"].sum(0).std().item()
    local = GaussianMechanism(C, sigma)(zeros, gen)["g"].sum(0).std().item()
    assert shared == pytest.approx(sigma * C, rel=0.05)
    assert local == pytest.approx(sigma * C * math.sqrt(n), rel=0.05)


def test_fedavg_at_sigma_zero_meets_ppsgd_global_rows_over_a_whole_run():
    """Through run_grid: the same sampler, steps, evaluation points and selection; at sigma = 0 FedAvg with clip-only
    dp reproduces PPSGD's alpha_c = inf curve at every evaluation point and step; at sigma > 0 its noise differs
    (its own draws) but its epsilon is the rows'."""
    cl = blob_clients(np.random.default_rng(3), dtype=np.float32)
    p = _params()
    rows = run_grid(cl, p, np.random.default_rng(5), lin.train)
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    train = method.trainer(lambda seed: method.Linear(d, K), method.squared_loss(0.1, K, True), False)
    mine = run_grid(cl, p | {"method": {"name": "fedavg", "dp": True}}, np.random.default_rng(5), train)
    h, hm = rows.history, mine.history
    for sigma in (0, 3):
        a = h[(h.alpha_label == "inf") & (h.sigma == sigma)].sort_values(["step", "iteration"])
        b = hm[(hm.alpha_label == "fedavg") & (hm.sigma == sigma)].sort_values(["step", "iteration"])
        assert a.iteration.tolist() == b.iteration.tolist() and a.step.tolist() == b.step.tolist()
        assert (a.epsilon.to_numpy() == b.epsilon.to_numpy()).all()
        if sigma == 0:
            np.testing.assert_allclose(a.accuracy.to_numpy(), b.accuracy.to_numpy())
    assert mine.metrics["final_accuracy"]["s0"] == {"fedavg": rows.metrics["final_accuracy"]["s0"]["inf"]}
    assert set(mine.metrics["final_accuracy"]["s3"]) == {"fedavg"}


def test_a_diverging_step_is_dropped_and_every_step_diverging_fails():
    cl = blob_clients(np.random.default_rng(3), dtype=np.float32)
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    train = method.trainer(lambda seed: method.Linear(d, K), method.squared_loss(0.1, K, True), False)
    p = _params(sigmas=[0], steps=[0.01, 1e6], method={"name": "fedavg", "dp": False})
    with np.errstate(all="ignore"):
        its, acc, _ = train(cl, p, 0.0, np.array(p["steps"]), None, 0)
        assert np.isfinite(acc[:, 0]).all() and np.isnan(acc[1:, 1]).all()
        out = run_grid(cl, p, np.random.default_rng(0), train)
        assert out.metrics["final_step"]["s0"]["fedavg"] == 0.01
        with pytest.raises(Diverged, match="every step"):
            train(cl, p | {"steps": [1e6, 1e7]}, 0.0, np.array([1e6, 1e7]), None, 0)


def test_methods_the_sampler_cannot_serve_are_refused():
    cl = blob_clients(np.random.default_rng(3), dtype=np.float32)
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    train = method.trainer(lambda seed: method.Linear(d, K), method.squared_loss(0.1, K, True), False)
    p = _params(sigmas=[0], method={"name": "perfedavg", "dp": False})  # two minibatches per step
    with pytest.raises(ConfigError, match="batches_per_step = 2"):
        train(cl, p, 0.0, np.array([0.01]), None, 0)


def test_pooled_accuracy_matches_a_per_row_loop():
    rng = np.random.default_rng(4)
    cl = blob_clients(rng, n=5, n_test=9, dtype=np.float32)
    cl.test_off = np.array([0, 0, 9, 11, 30, 45])  # users of different test sizes, one with none
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    net = Net(method.Linear(d, K))
    params = {"w": torch.from_numpy(rng.standard_normal((5, d, K)).astype(np.float32))}
    hits = sum(
        cl.y_test[r, np.argmax(cl.x_test[r] @ params["w"][i].numpy())]
        for i in range(5)
        for r in range(cl.test_off[i], cl.test_off[i + 1])
    )
    assert method.pooled_accuracy(net, params, cl, "cpu") == pytest.approx(hits / 45)


def test_the_slots_cells_and_rows():
    p = _params()
    assert method.METHOD_SLOT.methods(p) == ["PPSGD αQ=0", "PPSGD αQ=1", "PPSGD αQ=inf"]
    metrics = {"final_accuracy": {"s0": {"inf": 0.5, "mine": 0.25}, "s0p5": {"inf": 0.125, "mine": 0.75}}}
    assert method.METHOD_SLOT.cells(metrics, "PPSGD αQ=inf") == {"acc σ=0": 50.0, "acc σ=0.5": 12.5}
    assert method.METHOD_SLOT.cells(metrics, "mine") == {"acc σ=0": 25.0, "acc σ=0.5": 75.0}
    only = method.METHOD_SLOT.only(p | {"checks": {"beats_chance": True}}, "mine", True)
    assert only["method"] == {"name": "mine", "dp": True} and only["checks"] == {}
    assert method.METHOD_SLOT.private(p) and not method.METHOD_SLOT.private(p | {"sigmas": [0]})


def test_a_custom_loss_turns_the_batched_formulations_off():
    from fedrepro.learning.models import MLP

    assert Net(MLP(4, 3, [5])).formulation is not None
    assert Net(MLP(4, 3, [5]), loss=method.squared_loss(0.1, 3, True)).formulation is None
    with pytest.raises(ValueError, match="cross-entropy only"):
        Net(MLP(4, 3, [5]), gemm=True, loss=method.squared_loss(0.1, 3, True))


def test_a_method_fine_tuning_with_autograd_at_evaluation_gets_its_context(tmp_path):
    """FedAvgFT fine-tunes in deployed_params on the EvalContext's data (a partition's ClientData, batch m, the
    step's lr) with plain autograd: the trainer calls it with gradients on, as the engine does."""
    from learning_helpers import write_quadrant_partition

    from fedrepro.data import fedformat
    from fedrepro.learning.data import ClientData

    ds = fedformat.load(write_quadrant_partition(tmp_path / "p"))
    x = np.asarray(ds.features, dtype=np.float32).reshape(len(ds.labels), -1) / 255
    o_tr, o_te = ds.offsets("train"), ds.offsets("test")
    eye = np.eye(4, dtype=np.float32)
    cl = Clients(x[o_tr[0] : o_tr[-1]], eye[ds.labels[o_tr[0] : o_tr[-1]]], o_tr - o_tr[0],
                 x[o_te[0] : o_te[-1]], eye[ds.labels[o_te[0] : o_te[-1]]], o_te - o_te[0])  # fmt: skip
    data = ClientData(ds, "cpu", feature_shape=(64,), preload=False)  # uint8 / 255, as x above
    train = method.trainer(lambda seed: method.Linear(64, 4), method.squared_loss(0.1, 4, True), False, data)

    class AutogradFT(FedAvg):
        name = "autograd_ft_test"

        def deployed_params(self, state, ctx=None):
            assert ctx is not None and ctx.batch_size == 5
            w = state.global_params["w"].clone().requires_grad_(True)
            xb, yb = ctx.data.sample(np.arange(state.n_clients), ctx.batch_size, ctx.rng)
            loss = state.net.loss({"w": w}, xb[0], yb[0])
            (g,) = torch.autograd.grad(loss, w)  # fails under an outer no_grad
            return {"w": (w - ctx.lr * g).detach().expand(state.n_clients, *w.shape)}

    from fedrepro.learning.algorithms import register_external

    register_external(AutogradFT)
    p = _params(sigmas=[0], method={"name": "autograd_ft_test", "dp": False})
    its, acc, _ = train(cl, p, 0.0, np.array([0.05]), None, 0)
    assert np.isfinite(acc).all() and len(its) > 1


# ------------------------------------------------------------------------ privacy by construction (client messages)


class FedAvgMessages(FedAvg):
    """FedAvg sending its step as a message (the gradient it applied): the server sees only the protocol's release."""

    name = "fedavg_messages"

    def local_step(self, state, x, y, selected, lr):
        state.lr = lr
        return super().local_step(state, x, y, selected, lr)

    def client_message(self, state, selected):
        return {k: (state.global_params[k] - v) / state.lr for k, v in state.local.items()}

    def server_update(self, state, selected, released):
        state.global_params = {k: v - state.lr * released[k] for k, v in state.global_params.items()}
        state.local = None


@pytest.fixture
def registered():
    from pathlib import Path

    from fedrepro.compare.method_file import load_method
    from fedrepro.learning import algorithms

    algorithms.register_external(FedAvgMessages)
    scaffold = load_method(f"{Path(__file__).parents[3] / 'examples' / 'scaffold.py'}:Scaffold")
    algorithms.register_external(scaffold)
    return scaffold


def test_a_method_sending_messages_is_released_by_the_protocol(registered):
    """By construction: FedAvg's step sent as a message and released by PPSGD's protocol is PPSGD's global learning
    at sigma = 0 (the clipped mean of the gradients); at sigma > 0 the method is built without dp= (nothing to apply
    itself) and spends the rows' epsilon."""
    assert method.by_construction("fedavg_messages") and not method.by_construction("fedavg")
    cl = blob_clients(np.random.default_rng(3), dtype=np.float32)
    p = _params()
    rows = run_grid(cl, p, np.random.default_rng(5), lin.train)
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    train = method.trainer(lambda seed: method.Linear(d, K), method.squared_loss(0.1, K, True), False)
    mine = run_grid(cl, p | {"method": {"name": "fedavg_messages", "dp": True}}, np.random.default_rng(5), train)
    h, hm = rows.history, mine.history
    a = h[(h.alpha_label == "inf") & (h.sigma == 0)].sort_values(["step", "iteration"])
    b = hm[(hm.alpha_label == "fedavg_messages") & (hm.sigma == 0)].sort_values(["step", "iteration"])
    np.testing.assert_allclose(a.accuracy.to_numpy(), b.accuracy.to_numpy(), rtol=1e-5)
    assert mine.metrics["epsilon"]["s3"]["fedavg_messages"] == rows.metrics["epsilon"]["s3"]["inf"] > 0
    assert rows.metrics["epsilon"]["s3"]["0"] == 0.0  # alpha Q = 0 releases nothing


def test_the_release_clips_each_message_and_adds_the_servers_noise():
    n, C, sigma = 6, 0.5, 2.0
    msg = {"a": torch.ones(n, 3, dtype=torch.float64) * 10, "b": torch.zeros(n, 2, dtype=torch.float64)}
    out = method.release(msg, C, 0.0, torch.Generator().manual_seed(0))
    assert torch.allclose(out["a"], torch.full((3,), C / math.sqrt(3), dtype=torch.float64))  # clipped, then mean
    draws = torch.stack([method.release(msg, C, sigma, torch.Generator().manual_seed(s))["b"] for s in range(3000)])
    assert draws.std().item() == pytest.approx(sigma * C / n, rel=0.05)  # N(0, (sigma C)^2) on the sum, / n


def test_scaffold_runs_by_construction_and_its_rows_epsilon_is_the_protocols(registered):
    """examples/scaffold.py under PPSGD's linear protocol: released (Delta y, Delta c) only; finite accuracy; the
    slot's cells give its epsilon per sigma equal to the PPSGD rows' at the same sigma."""
    assert method.by_construction("scaffold")
    cl = blob_clients(np.random.default_rng(3), dtype=np.float32)
    p = _params()
    d, K = cl.x_train.shape[1], cl.y_train.shape[1]
    train = method.trainer(lambda seed: method.Linear(d, K), method.squared_loss(0.1, K, True), False)
    out = run_grid(cl, p | {"method": {"name": "scaffold", "dp": True}}, np.random.default_rng(5), train)
    rows = run_grid(cl, p, np.random.default_rng(5), lin.train)
    cells = method.METHOD_SLOT.cells(out.metrics, "scaffold")
    paper = method.METHOD_SLOT.cells(rows.metrics, "PPSGD αQ=1")
    assert cells["ε σ=3"] == paper["ε σ=3"] and math.isfinite(cells["acc σ=3"])
    assert cells["ε σ=0"] == math.inf  # no noise: no finite guarantee
    assert method.METHOD_SLOT.paired(p, "PPSGD αQ=1") == ["acc σ=0", "acc σ=3"]
