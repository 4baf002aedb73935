"""benchmarks/paper_scale.py's FLOP count of a FedHDP round, against torch's own FLOP counter of the same step."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from paper_scale import fedhdp_round_flop, mlp_flop_per_example  # noqa: E402


@pytest.mark.parametrize("dims", [[784, 50, 10], [784, 200, 200, 10], [60, 10]])
def test_an_mlp_steps_flop_are_what_torch_counts(dims):
    """Forward, weight gradients and the data gradients autograd forms (not the input's): torch's count of one SGD
    step's products on B examples is B times the model's count (biases are not products)."""
    layers = [torch.nn.Linear(i, o) for i, o in zip(dims[:-1], dims[1:])]
    net = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())][:-1])
    x, y = torch.rand(20, dims[0]), torch.randint(0, dims[-1], (20,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(net(x), y).backward()
    assert counter.get_total_flops() == 20 * mlp_flop_per_example(dims)


def test_a_fedhdp_round_counts_every_method_it_trains_and_model_set():
    """Every method and model set, but a DP-FedAvg method beside a clipped HDP-FedAvg: its training is HDP-FedAvg's
    (fedrepro.papers.fedhdp.experiments.training.shared_trainings); FedHDP at r = 0 (here r0) trains the personal
    sets of its opt-out clients only, none in metrics that do not name them."""
    methods = {"dp": {"algorithm": "dp_fedavg"}, "hdp": {"algorithm": "hdp_fedavg", "clip_nonprivate": True}}
    methods |= {f"r{i}": {"algorithm": "fedhdp", "r": i / 10} for i in range(6)}
    params = {
        "model": {"name": "mlp", "in_features": 784, "hidden": [50]},
        "methods": methods,
        "lams": [0.005, 0.05, 0.25],
        "batch_size": 20,
        "rounds": 500,
    }
    metrics = {"clients_per_round": 100, "local_steps": 50, "n_params": 39_760}
    flop = fedhdp_round_flop(params, metrics)
    assert flop["flop_per_round"] == (6 * 4 + 1) * 100 * 50 * 20 * 159_800
    assert flop["flop_per_seed"] == 500 * flop["flop_per_round"]
    unclipped = {**methods, "hdp": {"algorithm": "hdp_fedavg"}}
    assert (
        fedhdp_round_flop({**params, "methods": unclipped}, metrics)["flop_per_round"]
        == (7 * 4 + 1) * 100 * 50 * 20 * 159_800
    )
    opt_out = {**metrics, "n_clients": 2000, "n_opt_out": 100}  # 5 %: 3 lambda sets for 5 of 100 clients at r = 0
    assert fedhdp_round_flop(params, opt_out)["flop_per_round"] == pytest.approx(
        (6 * 4 + 1 + 3 * 0.05) * 100 * 50 * 20 * 159_800
    )


def test_a_packed_first_layer_counts_the_inputs_its_products_take():
    """At width 0.5 the first layer's forward and weight gradient (4 x 784 x 50 a example) count half; the rest of
    the step in full. FedHDP at r = 0 packs its global model's copies alone (here without opt-out clients: no
    personal sets)."""
    methods = {"hdp": {"algorithm": "hdp_fedavg"}, "r0": {"algorithm": "fedhdp", "r": 0.0}}
    params = {"model": {"name": "mlp", "in_features": 784, "hidden": [50]}, "methods": methods, "lams": [0.1]}
    params |= {"batch_size": 20, "rounds": 500}
    metrics = {"clients_per_round": 100, "local_steps": 50, "n_params": 39_760}
    flop = fedhdp_round_flop(params, metrics, width=0.5)
    packed = 159_800 - 2 * 784 * 50
    assert flop["flop_per_round"] == 100 * 50 * 20 * (2 * packed + 1 * packed)
    assert "over 50.0% of its inputs" in flop["how"]
    assert fedhdp_round_flop({**params, "model": {"name": "lenet5"}}, metrics) is None
    assert fedhdp_round_flop(params, {"local_steps": 50}) is None


def test_rows_kept_as_coefficients_count_their_products_over_the_rows():
    """With R = 27 rows a client kept as coefficients (batched_mlp.Dual) on 50% of 784 inputs: the first layer's
    forward takes 2 x 27 x 50 a example and set and its weight gradient none; a round adds per client the rows'
    products with the starting weights and the change (4 x 27 x 392 x 50 a set), their Gram matrix (2 x 27^2 x 392)
    and their products with the anchor (2 x 27 x 784 x 50). FedHDP at r = 0 the same for its one set (the global
    model's copies), without the anchor."""
    methods = {"hdp": {"algorithm": "hdp_fedavg"}, "r0": {"algorithm": "fedhdp", "r": 0.0}}
    params = {"model": {"name": "mlp", "in_features": 784, "hidden": [50]}, "methods": methods, "lams": [0.1]}
    params |= {"batch_size": 20, "rounds": 500}
    metrics = {"clients_per_round": 100, "local_steps": 50, "n_params": 39_760}
    flop = fedhdp_round_flop(params, metrics, width=0.5, rows=27.0)
    step = 159_800 - 4 * 784 * 50 + 2 * 27 * 50
    once = 2 * 4 * 27 * 392 * 50 + 2 * 27**2 * 392 + 2 * 27 * 784 * 50
    alone = 4 * 27 * 392 * 50 + 2 * 27**2 * 392
    assert flop["flop_per_round"] == pytest.approx(100 * (50 * 2 * 20 * step + once) + 100 * (50 * 20 * step + alone))
    assert "over the 27.0 rows of a client" in flop["how"]
    assert flop["flop_per_round"] < fedhdp_round_flop(params, metrics, width=0.5)["flop_per_round"]
