"""First layers packed by the clients' input supports (fedrepro.learning.batched_mlp.pack_columns): several steps
of Ditto's sets on packed columns equal the side-by-side steps in float64, the lazy decay and pull included (and
its rescaling); the comparison fails where a support leaves out an input a client uses; the engine trains Ditto's
hosts on packed columns, as it trains them without, to float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learning_helpers import assert_trained_alike, ditto_host, from_arrays

from fedrepro.learning import batched_mlp, engine
from fedrepro.learning.models import MLP

pytestmark = pytest.mark.usefixtures("one_thread")

K, B, F_IN, STEPS = 4, 6, 40, 5


def sparse_clients(seed: int = 0):
    """A float64 784-50-10-like network at small size (40-7-5) with 4 parameter sets of K clients, and STEPS
    minibatches per client whose inputs are zero outside the client's own 12-16 columns (its support)."""
    g = torch.Generator().manual_seed(seed)
    model = MLP(F_IN, 5, (7,)).double()
    base = {k: v.detach() for k, v in model.named_parameters()}
    noise = lambda v: 0.2 * torch.randn(K, *v.shape, generator=g, dtype=torch.float64)  # noqa: E731
    sets = [{k: v.expand(K, *v.shape) + noise(v) for k, v in base.items()} for _ in range(4)]
    support = torch.zeros(K, F_IN, dtype=torch.bool)
    for k in range(K):
        support[k, torch.randperm(F_IN, generator=g)[: 12 + k]] = True
    xs = [torch.randn(K, B, F_IN, generator=g, dtype=torch.float64) * support[:, None, :] for _ in range(STEPS)]
    ys = [torch.randint(0, 5, (K, B), generator=g) for _ in range(STEPS)]
    anchor = {k: v * 0.5 for k, v in base.items()}
    return model, sets, support, xs, ys, anchor


def decays_for(anchor, lam: float = 0.7):
    uniform = torch.full((K,), lam, dtype=torch.float64)
    return [(0.01, None), (0.0, (uniform, anchor)), (0.01, (uniform, anchor)), (0.0, (uniform * 0.1, anchor))]


def run_both(support_used=None, lr: float = 0.3, lam: float = 0.7, looked_up=None):
    """The same STEPS steps side by side and on packed columns: (losses, sets) of each. ``looked_up(step)``: the
    packed steps look x A^T up in the anchor's products of each client's training rows (every minibatch's rows, in
    order), at the minibatch's positions ``looked_up(step)`` (K, B)."""
    model, sets, support, xs, ys, anchor = sparse_clients()
    decays = decays_for(anchor, lam)
    copy = lambda: [{k: v.clone() for k, v in p.items()} for p in sets]  # noqa: E731 (the steps write in place)
    plain = batched_mlp.side_by_side(model, copy())
    packed_sets = batched_mlp.side_by_side(model, copy())
    packed = batched_mlp.pack_columns(model, packed_sets, support if support_used is None else support_used)
    assert packed is not None and packed.width == 16
    if looked_up is not None:
        batched_mlp.look_up_rows(model, packed, torch.cat(xs, 1), anchor)
    out_plain, out_packed = [], []
    for step, (x, y) in enumerate(zip(xs, ys)):
        rows = None if looked_up is None else looked_up(step)
        out_plain.append(batched_mlp.sgd_steps_side_by_side(model, plain, x, y, lr, decays))
        out_packed.append(batched_mlp.sgd_steps_packed(model, packed_sets, packed, x, y, lr, decays, rows))
    batched_mlp.unpack_columns(packed)
    return (out_plain, plain), (out_packed, packed_sets), packed


def assert_same(a, b):
    (losses_a, sets_a), (losses_b, sets_b) = a, b
    for la, lb in zip(losses_a, losses_b):
        for s in range(4):
            torch.testing.assert_close(lb[s], la[s], rtol=0, atol=1e-12)
    for s, (pa, pb) in enumerate(zip(sets_a, sets_b)):
        for k in pa:
            torch.testing.assert_close(pb[k], pa[k], rtol=0, atol=1e-12, msg=f"set {s} {k}")


def test_packed_steps_equal_the_side_by_side_steps():
    """STEPS steps of four sets (weight decay without a pull; a pull with and without decay; a weaker pull) on
    packed columns, unpacked, equal the side-by-side steps: losses and every parameter, in float64."""
    plain, packed, p = run_both()
    assert p.scale[1] < 1 and p.shift[1] > 0  # the pull was kept as two numbers, not applied step by step
    assert_same(plain, packed)


def test_packed_steps_rescale_a_set_whose_scale_runs_low(monkeypatch):
    """A set whose scale falls below REBASE is rescaled into its true values mid-round: still the same steps."""
    monkeypatch.setattr(batched_mlp, "REBASE", 0.5)
    plain, packed, p = run_both(lr=0.5, lam=1.5)
    assert p.scale[1] == 1.0 and p.shift[1] == 0.0  # rescaled at the last step (0.25 < 0.5)
    assert_same(plain, packed)


def minibatch_positions(step: int, shift: int = 0) -> torch.Tensor:
    """Each client's rows of minibatch ``step`` among all STEPS minibatches' rows (``shift``: off by that many)."""
    return (torch.arange(step * B, (step + 1) * B) + shift).expand(K, B) % (STEPS * B)


@pytest.mark.parametrize("dual", [False, True], ids=["weights", "rows' coefficients"])
@pytest.mark.parametrize("rebase", [False, True], ids=["", "rescaled"])
def test_packed_steps_that_look_their_rows_up_equal_the_side_by_side_steps(dual, rebase, monkeypatch):
    """The packed inputs and x A^T looked up in the clients' training rows (batched_mlp.look_up_rows), as Ditto
    does once a round, in place of a gather and a GEMM at each step; and with the weights' changes kept as the rows'
    coefficients (batched_mlp.Dual, here 30 rows against a width of 16), with a set rescaled mid-round too: the same
    steps in float64. Looked up one row off, they differ."""
    monkeypatch.setattr(batched_mlp, "DUAL_MAX", 2.0 if dual else 0.0)
    kw = dict(lr=0.5, lam=1.5) if rebase else {}
    if rebase:
        monkeypatch.setattr(batched_mlp, "REBASE", 0.5)
    plain, packed, p = run_both(looked_up=minibatch_positions, **kw)
    assert (p.dual is None) and (p.scale[1] == 1.0 if rebase else p.scale[1] < 1)  # unpacked; rescaled or not
    assert_same(plain, packed)
    _, off, _ = run_both(looked_up=lambda step: minibatch_positions(step, shift=1), **kw)
    with pytest.raises(AssertionError):
        assert_same(plain, off)


def test_rows_kept_as_coefficients_only_where_they_are_few_against_the_width(monkeypatch):
    model, sets, support, xs, ys, anchor = sparse_clients()
    for dual_max, kept in [(30 / 16, True), (29 / 16, False)]:  # 30 rows, a width of 16
        monkeypatch.setattr(batched_mlp, "DUAL_MAX", dual_max)
        packed = batched_mlp.pack_columns(model, batched_mlp.side_by_side(model, sets), support)
        batched_mlp.look_up_rows(model, packed, torch.cat(xs, 1), anchor)
        assert (packed.dual is not None) == kept


def test_packed_steps_given_rows_of_another_shape_or_none_where_they_need_them_are_stopped(monkeypatch):
    with pytest.raises(ValueError, match="one per minibatch example"):
        run_both(looked_up=lambda step: minibatch_positions(step)[:, :-1])
    monkeypatch.setattr(batched_mlp, "DUAL_MAX", 2.0)  # the changes kept as the rows' coefficients
    with pytest.raises(ValueError, match="a step needs its rows"):
        run_both(looked_up=lambda step: None)


def test_the_packed_comparison_fails_where_a_support_leaves_out_an_input_a_client_uses():
    model, sets, support, *_ = sparse_clients()
    narrower = support.clone()
    narrower[3, int(torch.nonzero(support[3])[-1])] = False  # the widest client's last input: out of the 16 columns
    plain, packed, _ = run_both(support_used=narrower)
    with pytest.raises(AssertionError):
        assert_same(plain, packed)


def test_columns_are_packed_only_where_it_leaves_enough_out_and_for_one_lambda_a_set():
    model, sets, support, xs, ys, anchor = sparse_clients()
    wide = support.clone()
    wide[1, :34] = True  # 34 of 40 columns: above PACK_MAX
    assert batched_mlp.pack_columns(model, batched_mlp.side_by_side(model, sets), wide) is None
    assert batched_mlp.pack_columns(model, sets, support) is None  # not laid side by side
    laid = batched_mlp.side_by_side(model, sets)
    packed = batched_mlp.pack_columns(model, laid, support)
    mixed = torch.tensor([0.0, 0.5, 2.0, 0.05]).double()
    with pytest.raises(ValueError, match="one lambda"):
        batched_mlp.sgd_steps_packed(model, laid, packed, xs[0], ys[0], 0.1, [(0.0, (mixed, anchor))] * 4)


def sparse_images(n_clients: int = 8, n_train: int = 20, n_test: int = 12, seed: int = 0):
    """8x8 uint8 images, class (of 4) = the bright quadrant with noise inside it only, 2 classes per client: each
    client's inputs are zero outside its two quadrants (32 of 64 pixels), as MNIST's digits leave most pixels
    zero."""
    rng = np.random.default_rng(seed)

    def block(classes, n):
        y = rng.choice(classes, n)
        x = np.zeros((n, 8, 8), np.uint8)
        for c in range(4):
            r, q = divmod(c, 2)
            x[y == c, 4 * r : 4 * r + 4, 4 * q : 4 * q + 4] = rng.integers(100, 255, ((y == c).sum(), 4, 4))
        return x, y

    classes = [rng.choice(4, 2, replace=False) for _ in range(n_clients)]
    return from_arrays([block(c, n_train) for c in classes], [block(c, n_test) for c in classes], n_classes=4)


@pytest.mark.parametrize(
    "name",
    [
        "dp_fedavg_adaptive",
        "fedhdp",
        "fedhdp rows",
        "dp_fedavg_adaptive rows",
        "fedhdp mixed lambdas",
        "fedhdp r = 0",
        "fedhdp r = 0 rows",
    ],
)
def test_dittos_hosts_train_on_packed_columns_as_without(name, monkeypatch):
    """DP-FedAvg (adaptive clip, weight decay) and FedHDP with Ditto's sets step on packed columns at every step of
    every round (with one lambda a set) and train as with the engine's ``input_support`` off: the same history and
    models, to float32 rounding; with "rows", their changes kept as the rows' coefficients. With a set's lambdas
    differing between clients the columns are not packed. Where the sets cannot step together (FedHDP at r = 0
    personalizes only its opt-out clients) the global model's copies are packed alone and the personal sets step on
    their own."""

    def make():
        lams = [0.1, (0.5, 0.05)] if "mixed" in name else [0.1, 0.5]
        return ditto_host(name.split()[0], lams=lams, r=0.0 if "r = 0" in name else 0.5)

    data = sparse_images()
    kw = dict(rounds=3, batch_size=5, lr=0.2, tau=3, clients_per_round=4, seed=3, eval_every=1)
    real, calls = batched_mlp.sgd_steps_packed, []
    rows = "rows" in name  # the weights' changes kept as coefficients of the clients' 20 rows (a width of 32)
    monkeypatch.setattr(batched_mlp, "DUAL_MAX", 1.0 if rows else 0.5)

    def counted(*a, **k):  # how many sets; the step was given its rows; it kept the dual
        calls.append((len(a[1]), a[7] is not None, a[2].dual is not None))
        return real(*a, **k)

    monkeypatch.setattr(batched_mlp, "sgd_steps_packed", counted)
    alg = make()
    packed = engine.train(alg, data, lambda: MLP(64, 4, (16,)), **kw), alg.final_models()
    unpacked = "mixed" in name
    assert calls == ([] if unpacked else [(1 if "r = 0" in name else 3, True, rows)] * 3 * 3)
    alg = make()
    plain = engine.train(alg, data, lambda: MLP(64, 4, (16,)), input_support=False, **kw), alg.final_models()
    assert len(calls) == (0 if unpacked else 9) and len({h["test_acc"] for h in packed[0]}) > 1  # none without
    assert_trained_alike(packed, plain)


def test_client_data_gives_each_clients_nonzero_inputs():
    from fedrepro.learning.data import ClientData

    data = ClientData(sparse_images(n_clients=3))
    support = data.nonzero_features("train", max_rows=25)  # a client at a time
    assert support.shape == (3, 64) and support.dtype == torch.bool
    rows, mask = data.ds.padded_rows("train", pad=0)
    for k in range(3):
        x, _ = data.gather(rows[k][mask[k]])
        torch.testing.assert_close(support[k], (x.flatten(1) != 0).any(0))
        assert int(support[k].sum()) == 32


@pytest.mark.parametrize("block_bytes", [0, 1])
def test_each_local_step_sees_the_rows_of_its_minibatch(block_bytes):
    """``Net.minibatch_rows`` (what Ditto looks the anchor's products up by) holds, during each local step, the
    dataset rows whose features and labels the step was given, with every client at once and a client at a time
    (client blocks); outside the steps it is None. ClientData.positions places them in client_rows."""
    from fedrepro.learning.data import ClientData
    from fedrepro.learning.fedavg import FedAvg

    data = ClientData(sparse_images())
    seen = []

    class Probe(FedAvg):
        def local_step(self, state, x, y, selected, lr):
            rows = state.net.minibatch_rows
            gx, gy = data.gather(rows)
            assert torch.equal(gx, x) and torch.equal(gy, y)
            on_rows = data.client_rows(selected.numpy())[np.arange(len(rows))[:, None], data.positions(rows)]
            assert (on_rows == rows).all()
            seen.append(rows.shape)
            return super().local_step(state, x, y, selected, lr)

        def sync(self, state, selected):
            assert state.net.minibatch_rows is None
            super().sync(state, selected)

        block_bytes = lambda self, state: 1  # noqa: E731 (a client a block, where the engine is given blocks)

    kw = dict(rounds=2, batch_size=5, lr=0.2, tau=3, clients_per_round=4, seed=3, block_bytes=block_bytes)
    engine.train(Probe(), data, lambda: MLP(64, 4, (16,)), **kw)
    assert seen == ([(4, 5)] * 6 if block_bytes == 0 else [(1, 5)] * 24)


def test_a_host_that_reads_its_copies_without_unpacking_them_is_stopped(monkeypatch):
    """The local copies are unpacked where the host reads them (DittoAlgorithmMixin.local_models); a host that read
    ``state.local`` directly would read packed columns, and Ditto.finish_round stops it."""
    from fedrepro.learning.ditto import DittoAlgorithmMixin
    from fedrepro.papers.fedhdp.fedhdp import FedHDP

    monkeypatch.setattr(DittoAlgorithmMixin, "local_models", lambda self, state: state.local)
    clip = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 1.0}
    alg = FedHDP(private=np.arange(8) % 4 != 1, r=0.5, noise_multiplier=0.5, clip=clip, lams=[0.1, 0.5])
    with pytest.raises(RuntimeError, match="still packed"):
        engine.train(alg, sparse_images(), lambda: MLP(64, 4, (16,)), rounds=1, batch_size=5, lr=0.2, tau=3, seed=3)
