"""Client blocks (engine.train's ``block_bytes``): a method that allows them trains its selected clients a block at a
time through a period's local steps, and its history and models are exactly those of all clients stepping together."""

from __future__ import annotations

import pytest
import torch
from learning_helpers import banded_images, iid_vectors

from fedrepro.learning import engine
from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
from fedrepro.learning.fedavg import FedAvg
from fedrepro.learning.models import MLP, LeNet5
from fedrepro.learning.perfedavg import PerFedAvg
from fedrepro.papers.fedhdp.fedhdp import FedHDP

pytestmark = pytest.mark.usefixtures("one_thread")

PRIVATE = [True, False, True, True, False, False, True]  # 7 clients: blocks of 2 leave one of 1


def vectors_mlp():
    """The network the vectors' cases train."""
    return MLP(12, 4, (16,))


def vectors():
    return iid_vectors(7, 24, d=12, n_classes=4)


def images():
    return banded_images(5, 12, 12)


def two_clients_per_block(model) -> int:
    """``block_bytes`` that puts two clients' parameters (and their personal sets) in a block."""
    return 1 + 2 * sum(p.numel() * p.element_size() for p in model().parameters())


def run(make_algorithm, data, model, block_bytes, per_client_sets=1, **kw):
    algorithm = make_algorithm()
    kw = dict(batch_size=4, lr=0.1, rounds=3, tau=4, seed=3, eval_every=1, **kw)
    history = engine.train(algorithm, data, model, block_bytes=block_bytes * per_client_sets, **kw)
    final = algorithm.final_models() if hasattr(algorithm, "final_models") else None
    return history, final


def fedhdp(r: float, lams=(0.1, 0.5)):
    return FedHDP(private=PRIVATE, r=r, noise_multiplier=0.5, clip=0.5, lams=list(lams))


CASES = {
    "fedavg_mlp": (FedAvg, vectors, vectors_mlp, {"clients_per_round": 5}, 1),
    "fedavg_lenet": (FedAvg, images, LeNet5, {}, 1),
    "perfedavg": (lambda: PerFedAvg(alpha=0.01), vectors, vectors_mlp, {}, 1),
    # Ditto's sets step alone in blocks where they cannot step side by side (gemm=False; r = 0: some selected
    # clients do not personalize); side by side they take no blocks (test_no_blocks_where_dittos_sets_step_together)
    "fedhdp": (lambda: fedhdp(0.5), vectors, vectors_mlp, {"gemm": False}, 3),
    "fedhdp_r0": (lambda: fedhdp(0.0), vectors, vectors_mlp, {}, 3),
    "dp_fedavg_adaptive": (
        lambda: DPFedAvgAdaptive(noise_multiplier=0.5, lams=[0.1]),
        vectors,
        vectors_mlp,
        {"gemm": False},
        2,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_blocks_train_exactly_as_all_clients_together(case, monkeypatch):
    make, data_fn, model, kw, sets = CASES[case]
    data = data_fn()
    together = run(make, data, model, 0, **kw)
    blocks = []
    original = engine._local_steps_in_blocks

    def counted(*args, **kwargs):
        blocks.append(args[-1])
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "_local_steps_in_blocks", counted)
    in_blocks = run(make, data, model, two_clients_per_block(model), sets, **kw)
    assert blocks and set(blocks) == {2}, "the block path was not taken with two clients a block"
    assert in_blocks[0] == together[0]
    if together[1] is not None:
        models = [[r[1]["global"], *r[1]["personal"]] for r in (together, in_blocks)]
        assert all(torch.equal(a[k], b[k]) for a, b in zip(*models) for k in a)


class ForgetsToMerge(FedAvg):
    """A broken block: the step's new tensors are never written back (FedAvg's CNN step is not in place)."""

    def merge_client_block(self, state, block, rows):
        pass


def test_a_block_that_is_not_merged_back_changes_the_history():
    data = images()
    together = run(ForgetsToMerge, data, LeNet5, 0)
    assert run(ForgetsToMerge, data, LeNet5, two_clients_per_block(LeNet5)) != together


def test_no_blocks_for_a_method_that_draws_noise_in_its_local_steps(monkeypatch):
    monkeypatch.setattr(engine, "_local_steps_in_blocks", lambda *a, **k: pytest.fail("blocks with per-step noise"))
    algorithm = FedAvg(dp={"clip": 0.5, "noise_multiplier": 1.0})
    engine.train(algorithm, vectors(), vectors_mlp, batch_size=4, lr=0.1, rounds=1, block_bytes=1)


def test_no_blocks_where_a_lambda_set_mixes_lambdas(monkeypatch):
    """Private and non-private clients with their own lambdas: one block could hold only one kind, and its step
    would take the one-lambda arithmetic (batched_mlp) that the round's step does not."""
    monkeypatch.setattr(engine, "_local_steps_in_blocks", lambda *a, **k: pytest.fail("blocks with mixed lambdas"))
    algorithm = fedhdp(0.5, lams=[(0.5, 0.05)])
    engine.train(algorithm, vectors(), vectors_mlp, batch_size=4, lr=0.1, rounds=1, block_bytes=1)


def test_no_blocks_where_dittos_sets_step_together(monkeypatch):
    """Side by side (the MLP formulation, every selected client personalizing) the sets' steps take all clients
    at once; where a selected client does not personalize (r = 0) they step alone, in blocks."""
    taken, original = [], engine._local_steps_in_blocks

    def counted(*args, **kwargs):
        taken.append(args[-1])
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "_local_steps_in_blocks", counted)
    kw = dict(batch_size=4, lr=0.1, rounds=2, tau=4, seed=3, block_bytes=two_clients_per_block(vectors_mlp) * 3)
    engine.train(fedhdp(0.5), vectors(), vectors_mlp, **kw)
    assert not taken
    engine.train(fedhdp(0.0), vectors(), vectors_mlp, **kw)
    assert taken and set(taken) == {2}


class NoisyStep(FedAvg):
    """A subclass whose own local step draws noise: FedAvg's permission for blocks must not carry over to it."""

    def local_step(self, state, x, y, selected, lr):
        losses = super().local_step(state, x, y, selected, lr)
        state.local = {k: v + 1e-3 * torch.randn(v.shape, generator=state.generator) for k, v in state.local.items()}
        return losses


def test_a_subclass_that_overrides_the_local_step_gets_no_blocks(monkeypatch):
    assert not engine._blocks_declared_with_local_step(NoisyStep)
    assert engine._blocks_declared_with_local_step(FedAvg) and engine._blocks_declared_with_local_step(PerFedAvg)
    together = run(NoisyStep, vectors(), vectors_mlp, 0)
    assert run(NoisyStep, vectors(), vectors_mlp, two_clients_per_block(vectors_mlp)) == together

    monkeypatch.setattr(engine, "_blocks_declared_with_local_step", lambda cls: True)  # without the rule: blocks
    assert run(NoisyStep, vectors(), vectors_mlp, two_clients_per_block(vectors_mlp)) != together
