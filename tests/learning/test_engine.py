"""Batched federated engine: models, vmap == per-client loop, FedAvg on IID data == centralized SGD, data adapter,
vectorized evaluation, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import banded_images as images
from learning_helpers import iid_vectors, kink_margin
from torch.nn import functional as F

from fedrepro.data import fedformat
from fedrepro.data.partition import Partition
from fedrepro.errors import ConfigError
from fedrepro.learning import engine
from fedrepro.learning.data import ClientData, from_arrays
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.local import Local
from fedrepro.learning.models import MLP, Cifar100CNN, LeNet5, build_model, n_params
from fedrepro.learning.net import sgd
from fedrepro.papers.adaped.adaped import AdaPeD

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------------------------------- models


def test_model_sizes():
    assert n_params(LeNet5()) == 44_426
    assert n_params(LeNet5(in_channels=3, input_hw=32)) == 62_006
    assert n_params(build_model("cifar10_cnn")) == 62_006
    assert n_params(Cifar100CNN()) == 815_332
    assert LeNet5()(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert build_model("cifar100_cnn")(torch.zeros(2, 3, 32, 32)).shape == (2, 100)
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        build_model("resnet")


# ---------------------------------------------------------------------------------------- vmap == Python loop


@pytest.mark.parametrize(
    "make, shape", [(LeNet5, (1, 28, 28)), (lambda: MLP(20, 10, (16, 8)), (20,))], ids=["lenet5", "mlp"]
)
def test_batched_grads_equal_loop(make, shape):
    """Equal to float32 rounding, on data held away from the kinks where rounding may route a gradient elsewhere
    (the model is made here, under the seed: one made at collection took whatever the random state was then)."""
    torch.manual_seed(0)
    model = make()
    net = engine.Net(model)
    params = {k: v + 0.05 * torch.randn_like(v) for k, v in net.replicate(5).items()}  # distinct clients
    x, y = torch.rand(5, 8, *shape), torch.randint(0, 10, (5, 8))
    assert kink_margin(model, params, x) > 1e-6
    grads, losses = engine.client_grads(net, params, x, y)
    ref, ref_losses = engine.loop_grads(model, params, x, y)
    for k in params:
        torch.testing.assert_close(grads[k], ref[k], atol=1e-6, rtol=0)
    torch.testing.assert_close(losses, ref_losses, atol=1e-6, rtol=0)
    net.vectorize = False
    loop, _ = engine.client_grads(net, params, x, y)
    for k in params:
        torch.testing.assert_close(loop[k], ref[k], atol=1e-6, rtol=0)


def test_kink_margin_finds_a_pooling_tie_and_a_relu_at_zero():
    """The guard of the test above fails where it must: equal values in a pooling window, a ReLU input of 0."""
    torch.manual_seed(0)
    cnn = LeNet5()
    params = {k: v.detach()[None] for k, v in cnn.named_parameters()}
    uniform = torch.full((1, 2, 1, 28, 28), 0.5)  # every pooling window of the first convolution holds one value
    assert kink_margin(cnn, params, torch.rand(1, 2, 1, 28, 28)) > 0
    assert kink_margin(cnn, params, uniform) == 0
    mlp = MLP(20, 10, (16,))
    params = {k: v.detach().double()[None] for k, v in mlp.named_parameters()}
    x = torch.rand(1, 3, 20, dtype=torch.float64)
    assert kink_margin(mlp, params, x) > 1e-6
    params["hidden.0.bias"][0, 0] = -params["hidden.0.weight"][0, 0] @ x[0, 1]  # unit 0 at 0 on the second row
    assert kink_margin(mlp, params, x) < 1e-12


@pytest.mark.parametrize("vectorize", [True, False])
def test_client_sgd_is_client_grads_then_sgd(vectorize):
    """The fused step does the same arithmetic: equal to the bit, on both paths and in chunks."""
    torch.manual_seed(0)
    net = engine.Net(LeNet5(n_classes=3), vectorize=vectorize, chunk_size=2)
    params = {k: v + 0.05 * torch.randn_like(v) for k, v in net.replicate(5).items()}
    x, y = torch.rand(5, 4, 1, 28, 28), torch.randint(0, 3, (5, 4))
    fused, losses = engine.client_sgd(net, params, x, y, 0.3, 1e-3)
    grads, ref_losses = engine.client_grads(net, params, x, y)
    ref = sgd(params, grads, 0.3, 1e-3)
    assert all(torch.equal(fused[k], ref[k]) for k in params) and torch.equal(losses, ref_losses)
    assert not torch.equal(fused["fc3.bias"], sgd(params, grads, 0.3, 0.0)["fc3.bias"])


@pytest.mark.parametrize("algorithm", [FedAvg(), AdaPeD(psi0=1.0)], ids=["fedavg", "adaped"])
def test_training_batched_equals_loop(algorithm):
    data = images(4, 20, 10)
    kw = dict(batch_size=5, lr=0.2, rounds=5, tau=3, clients_per_round=3, seed=3, eval_every=1)
    batched = engine.train(algorithm, data, lambda: LeNet5(n_classes=3), **kw)
    loop = engine.train(algorithm, data, lambda: LeNet5(n_classes=3), vectorize=False, **kw)
    assert len(batched) == len(loop) == 5 and len({h["test_acc"] for h in batched}) > 1
    for a, b in zip(batched, loop):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], abs=1e-6), k


# --------------------------------------------------------------------------- FedAvg on IID data == centralized SGD


def test_fedavg_iid_tau1_equals_centralized_sgd():
    """tau = 1, all m clients, equal batch sizes: (1/m) sum_i (w - lr g_i) = w - lr * grad of the union batch."""
    torch.manual_seed(0)
    m, B, lr, wd = 6, 4, 0.3, 1e-3
    model = MLP(5, 3, (8,))
    central = MLP(5, 3, (8,))
    central.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(central.parameters(), lr=lr, weight_decay=wd)
    algo = FedAvg(weight_decay=wd)
    state = algo.init_state(engine.Net(model), m, torch.Generator())
    everyone = torch.arange(m)
    for _ in range(5):
        x, y = torch.randn(m, B, 5), torch.randint(0, 3, (m, B))
        algo.start_round(state, everyone)
        algo.local_step(state, x, y, everyone, lr)
        algo.sync(state, everyone)
        opt.zero_grad()
        F.cross_entropy(central(x.reshape(-1, 5)), y.reshape(-1)).backward()
        opt.step()
    for k, v in central.named_parameters():
        torch.testing.assert_close(state.global_params[k], v.detach(), atol=1e-5, rtol=0)
    deployed = algo.deployed_params(state)
    assert all(v.shape[0] == m and torch.equal(v[0], v[-1]) for v in deployed.values())


def test_fedavg_steps_its_own_models_in_place_with_the_bits_of_a_copying_step():
    """FedAvg's MLP step writes into the round's models (start_round's copies), and its numbers are those of the
    step that leaves its input alone; the global model is untouched until the sync."""
    torch.manual_seed(0)
    m, B, lr, wd = 5, 4, 0.3, 1e-3
    algo = FedAvg(weight_decay=wd)
    net = engine.Net(MLP(5, 3, (8,)))
    assert net.formulation is not None  # the fused MLP step, the one that can write in place
    state = algo.init_state(net, m, torch.Generator())
    everyone = torch.arange(m)
    algo.start_round(state, everyone)
    global_before = {k: v.clone() for k, v in state.global_params.items()}
    for _ in range(3):
        x, y = torch.randn(m, B, 5), torch.randint(0, 3, (m, B))
        before = {k: v.clone() for k, v in state.local.items()}
        storage = {k: v.data_ptr() for k, v in state.local.items()}
        expected, expected_losses = engine.client_sgd(net, before, x, y, lr, wd)
        losses = algo.local_step(state, x, y, everyone, lr)
        assert {k: v.data_ptr() for k, v in state.local.items()} == storage
        assert all(torch.equal(state.local[k], expected[k]) for k in expected) and torch.equal(losses, expected_losses)
        assert all(torch.equal(before[k], v) for k, v in before.items())  # the copying step left its input alone
        assert not all(torch.equal(before[k], state.local[k]) for k in before)  # and the step did move the models
    assert all(torch.equal(state.global_params[k], v) for k, v in global_before.items())


def test_fedavg_full_batch_train_equals_gradient_descent():
    """Through train(): batch = a client's whole (equal-size) data, tau = 1 -> full-batch GD on the union."""
    m, n, rounds, lr = 4, 12, 6, 0.5
    data = iid_vectors(m, n)
    torch.manual_seed(1)
    model = MLP(6, 3, (8,))
    hist = engine.train(FedAvg(weight_decay=0.0), data, model, batch_size=n, lr=lr, rounds=rounds, tau=1, eval_every=0)
    gd = MLP(6, 3, (8,))
    gd.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(gd.parameters(), lr=lr)
    xtr, ytr = (torch.from_numpy(a) for a in data.split_arrays("train"))
    for _ in range(rounds):
        opt.zero_grad()
        F.cross_entropy(gd(xtr), ytr).backward()
        opt.step()
    xte, yte = (torch.from_numpy(a) for a in data.split_arrays("test"))
    with torch.no_grad():
        logits = gd(xte)
    assert hist[-1]["test_loss"] == pytest.approx(F.cross_entropy(logits, yte).item(), abs=1e-5)
    assert hist[-1]["test_acc_weighted"] == pytest.approx((logits.argmax(1) == yte).double().mean().item())


# ------------------------------------------------------------------------------------------- data and evaluation


def test_client_data_on_a_written_dataset(tmp_path):
    rng = np.random.default_rng(0)
    xtr, ytr = rng.integers(0, 256, (30, 8, 8), dtype=np.uint8), rng.integers(0, 3, 30)
    xte, yte = rng.integers(0, 256, (9, 8, 8), dtype=np.uint8), rng.integers(0, 3, 9)
    part = Partition("test", {"seed": 0}, 3, np.arange(30) % 3, np.arange(9) % 3)
    ds = fedformat.load(fedformat.write(tmp_path / "ds", part, xtr, ytr, xte, yte))
    for preload in (True, False):
        cd = ClientData(ds, preload=preload)
        assert cd.feature_shape == (1, 8, 8)
        x, y = cd.sample(np.array([0, 2]), 4, np.random.default_rng(1))
        assert x.shape == (2, 4, 1, 8, 8) and x.dtype == torch.float32 and y.shape == (2, 4)
        rows = ds.sample_rows(np.array([0, 2]), 4, np.random.default_rng(1), replace=False)
        expected = torch.from_numpy(ds.features[rows][:, :, None].astype(np.float32)) / 255
        torch.testing.assert_close(x, expected, atol=1e-6, rtol=0)
        assert (ds.client_id[rows] == np.array([[0], [2]])).all() and (y.numpy() == ds.labels[rows]).all()
    with pytest.raises(ValueError, match="feature_shape"):
        ClientData(ds, feature_shape=(1, 28, 28))


def test_vectorized_evaluation_matches_per_client_loop():
    rng = np.random.default_rng(0)
    sizes = [7, 1, 0, 12]
    blocks = [(rng.normal(size=(k, 4)).astype(np.float32), rng.integers(0, 3, k)) for k in sizes]
    data = ClientData(from_arrays(blocks, blocks, n_classes=3))
    torch.manual_seed(0)
    model = MLP(4, 3, (5,))
    net = engine.Net(model)
    params = {k: v + 0.5 * torch.randn_like(v) for k, v in net.replicate(4).items()}
    ev = engine.evaluate(net, params, data, "test", max_rows=8)  # 2 rows per client per chunk: 6 chunks
    for c, (x, y) in enumerate(blocks):
        if not len(y):
            assert np.isnan(ev["acc"][c])
            continue
        with torch.no_grad():
            logits = torch.func.functional_call(model, {k: v[c] for k, v in params.items()}, (torch.from_numpy(x),))
        assert ev["acc"][c] == pytest.approx((logits.argmax(1).numpy() == y).mean())
        assert ev["loss"][c] == pytest.approx(F.cross_entropy(logits, torch.from_numpy(y)).item(), rel=1e-5)
    summary = engine.summarize(ev)
    assert summary["test_acc"] == pytest.approx(np.nanmean(ev["acc"]))
    assert summary["test_acc_weighted"] == pytest.approx(np.nansum(ev["acc"] * ev["count"]) / 20)


def test_a_model_whose_logits_are_not_finite_predicts_nothing():
    """argmax over a NaN row picks the NaN's index (class 0 here): the old evaluation scored a diverged model as
    right on every row of class 0. Now such a row is a miss, and its loss NaN."""
    blocks = [
        (np.ones((4, 4), np.float32), np.zeros(4, np.int64)),
        (np.ones((3, 4), np.float32), np.zeros(3, np.int64)),
    ]
    data = ClientData(from_arrays(blocks, blocks, n_classes=3))
    torch.manual_seed(0)
    net = engine.Net(MLP(4, 3, (5,)))
    params = net.replicate(2)
    params = {k: v.clone() for k, v in params.items()}
    for v in params.values():
        v[0] = float("nan")  # client 0's model diverged, client 1's did not
    ev = engine.evaluate(net, params, data)
    assert ev["acc"][0] == 0.0 and np.isnan(ev["loss"][0])
    assert np.isfinite(ev["loss"][1]) and ev["acc"][1] in (0.0, 1.0)


# ---------------------------------------------------------------------------------------------- round loop


def test_schedule_rounds_and_callback():
    data = iid_vectors(5, 10)
    seen = []
    hist = engine.train(
        Local(),
        data,
        lambda: MLP(6, 3),
        batch_size=5,
        lr=0.1,
        lr_decay=0.5,
        epochs=3,
        tau=2,
        clients_per_round=2,
        eval_every=2,
        callback=seen.append,
    )
    # iters_per_epoch = ceil(10 / 5) = 2 -> T = 6 iterations, 3 rounds; evaluations after rounds 2 and 3
    assert [h["round"] for h in hist] == [2, 3] and [h["iteration"] for h in hist] == [4, 6]
    assert [h["lr"] for h in hist] == [0.025, 0.0125] and hist[-1]["epoch"] == 3
    assert [s["round"] for s in seen] == [1, 2, 3] and ["eval" in s for s in seen] == [False, True, True]
    # each evaluation row carries the per-round losses since the previous one (the trace a replay reruns)
    assert [h["round_losses"] for h in hist] == [
        [seen[0]["train_loss"], seen[1]["train_loss"]],
        [seen[2]["train_loss"]],
    ]
    assert hist[0]["train_loss"] == pytest.approx(np.mean(hist[0]["round_losses"]))
    with pytest.raises(ValueError, match="exactly one"):
        engine.train(Local(), data, lambda: MLP(6, 3), batch_size=5, lr=0.1, rounds=2, epochs=1)
    with pytest.raises(ValueError, match="clients_per_round"):
        engine.train(Local(), data, lambda: MLP(6, 3), batch_size=5, lr=0.1, rounds=2, clients_per_round=6)


def test_a_minibatch_larger_than_memory_is_one_line_before_anything_is_allocated(monkeypatch):
    """batch_size is a size a user sets (--set): a minibatch whose inputs alone exceed the machine's memory ends in a
    ResourceError naming batch_size and both sizes, not in torch's allocation traceback; one that fits trains."""
    from fedrepro.errors import ResourceError
    from fedrepro.experiments import memory

    data = iid_vectors(5, 10)  # 6 float32 features; Local steps every client: 5 x B rows hold 120 B bytes of inputs
    monkeypatch.setattr(memory, "machine_memory", lambda: 120 * 1000)
    kw = dict(lr=0.1, rounds=1, tau=1, clients_per_round=2)
    with pytest.raises(
        ResourceError, match=r"^training \(5 clients a step\): batch_size=1001: its arrays need at least 117 KiB"
    ):
        engine.train(Local(), data, lambda: MLP(6, 3), batch_size=1001, **kw)
    assert len(engine.train(Local(), data, lambda: MLP(6, 3), batch_size=1000, **kw)) == 1


@pytest.mark.parametrize(
    "algorithm",
    [
        FedAvg(dp={"clip": 0.5, "noise_multiplier": 1.0}),
        AdaPeD(dp_mu={"clip": 0.5, "noise_multiplier": 1.0}, dp_psi={"clip": 0.5, "noise_multiplier": 1.0}),
    ],
    ids=["dp_fedavg", "dp_adaped"],
)
def test_same_seed_same_history(algorithm):
    data = iid_vectors(6, 16)
    kw = dict(batch_size=4, lr=0.1, rounds=4, tau=3, clients_per_round=3, eval_every=2)
    first = engine.train(algorithm, data, lambda: MLP(6, 3), seed=5, **kw)
    assert engine.train(algorithm, data, lambda: MLP(6, 3), seed=5, **kw) == first
    assert engine.train(algorithm, data, lambda: MLP(6, 3), seed=6, **kw) != first


def test_standardize_uses_training_moments_only():
    data = images(3, 20, 10)
    plain, std = ClientData(data), ClientData(data, standardize=True)
    train_rows = np.flatnonzero(data.split == 0)
    x_train = data.features[train_rows].astype(np.float64) / 255
    assert std.shift == pytest.approx(x_train.mean()) and std.divide == pytest.approx(x_train.std())
    xs, _ = std.gather(train_rows)
    assert float(xs.mean()) == pytest.approx(0.0, abs=1e-5) and float(xs.std()) == pytest.approx(1.0, abs=1e-3)
    test_rows = np.flatnonzero(data.split == 1)
    (xp, _), (xt, _) = plain.gather(test_rows), std.gather(test_rows)
    torch.testing.assert_close(xt, (xp - std.shift) / std.divide)


@pytest.mark.parametrize("preload", [True, False])
def test_gather_is_the_rows_cast_and_scaled_bit_for_bit(preload):
    """gather's row copy and one-pass cast-and-scale give the bits of indexing the rows and x.float() * (1 / 255),
    the arithmetic the archived runs were made with, for every uint8 value; rows repeat and come in any order."""
    rng = np.random.default_rng(0)
    feats = np.arange(256 * 12, dtype=np.int64).reshape(-1, 12, 1) % 256  # every value, in every column
    feats = np.concatenate([feats, rng.integers(0, 256, (40, 12, 1))]).astype(np.uint8)
    n = len(feats)
    blocks = [(feats[: n // 2], rng.integers(0, 5, n // 2)), (feats[n // 2 :], rng.integers(0, 5, n - n // 2))]
    ds = from_arrays(blocks, [(feats[:3], np.zeros(3, np.int64))] * 2, n_classes=5)
    data = ClientData(ds, feature_shape=(1, 12, 1), preload=preload)
    rows = np.concatenate([rng.permutation(n), rng.integers(0, n, n)]).reshape(2, -1, 4)  # (clients, steps, B)
    x, y = data.gather(rows)
    reference = torch.from_numpy(ds.features[rows].astype(np.float32)) * (1 / 255)
    assert x.shape == (*rows.shape, 1, 12, 1) and x.dtype == torch.float32
    assert torch.equal(x.view(torch.int32), reference.reshape(x.shape).view(torch.int32))
    assert torch.equal(y, torch.from_numpy(ds.labels[rows]))
    # the same check fails for another arithmetic of the same value: dividing by 255 rounds some values differently
    divided = torch.from_numpy(ds.features[rows].astype(np.float32)) / 255
    assert not torch.equal(divided.reshape(x.shape).view(torch.int32), x.view(torch.int32))


def test_resolve_device():
    from fedrepro.errors import ConfigError

    has_gpu = torch.cuda.is_available()
    assert engine.resolve_device("auto") == ("cuda" if has_gpu else "cpu")
    assert engine.resolve_device("cpu") == "cpu"
    if not has_gpu:
        with pytest.raises(ConfigError, match="params.device"):
            engine.resolve_device("cuda")


def test_keep_freed_memory_sets_glibc_options():
    """On glibc every mallopt call is accepted (mallopt returns 1); elsewhere it reports False and changes nothing.
    Training does not depend on it: the histories of the tests above run with it set."""
    import platform

    applied = engine.keep_freed_memory()
    assert isinstance(applied, bool)
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert applied
