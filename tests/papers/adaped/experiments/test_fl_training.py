"""The adaped_fl_training experiment kind: every method of a table on one partition, private methods per epsilon with
noise from the privacy module, the lr grid and its selection recorded, checks, and config errors naming the key."""

from __future__ import annotations

import pytest

from fedrepro.errors import ConfigError
from fedrepro.papers.adaped import privacy as adaped_privacy


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory):
    """6 clients of 8x8 uint8 images, 2 of 4 classes each (a bright quadrant per class), 40 train / 20 test each."""
    from learning_helpers import write_quadrant_partition

    return write_quadrant_partition(tmp_path_factory.mktemp("fl") / "p")


def params(**over):
    p = {
        "partition": "p",
        "model": {"name": "mlp", "in_features": 64, "hidden": [16]},
        "epochs": 3,
        "iters_per_epoch": 4,
        "batch_size": "auto",
        "tau": 2,
        "lr_decay": 0.99,
        "eval_every": 2,
        "threads": 1,
        "methods": {
            "fedavg": {"algorithm": "fedavg", "lr": [0.05, 0.2]},
            "adaped": {"algorithm": "adaped", "lr": 0.2, "options": {"psi0": 3.5, "psi_min": 0.5}},
        },
        "checks": {"beats_chance": ["fedavg", "adaped"], "curve": ["adaped"]},
    }
    p.update(over)
    return p


def run(p, partition_dir, seed=0):
    from learning_helpers import run_kind

    return run_kind("adaped_fl_training", p, "adaped.test", {"p": partition_dir}, seed)


def test_methods_lr_grid_and_checks(partition_dir):
    out = run(params(), partition_dir)
    m = out.metrics
    assert set(m["acc"]) == {"fedavg", "adaped"} and m["lr"]["fedavg"] in (0.05, 0.2) and m["lr"]["adaped"] == 0.2
    assert m["batch_size"] == 10 and m["iters_per_epoch"] == 4 and m["rounds"] == 6  # ceil(40/4); 3*4/2
    h = out.history
    assert set(h["lr_grid"]) == {0.05, 0.2} and h[h["method"] == "fedavg"]["selected"].sum() == 3  # 3 evaluations
    chosen = h[(h["method"] == "fedavg") & h["selected"]]
    assert (chosen["lr_grid"] == m["lr"]["fedavg"]).all()
    best = h[h["method"] == "fedavg"].groupby("lr_grid")["test_acc"].last().max()
    assert m["acc"]["fedavg"] == pytest.approx(100 * best)  # select: final_test (default)
    assert out.checks["beats_chance"].passed and out.checks["curve"].passed
    assert "psi" in m and m["psi"]["adaped"] >= 0.5
    assert run(params(), partition_dir).metrics == m  # seeded


def test_private_methods_get_noise_from_the_privacy_module(partition_dir):
    p = params(
        privacy={"epsilons": [2.0, 20.0], "delta": 1e-5, "clip": 0.5},
        methods={
            "dp_fedavg": {"algorithm": "fedavg", "lr": 0.2, "private": True},
            "dp_adaped": {"algorithm": "adaped", "lr": 0.2, "private": True},
        },
        checks={"curve": ["dp_adaped"]},
    )
    out = run(p, partition_dir)
    noise = out.metrics["noise"]
    for method, terms in (("dp_fedavg", 1), ("dp_adaped", 2)):
        assert set(out.metrics["acc"][method]) == {"eps_2p00", "eps_20p00"}
        for eps in (2.0, 20.0):
            rec = noise[method][f"eps_{eps:.2f}".replace(".", "p")]
            z = adaped_privacy.thm5_noise_ratio(eps, 6, 6, 6, 1e-5, terms=terms)
            assert rec["z"] == pytest.approx(z) and rec["sigma"] == pytest.approx(0.5 * z)
            lib = adaped_privacy.library_epsilon(z, 6, 6, 6, 1e-5, terms=terms).epsilon
            assert rec["epsilon_library_rdp"] == pytest.approx(lib) and lib < eps  # Thm 5 is conservative
    assert out.accountant and "dp-accounting" in out.accountant["version"] and out.accountant["delta"] == 1e-5
    assert set(out.history["epsilon"].dropna()) == {2.0, 20.0}


def test_server_side_dp_fedavg_is_calibrated_by_the_library(partition_dir):
    from fedrepro.privacy import calibrate_noise_multiplier, compute_epsilon

    p = params(
        privacy={"epsilons": [5.0], "delta": 1e-5, "clip": 0.5, "noise_from": "thm5"},
        checks={},
        methods={"dp_fedavg_server": {"algorithm": "dp_fedavg_server", "lr": 0.2, "private": True}},
    )
    rec = run(p, partition_dir).metrics["noise"]["dp_fedavg_server"]["eps_5p00"]
    z = calibrate_noise_multiplier(5.0, 1e-5, 6, 1.0, "rdp").noise_multiplier
    assert rec["z"] == pytest.approx(z) and rec["noise_from"] == "rdp"  # Thm 5 does not describe this mechanism
    assert rec["epsilon_library_rdp"] == pytest.approx(compute_epsilon(z, 1.0, 6, 1e-5, "rdp").epsilon)


@pytest.mark.parametrize(
    "over, match",
    [
        ({"methods": {"x": {"algorithm": "fedavg", "lr": 0.1, "private": True}}}, "needs params.privacy"),
        (
            {
                "methods": {"x": {"algorithm": "pfedme", "lr": 0.1, "private": True}},
                "privacy": {"epsilons": [1.0], "delta": 1e-5, "clip": 1.0},
            },
            "no accountant for algorithm 'pfedme'",
        ),
        ({"checks": {"curve": ["nope"]}}, r"params.checks.curve: unknown methods \['nope'\]"),
        ({"batch_size": "auto", "iters_per_epoch": None}, "batch_size=auto needs params.iters_per_epoch"),
        ({"only_methods": ["fedavg", "nope"]}, r"params.only_methods: unknown methods \['nope'\]"),
        (
            {"methods": {"x": {"algorithm": "pfedme", "lr": 0.1, "options": {"deployed": "w"}}}, "checks": {}},
            r"methods.\*.options for pfedme: deployed must be one of 'theta', 'local', got 'w'",
        ),
    ],
)
def test_config_errors_name_the_key(partition_dir, over, match):
    p = params(**over)
    if p.get("iters_per_epoch") is None:
        p.pop("iters_per_epoch")
    with pytest.raises(ConfigError, match=match):
        run(p, partition_dir)


def test_only_methods_trains_those_methods_alone_as_in_the_full_run(partition_dir):
    """``only_methods``: the named methods train exactly as in the full run (one seed per run, shared by every
    method), the others are absent, and a check naming one of them is left out."""
    full = run(params(), partition_dir)
    part = run(params(only_methods=["adaped"]), partition_dir)
    assert set(part.metrics["acc"]) == {"adaped"} and set(part.history["method"]) == {"adaped"}
    for metric in ("acc", "acc_weighted", "lr", "final_train_loss", "psi"):
        assert part.metrics[metric]["adaped"] == full.metrics[metric]["adaped"]
    assert set(full.checks) == {"beats_chance", "curve"} and set(part.checks) == {"curve"}  # beats_chance names fedavg


def test_schema_rejects_unknown_algorithm_and_check(partition_dir):
    with pytest.raises(ConfigError, match="algorithm"):
        run(params(methods={"x": {"algorithm": "fedprox", "lr": 0.1}}), partition_dir)
    with pytest.raises(ConfigError, match="checks"):
        run(params(checks={"is_great": ["fedavg"]}), partition_dir)


def test_engine_loop_is_the_reference_order(partition_dir, monkeypatch):
    """params.engine: loop runs the per-client reference loop (vectorize=False): the same numbers up to float32
    rounding on a short run; batched is the default; another value is refused naming the key."""
    from fedrepro.learning import engine

    seen = []
    real = engine.train
    monkeypatch.setattr(engine, "train", lambda *a, **kw: seen.append(kw["vectorize"]) or real(*a, **kw))
    batched, loop = run(params(), partition_dir).metrics, run(params(engine="loop"), partition_dir).metrics
    assert seen and not any(seen[len(seen) // 2 :]) and all(seen[: len(seen) // 2])
    for method, acc in batched["acc"].items():
        assert loop["acc"][method] == pytest.approx(acc, abs=1e-3)
    with pytest.raises(ConfigError, match="engine"):
        run(params(engine="gpu"), partition_dir)


def test_psi_and_curve_checks_can_fail():
    from fedrepro.papers.adaped.experiments.fl_training import _check

    def hist(psi, acc):
        return [{"psi": p, "test_acc": a} for p, a in zip(psi, acc)]

    acc = [0.5, 0.7, 0.8]
    down, valley, up = (3.0, 2.5, 2.0), (3.0, 2.0, 2.6), (3.6, 3.8, 4.0)
    cases = {
        "psi_decreases": {down: True, valley: True, up: False},
        "psi_decreases_then_increases": {down: False, valley: True, up: False},
    }
    for name, expect in cases.items():
        for path, ok in expect.items():
            assert _check(name, "a", {None: (hist(path, acc), 3.5, 0.0)}, 10)[0] is ok, (name, path)
    # every epsilon must show the valley
    runs = {"e1": (hist(valley, acc), 3.5, 1.0), "e2": (hist(down, acc), 3.5, 2.0)}
    assert not _check("psi_decreases_then_increases", "a", runs, 10)[0]
    assert _check("curve", "a", {None: (hist(down, [0.5, 0.9, 0.89]), 3.5, 0.0)}, 10)[0]
    assert not _check("curve", "a", {None: (hist(down, [0.5, 0.9, 0.6]), 3.5, 0.0)}, 10)[0]  # collapsed
    worse_at_large_eps = {"e1": (hist(down, [0.5, 0.8, 0.9]), 3.5, 1.0), "e9": (hist(down, [0.5, 0.7, 0.8]), 3.5, 9.0)}
    assert not _check("curve", "a", worse_at_large_eps, 10)[0]
    assert not _check("beats_chance", "a", {None: (hist(down, [0.1, 0.12, 0.14]), 3.5, 0.0)}, 10)[0]


@pytest.mark.parametrize("rule", ["final_test", "final_train_loss"])
def test_a_diverged_lr_is_never_picked(rule):
    """max/min keep the first element when every comparison with NaN is False: the grid's first lr, the largest and
    the likeliest to diverge, would be picked. A non-finite value ranks last."""
    from fedrepro.papers.adaped.experiments.fl_training import _pick

    nan = float("nan")
    runs = [(0.3, [{"test_acc": nan, "train_loss": nan}]), (0.1, [{"test_acc": 0.5, "train_loss": 1.0}])]
    assert _pick(runs, rule)[0] == 0.1
    assert _pick(runs[::-1], rule)[0] == 0.1


def test_with_threads_to_spare_the_trainings_run_in_processes_of_their_own_alike(
    partition_dir, tmp_path, monkeypatch, capsys
):
    """FEDREPRO_THREADS=2 and params.threads unset: the run's trainings (a method at an epsilon and an lr of its
    grid, each) run in two spawned processes (none in this one) with the results of one process training them in
    turn, the history in the same order; a second run resumes each training from the checkpoints the workers wrote."""
    import numpy as np
    from kinds import call_kind

    import fedrepro.papers.adaped.experiments.fl_training as fl
    from fedrepro.experiments import RunContext
    from fedrepro.runio import RunClock

    p = params(
        privacy={"epsilons": [2.0, 20.0], "delta": 1e-5, "clip": 0.5},
        methods={
            "fedavg": {"algorithm": "fedavg", "lr": [0.05, 0.2]},
            "dp_adaped": {"algorithm": "adaped", "lr": 0.2, "private": True},
        },
        checks={"curve": ["dp_adaped"]},
        checkpoint_every=3,
    )
    serial = run(p, partition_dir)

    def not_here(*args, **kwargs):
        raise AssertionError("a training ran in the run's own process")

    monkeypatch.setattr(fl, "_train", not_here)  # the spawned workers import their own
    monkeypatch.setenv("FEDREPRO_THREADS", "2")

    def parallel(clock):
        ctx = RunContext("adaped.test", 0, partitions={"p": partition_dir}, checkpoint_dir=tmp_path, clock=clock)
        return call_kind("adaped_fl_training", {**p, "threads": None}, np.random.default_rng(0), ctx)

    first = parallel(RunClock())
    assert "4 trainings in 2 processes" in capsys.readouterr().out
    assert first.metrics == serial.metrics and first.history.equals(serial.history)
    assert first.checks == serial.checks
    again = RunClock()
    parallel(again)
    assert again.resumed and again.before_s > 0


def test_a_method_from_outside_trains_here(partition_dir, monkeypatch):
    """A method whose algorithm is not one of the kind's (registered by compare in this process only) keeps every
    training of the run in this process, threads to spare or not; so does params.threads set."""
    import torch

    import fedrepro.papers.adaped.experiments.fl_training as fl
    from fedrepro.experiments import RunContext

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    monkeypatch.setattr("fedrepro.processes.map_in_processes", lambda fn, tasks, workers: ["spawned"] * len(tasks))
    ours = [fl._Training("fedavg", {}, lr, f"fedavg lr={lr}") for lr in (0.1, 0.2)]
    theirs = [*ours, fl._Training("mine", {}, 0.1, "mine lr=0.1")]
    ctx, cpu = RunContext("adaped.test", 0), torch.device("cpu")
    assert fl._in_processes({"threads": None}, ctx, 0, cpu, ours) == ["spawned", "spawned"]
    assert fl._in_processes({"threads": None}, ctx, 0, cpu, theirs) is None
    assert fl._in_processes({"threads": 2}, ctx, 0, cpu, ours) is None
