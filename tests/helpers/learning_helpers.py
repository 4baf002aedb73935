"""Shared scaffolding for the learning tests (imported by the test modules; not collected: no ``test_`` prefix).

Importing this module imports torch, so only torch tests should import it; ``conftest.py`` reaches it lazily.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.func import functional_call

from fedrepro.data.fedformat import FederatedDataset
from fedrepro.learning.data import from_arrays
from fedrepro.learning.models import MLP, ConvNet

D, C = 8, 6  # feature dimension, classes of the Gaussian blobs


def mlp():
    return MLP(D, C, (16,))


def make_blobs(
    n_clients: int = 8,
    seed: int = 0,
    n_train: int = 60,
    n_test: int = 30,
    dim: int = D,
    n_classes: int = C,
    classes_per_client: int = 3,
) -> FederatedDataset:
    """Gaussian blobs, pathological non-IID: each client holds ``classes_per_client`` of ``n_classes`` classes
    (centers ~ 2.5 N(0, I), unit noise), ``n_train`` train / ``n_test`` test rows per client."""
    rng = np.random.default_rng(seed)
    centers = 2.5 * rng.normal(size=(n_classes, dim))
    classes = [rng.choice(n_classes, classes_per_client, replace=False) for _ in range(n_clients)]

    def block(cls, n):
        y = rng.choice(cls, n)
        return (centers[y] + rng.normal(size=(n, dim))).astype(np.float32), y

    return from_arrays([block(c, n_train) for c in classes], [block(c, n_test) for c in classes], n_classes=n_classes)


def assert_batched_equals_loop(algorithm, data, model, rounds: int = 4, tol: float = 1e-6, **kw) -> None:
    """The vmapped engine and its per-client Python loop give the same history (to ``tol``), and it is not flat."""
    import pytest

    from fedrepro.learning import engine

    kw = dict(dict(batch_size=5, lr=0.2, tau=3, clients_per_round=3, seed=3, eval_every=1), **kw)
    batched = engine.train(algorithm, data, model, rounds=rounds, **kw)
    loop = engine.train(algorithm, data, model, rounds=rounds, vectorize=False, **kw)
    assert len(batched) == len(loop) == rounds and len({h["test_acc"] for h in batched}) > 1
    for a, b in zip(batched, loop):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], abs=tol), k


def ditto_host(name: str, lams=(0.1, 0.5), r: float = 0.5):
    """A host of Ditto's personal sets on 8 clients for the side-by-side tests: FedHDP (``name`` "fedhdp", 1 of 4
    clients opting out, merge weight ``r``, ``lams``) or DP-FedAvg with adaptive clipping and weight decay."""
    from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
    from fedrepro.papers.fedhdp.fedhdp import FedHDP

    clip = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 1.0}
    if name == "fedhdp":
        return FedHDP(private=np.arange(8) % 4 != 1, r=r, noise_multiplier=0.5, clip=clip, lams=list(lams))
    return DPFedAvgAdaptive(noise_multiplier=0.5, clip=clip, lams=[0.1, 1.0], weight_decay=1e-3)


def assert_trained_alike(a: tuple, b: tuple) -> None:
    """Two trainings, each (history, final_models()), give the same history to 1e-6 and personal models to float32
    rounding."""
    import pytest

    for ha, hb in zip(a[0], b[0]):
        for k in ha:
            assert ha[k] == pytest.approx(hb[k], abs=1e-6), k
    for pa, pb in zip(a[1]["personal"], b[1]["personal"]):
        for k in pa:
            torch.testing.assert_close(pa[k], pb[k], rtol=1e-5, atol=1e-6, msg=k)


def kink_margin(model: ConvNet | MLP, params: dict, x: torch.Tensor) -> float:
    """How far every client's forward (float64) is from a kink of the loss it differentiates: the smallest |input|
    of a ReLU and, in a max-pool window whose largest input is positive, the gap to its second largest. params
    name -> (K, *shape), x (K, B, ...).

    Why: two float32 computations of a gradient that differ in summation order only agree to rounding (~1e-7 of
    the activations) away from kinks. Within rounding of one, they may route the gradient differently (another
    pooled element, a ReLU open on one side only) and differ by a whole term, ~1e-4. A test that compares them to
    1e-6 holds its data away from kinks and says so, instead of failing for some draws of its data."""
    double = {k: v.double() for k, v in params.items()}
    if isinstance(model, ConvNet):
        pooled = [getattr(model, name) for name in model.conv_layers]
        relu = [getattr(model, name) for name in model.fc_layers[:-1]]
    else:
        pooled, relu = [], list(model.hidden)
    margins: list[torch.Tensor] = []

    def window_margin(module, inputs, z):
        windows = z.unfold(2, model.pool, model.pool).unfold(3, model.pool, model.pool).flatten(-2)
        top = windows.topk(2, -1).values
        first, gap = top[..., 0], top[..., 0] - top[..., 1]
        margins.append(torch.where(first > 0, torch.minimum(first, gap), -first).min())

    hooks = [m.register_forward_hook(window_margin) for m in pooled]
    hooks += [m.register_forward_hook(lambda module, inputs, z: margins.append(z.abs().min())) for m in relu]
    try:
        for i in range(x.shape[0]):
            functional_call(model, {k: v[i] for k, v in double.items()}, (x[i].double(),))
    finally:
        for hook in hooks:
            hook.remove()
    return min(margins).item()


def banded_images(m: int, n_train: int, n_test: int, seed: int = 0) -> FederatedDataset:
    """m clients of uint8 28x28 noise images with a bright horizontal band at a label-dependent height (3 classes)."""
    rng = np.random.default_rng(seed)

    def block(n):
        y = rng.integers(0, 3, n)
        x = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for c in range(3):
            x[y == c, 9 * c : 9 * c + 9] += 180
        return x, y

    return from_arrays([block(n_train) for _ in range(m)], [block(n_test) for _ in range(m)], n_classes=3)


def iid_vectors(m: int, n: int, d: int = 6, seed: int = 0, n_classes: int = 3) -> FederatedDataset:
    """m clients of n standard normal d-vectors per split, labelled by the argmax of one random linear map."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(d, n_classes))

    def block(k):
        x = rng.normal(size=(k, d)).astype(np.float32)
        return x, (x @ w).argmax(1)

    return from_arrays([block(n) for _ in range(m)], [block(n) for _ in range(m)], n_classes=n_classes)


def make_quadrants(n_clients: int = 6, n_train: int = 30, n_test: int = 20, seed: int = 0) -> FederatedDataset:
    """In memory, the images of :func:`write_quadrant_partition`: 8x8 uint8, class (of 4) = the bright quadrant,
    2 classes per client. For the CNN tests (``small_cnn``)."""
    rng = np.random.default_rng(seed)

    def block(classes, n):
        y = rng.choice(classes, n)
        x = rng.integers(0, 40, (n, 8, 8)).astype(np.uint8)
        for c in range(4):
            r, q = divmod(c, 2)
            x[y == c, 4 * r : 4 * r + 4, 4 * q : 4 * q + 4] += 200
        return x, y

    classes = [rng.choice(4, 2, replace=False) for _ in range(n_clients)]
    return from_arrays([block(c, n_train) for c in classes], [block(c, n_test) for c in classes], n_classes=4)


def small_cnn():
    """FedHDP's CNN on 8x8 inputs, 4 classes (padded 3x3 convolutions; 21,828 parameters): a ConvNet that the
    engine computes in its batched formulation (``fedrepro.learning.batched_cnn``)."""
    from fedrepro.papers.fedhdp.cnn import FedHDPCNN

    return FedHDPCNN(n_classes=4, input_hw=8)


def write_quadrant_partition(
    path, n_clients: int = 6, n_train: int = 40, n_test: int = 20, noise: int = 40, bright: int = 200, seed: int = 0
):
    """A synthetic federated dataset on disk (fedrepro's format): 8x8 uint8 images whose class (of 4) is a bright
    quadrant over uniform noise, each client holding 2 of the 4 classes, ``n_train`` / ``n_test`` rows per client."""
    from fedrepro.data import fedformat
    from fedrepro.data.partition import Partition

    rng = np.random.default_rng(seed)

    def images(labels):
        x = rng.integers(0, noise, (len(labels), 8, 8)).astype(np.uint8)
        for c in range(4):
            r, q = divmod(c, 2)
            x[labels == c, 4 * r : 4 * r + 4, 4 * q : 4 * q + 4] += bright
        return x

    classes = [rng.choice(4, 2, replace=False) for _ in range(n_clients)]
    ytr = np.concatenate([rng.choice(c, n_train) for c in classes])
    yte = np.concatenate([rng.choice(c, n_test) for c in classes])
    part = Partition(
        "synthetic_quadrants",
        {"seed": seed},
        n_clients,
        np.repeat(np.arange(n_clients), n_train),
        np.repeat(np.arange(n_clients), n_test),
    )
    return fedformat.write(path, part, images(ytr), ytr, images(yte), yte)


def write_digit_manifest(path, sevens_private: int, opt_out: int, per_other_digit: int, test: int = 5):
    """A partition's manifest.json alone (what FedHDP's collapse forensics reads), skewed as FedHDP's: ``opt_out``
    opt-out clients and ``sevens_private`` private clients of digit 7, ``per_other_digit`` private clients of each other
    digit, every client with ``test`` local test images."""
    import json

    clients = []
    for d in range(10):
        for i in range(sevens_private + opt_out if d == 7 else per_other_digit):
            clients.append({"id": len(clients), "digit": d, "opt_out": d == 7 and i < opt_out, "test": test})
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(json.dumps({"clients": clients}), encoding="utf-8")
    return path


def run_kind(kind_name: str, params: dict, exp_id: str, partitions: dict, seed: int = 0):
    """Resolve ``params`` against the kind's schema (defaults filled, validated, as the workflow does) and run the
    kind on ``partitions``."""
    from kinds import call_kind

    from fedrepro.experiments import RunContext

    return call_kind(kind_name, params, np.random.default_rng(seed), RunContext(exp_id, seed, partitions=partitions))
