"""The fedhdp_training experiment kind (FedHDP Tables 3, 4, 8-11): metric keys and definitions (Acc_g pooled,
group means, variance unit, Delta = np - p), privacy from the library accountant at z_eff with the update noise of
Andrew et al.'s relation, the opt-out set, config errors, and the config entries of the naming contract."""

from __future__ import annotations

import numpy as np
import pytest

from fedrepro.data import fedformat
from fedrepro.data.partition import Partition
from fedrepro.errors import ConfigError
from fedrepro.papers.fedhdp.columns import client_metrics, lam_key
from fedrepro.papers.fedhdp.experiments.training import opt_out_mask

pytestmark = pytest.mark.usefixtures("one_thread")

M = 10
OPT = np.zeros(M, bool)
OPT[[2, 7]] = True


def _images(rng, labels):
    x = rng.integers(0, 40, (len(labels), 8, 8)).astype(np.uint8)
    for c in range(4):
        r, q = divmod(c, 2)
        x[labels == c, 4 * r : 4 * r + 4, 4 * q : 4 * q + 4] += 200
    return x


def _write(path, meta):
    rng = np.random.default_rng(0)
    classes = [rng.choice(4, 2, replace=False) for _ in range(M)]
    ytr = np.concatenate([rng.choice(c, 30) for c in classes])
    yte = np.concatenate([rng.choice(c, 10 + i) for i, c in enumerate(classes)])  # unequal test sizes
    part = Partition(
        "test", {"seed": 0}, M, np.repeat(np.arange(M), 30), np.repeat(np.arange(M), [10 + i for i in range(M)]), meta
    )
    return fedformat.write(path, part, _images(rng, ytr), ytr, _images(rng, yte), yte)


@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("fh") / "p", {"opt_out": OPT})


@pytest.fixture(scope="module")
def pdir_plain(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("fh") / "q", {})


def params(**over):
    p = {
        "partition": "p",
        "model": {"name": "mlp", "in_features": 64, "hidden": [16]},
        "methods": {
            "nonprivate_ditto": {"algorithm": "nonprivate"},
            "dp_fedavg_ditto": {"algorithm": "dp_fedavg"},
            "hdp_fedavg_ditto": {"algorithm": "hdp_fedavg"},
            "fedhdp_r_0_1": {"algorithm": "fedhdp", "r": 0.1},
        },
        "lams": [0.005, 0.25],
        "rounds": 4,
        "local_epochs": 1,
        "batch_size": 10,
        "lr": 0.2,
        "sampling_rate": 0.6,
        "clip": {"init": 1.0},
        "privacy": {"noise_multiplier_eff": 0.5, "count_std": 1.0, "delta": 1e-4},
        "threads": 1,
        "checks": {"beats_chance": ["nonprivate_ditto"], "np_ge_p_global": ["fedhdp_r_0_1"]},
    }
    p.update(over)
    return p


def run(p, path, seed=0):
    from learning_helpers import run_kind

    return run_kind("fedhdp_training", p, "fedhdp.test", {"p": path}, seed)


FULL = {
    "acc_g",
    "acc_g_p",
    "acc_g_np",
    "acc_l_p",
    "acc_l_np",
    "d_g",
    "d_l",
    "acc_g_p_var",
    "acc_g_np_var",
    "acc_l_p_var",
    "acc_l_np_var",
}


def test_metric_keys_and_privacy(pdir):
    from fedrepro.learning.adaptive_clip import update_noise_multiplier
    from fedrepro.privacy import compute_epsilon

    checks = {
        "beats_chance": ["nonprivate_ditto"],
        "np_ge_p_global": ["fedhdp_r_0_1"],
        "acc_g_ge_dp_fedavg": ["fedhdp_r_0_1", "dp_fedavg_ditto"],
    }
    out = run(params(checks=checks), pdir)
    m = out.metrics
    assert lam_key(0.005) == "lam0.005" and lam_key(0.25) == "lam0.25" and lam_key(1.0) == "lam1"
    for lam in ("lam0.005", "lam0.25"):
        assert set(m[lam]["fedhdp_r_0_1"]) == set(m[lam]["hdp_fedavg_ditto"]) == FULL
        assert set(m[lam]["nonprivate_ditto"]) == {"acc_g", "acc_g_np", "acc_g_np_var", "acc_l_np", "acc_l_np_var"}
        assert set(m[lam]["dp_fedavg_ditto"]) == {"acc_g", "acc_g_p", "acc_g_p_var", "acc_l_p", "acc_l_p_var"}
        f = m[lam]["fedhdp_r_0_1"]
        assert f["d_g"] == pytest.approx(f["acc_g_np"] - f["acc_g_p"]) and f["d_l"] == f["acc_l_np"] - f["acc_l_p"]
    # lambda does not touch the global model: global metrics repeat across lambda blocks, personal ones differ
    a, b = m["lam0.005"]["fedhdp_r_0_1"], m["lam0.25"]["fedhdp_r_0_1"]
    assert a["acc_g"] == b["acc_g"] and a["acc_g_p"] == b["acc_g_p"]
    assert (a["acc_l_p"], a["acc_l_p_var"]) != (b["acc_l_p"], b["acc_l_p_var"])
    K = round(0.6 * M)
    assert m["clients_per_round"] == K and m["n_opt_out"] == 2 and m["local_steps"] == 3  # ceil(30 / 10)
    pr = m["privacy"]
    assert pr["noise_multiplier_update"] == pytest.approx(update_noise_multiplier(0.5, 1.0))
    assert pr["epsilon"] == pytest.approx(compute_epsilon(0.5, K / M, 4, 1e-4, "rdp").epsilon, rel=1e-12)
    assert out.accountant and "dp-accounting" in out.accountant["version"]
    assert out.checks["beats_chance"].passed  # 2 of 4 classes per client: chance 25 %
    assert set(out.checks) == set(checks)
    f, b = m["lam0.005"]["fedhdp_r_0_1"], m["lam0.005"]["dp_fedavg_ditto"]
    assert out.checks["np_ge_p_global"].passed == (f["acc_g_np"] >= f["acc_g_p"])
    assert out.checks["acc_g_ge_dp_fedavg"].passed == (f["acc_g"] >= b["acc_g"])
    assert "dp_fedavg_ditto: Acc_g" in out.checks["acc_g_ge_dp_fedavg"].detail
    assert set(out.history["method"]) == set(params()["methods"])


def test_client_metrics_definitions():
    """Acc_g is the pooled (sample-weighted) accuracy; group accuracies are unweighted means over clients; the
    variance is 100 x Var(accuracy in [0, 1]) (population variance); clients without test data are left out."""
    acc_g = np.array([1.0, 0.5, 0.0, 0.25, np.nan])
    acc_l = np.array([1.0, 1.0, 0.5, 0.75, np.nan])
    counts = np.array([10, 30, 20, 40, 0.0])
    private = np.array([True, True, False, False, True])
    (m,) = client_metrics(acc_g, [acc_l], counts, private, ("p", "np"))
    assert m["acc_g"] == pytest.approx(100 * (10 + 15 + 0 + 10) / 100)
    assert m["acc_g_p"] == pytest.approx(75.0) and m["acc_g_np"] == pytest.approx(12.5)
    assert m["acc_g_p_var"] == pytest.approx(100 * 0.0625) and m["acc_g_np_var"] == pytest.approx(100 * 0.015625)
    assert m["acc_l_p"] == pytest.approx(100.0) and m["acc_l_p_var"] == 0.0
    assert m["d_g"] == pytest.approx(12.5 - 75.0) and m["d_l"] == pytest.approx(62.5 - 100.0)
    # the notes' unit check (§7.19): skewed r = 0, 7.1 % of private clients at 100 %, the rest at 0 -> variance 6.6
    acc = (np.arange(1000) < 71).astype(float)
    (s,) = client_metrics(acc, [acc], np.ones(1000), np.ones(1000, bool), ("p",))
    assert s["acc_g_p"] == pytest.approx(7.1) and s["acc_g_p_var"] == pytest.approx(100 * 0.071 * 0.929)


def test_opt_out_from_partition_or_drawn_once(pdir, pdir_plain):
    flags, src = opt_out_mask(fedformat.load(pdir), 0.05, 0)
    assert (flags == OPT).all() and "partition" in src
    drawn, _ = opt_out_mask(fedformat.load(pdir_plain), 0.2, 3)
    assert drawn.sum() == 2 and (opt_out_mask(fedformat.load(pdir_plain), 0.2, 3)[0] == drawn).all()
    p = params(opt_out={"fraction": 0.2, "seed": 3}, rounds=2, lams=[0.25])
    out = run(p, pdir_plain, seed=1)
    assert out.metrics["n_opt_out"] == 2 and np.isfinite(out.metrics["lam0.25"]["fedhdp_r_0_1"]["acc_g_np"])


@pytest.mark.parametrize(
    "over,match",
    [
        ({"methods": {"f": {"algorithm": "fedhdp"}}}, "needs r"),
        ({"methods": {"h": {"algorithm": "hdp_fedavg", "r": 0.5}}}, "only fedhdp"),
        ({"methods": {"f": {"algorithm": "fedhdp", "r": 0.1, "r0_population": "nonprivate"}}}, "r0_population"),
        ({"privacy": {"noise_multiplier_eff": 3.0, "count_std": 1.0, "delta": 1e-4}}, "params.privacy"),
        ({"checks": {"beats_chance": ["nope"]}}, "unknown methods"),
        ({"partition": "other"}, "must be listed"),
    ],
)
def test_config_errors(pdir, over, match):
    with pytest.raises(ConfigError, match=match):
        run(params(**over), pdir)


def test_config_entries_follow_the_naming_contract():
    """The four paper experiments and the offline extra resolve at both scales, on the partitions they list."""
    import yaml

    from fedrepro.config import REPO_ROOT, load_global, load_paper, resolve_experiment

    cfg = load_global()
    parts = yaml.safe_load((REPO_ROOT / "config" / "partitions.yaml").read_text())["partitions"]
    doc = load_paper(cfg, "fedhdp")
    expected = {
        "noniid_mnist": "mnist",
        "skewed_mnist": "mnist",
        "fmnist": ("tff_emnist_sqlite", True),
        "femnist": ("tff_emnist_sqlite", False),
        "x_femnist_sample": "leaf_femnist_sf005",
    }
    for name, dataset in expected.items():
        entry = doc["experiments"][name]
        assert entry["kind"] == "fedhdp_training"
        for scale in ("quick", "paper"):
            exp = resolve_experiment(cfg, f"fedhdp.{name}", scale)
            assert exp.params["partition"] in entry["partitions"]
            part = parts[exp.params["partition"]]
            if isinstance(dataset, tuple):  # TFF's emnist_all.sqlite: one file, only_digits picks the label set
                assert (part["dataset"], part["params"]["only_digits"]) == dataset
            else:
                assert part["dataset"] == dataset
            methods = exp.params["methods"]
            assert {"nonprivate_ditto", "dp_fedavg_ditto", "hdp_fedavg_ditto"} <= set(methods)
            assert all(
                spec["algorithm"] == "fedhdp" and k == "fedhdp_r_" + f"{spec['r']:g}".replace(".", "_")
                for k, spec in methods.items()
                if k.startswith("fedhdp")
            )


def test_differences_and_settings(pdir):
    diffs = {
        "table4.fedhdp_r_0_1.d_l": ["lam0.005.fedhdp_r_0_1.acc_l_np", "lam0.25.fedhdp_r_0_1.acc_l_p"],
        "derived.gain": ["lam0.25.fedhdp_r_0_1.acc_g", "lam0.25.dp_fedavg_ditto.acc_g"],
    }
    m = run(params(differences=diffs, rounds=2), pdir).metrics
    assert m["table4"]["fedhdp_r_0_1"]["d_l"] == pytest.approx(
        m["lam0.005"]["fedhdp_r_0_1"]["acc_l_np"] - m["lam0.25"]["fedhdp_r_0_1"]["acc_l_p"]
    )
    assert m["derived"]["gain"] == pytest.approx(
        m["lam0.25"]["fedhdp_r_0_1"]["acc_g"] - m["lam0.25"]["dp_fedavg_ditto"]["acc_g"]
    )
    s = m["setting"]
    assert s["n_clients"] == M and s["clients_per_round_pct"] == pytest.approx(60.0)
    assert s["nonprivate_pct"] == pytest.approx(20.0) and s["n_labels"] == 4 and s["rounds"] == 2
    assert s["model"] == {"layer1": 64, "layer2": 64, "layer3": 16, "layer4": 4}  # 8x8 images
    assert s["clip_init"] == 1.0 and s["clip_lr"] == 0.2 and s["target_unclipped_quantile"] == 0.5
    with pytest.raises(ConfigError, match="differences"):
        run(params(differences={"x": ["lam0.3.fedhdp_r_0_1.acc_g", "lam0.25.fedhdp_r_0_1.acc_g"]}, rounds=1), pdir)


def test_table6_layer_sizes():
    from fedrepro.learning.models import build_model
    from fedrepro.papers.fedhdp.experiments.training import layer_sizes

    assert layer_sizes(build_model("mlp", in_features=784, n_classes=10, hidden=[50])) == {
        "layer1": 784,
        "layer2": 784,
        "layer3": 50,
        "layer4": 10,
    }
    assert layer_sizes(build_model("fedhdp_cnn", n_classes=62)) == {  # Table 6: 28x28x16, 14x14x16, ... 62
        "layer1": 784,
        "layer2": 28 * 28 * 16,
        "layer3": 14 * 14 * 16,
        "layer4": 14 * 14 * 32,
        "layer5": 7 * 7 * 32,
        "layer6": 1568,
        "layer7": 1568,
        "layer8": 128,
        "layer9": 128,
        "layer10": 62,
    }


def test_only_methods_trains_those_methods_alone(pdir):
    """``only_methods``: the named methods train exactly as in the full run (the same data order and noise: each
    method's training is seeded the same), the others are absent with their checks and differences; an unknown
    name is refused."""
    checks = {"beats_chance": ["nonprivate_ditto"], "acc_g_ge_dp_fedavg": ["fedhdp_r_0_1"]}
    differences = {"derived.gap": ["lam0.005.fedhdp_r_0_1.acc_g", "lam0.005.dp_fedavg_ditto.acc_g"]}
    full = run(params(checks=checks, differences=differences), pdir).metrics
    part = run(params(checks=checks, differences=differences, only_methods=["fedhdp_r_0_1"]), pdir)
    assert set(part.metrics["lam0.005"]) == {"fedhdp_r_0_1"}
    assert part.metrics["lam0.005"]["fedhdp_r_0_1"] == full["lam0.005"]["fedhdp_r_0_1"]
    assert "derived" in full and "derived" not in part.metrics and not part.checks
    with pytest.raises(ConfigError, match="only_methods: unknown methods"):
        run(params(only_methods=["fedhdp_r_9"]), pdir)


def test_with_threads_to_spare_the_methods_train_in_processes_of_their_own_alike(pdir, tmp_path, monkeypatch, capsys):
    """FEDREPRO_THREADS=2 and params.threads unset: the methods train in two spawned processes (none in this one)
    with the results of one process training them in turn, in ``methods``' order; the run's clock resumes from the
    compute their checkpoints carry, as it does in one process."""
    from kinds import call_kind

    import fedrepro.papers.fedhdp.experiments.training as training
    from fedrepro.experiments import RunContext
    from fedrepro.runio import RunClock

    serial = run(params(), pdir)

    def not_here(*args, **kwargs):
        raise AssertionError("a method was trained in the run's own process")

    monkeypatch.setattr(training, "train_method", not_here)  # the spawned workers import their own
    monkeypatch.setenv("FEDREPRO_THREADS", "2")

    def parallel(clock):
        ctx = RunContext("fedhdp.test", 0, partitions={"p": pdir}, checkpoint_dir=tmp_path, clock=clock)
        return call_kind("fedhdp_training", params(threads=None), np.random.default_rng(0), ctx)

    first = parallel(RunClock())
    assert "4 methods in 2 processes" in capsys.readouterr().out
    assert first.metrics == serial.metrics and first.history.equals(serial.history)
    assert all(np.array_equal(first.arrays[k], serial.arrays[k]) for k in serial.arrays)
    again = RunClock()
    parallel(again)  # every method resumes from its last round's checkpoint, written by the workers
    assert again.resumed and again.before_s > 0


def test_the_processes_take_fedhdp_at_r_0_last(pdir, tmp_path, monkeypatch):
    """FedHDP at r = 0 (clients drawn from all) personalizes only its opt-out clients, about half a method's time:
    the workers take it last, whatever its place in ``methods``, so that no long method starts alone at the end."""
    from kinds import call_kind

    import fedrepro.processes
    from fedrepro.experiments import RunContext

    order = []

    class Taken(Exception):
        pass

    def taken(fn, tasks, workers, labels=None):
        order.extend(t[-1] for t in tasks)
        raise Taken  # the order is all this test needs

    monkeypatch.setattr(fedrepro.processes, "map_in_processes", taken)
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    methods = {"fedhdp_r_0": {"algorithm": "fedhdp", "r": 0.0}, **params()["methods"]}
    ctx = RunContext("fedhdp.test", 0, partitions={"p": pdir}, checkpoint_dir=tmp_path)
    with pytest.raises(Taken):
        call_kind("fedhdp_training", params(threads=None, methods=methods), np.random.default_rng(0), ctx)
    assert order == ["nonprivate_ditto", "dp_fedavg_ditto", "hdp_fedavg_ditto", "fedhdp_r_0_1", "fedhdp_r_0"]


def test_a_replay_of_the_first_rounds_trains_its_methods_here(monkeypatch):
    """The replay's round limit is this process's: with threads to spare, a replay still trains every method here."""
    import torch

    import fedrepro.papers.fedhdp.experiments.training as training
    from fedrepro.experiments import RunContext
    from fedrepro.learning.engine import replay_rounds

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    p, ctx = params(threads=None), RunContext("fedhdp.test", 0)

    def spawned(fn, tasks, workers):  # each task: {its method: what it trained}
        return [{t[3]: "spawned"} for t in tasks]

    monkeypatch.setattr("fedrepro.processes.map_in_processes", spawned)
    names = ["nonprivate_ditto", "fedhdp_r_0_1"]
    assert training._in_processes(p, ctx, 0, torch.device("cpu"), names) == dict.fromkeys(names, "spawned")
    with replay_rounds(2):
        assert training._in_processes(p, ctx, 0, torch.device("cpu"), names) is None


def test_the_personal_models_test_set_readings_are_kept_unless_switched_off(pdir, monkeypatch):
    import fedrepro.papers.fedhdp.experiments.training as training

    monkeypatch.setattr(training, "local_accuracies", lambda net, personal, ds, data, name: {f"local_acc.x.{name}": 1})
    p = params(methods={"fedhdp_r_0_1": {"algorithm": "fedhdp", "r": 0.1}}, checks={}, rounds=1)
    assert run(p, pdir).arrays["local_acc.x.fedhdp_r_0_1"] == 1
    assert "local_acc.x.fedhdp_r_0_1" not in run({**p, "local_readings": False}, pdir).arrays


def _trainings(monkeypatch) -> list[str]:
    """The names of the algorithms the engine trains from here on, in order."""
    from fedrepro.learning import engine

    names, train = [], engine.train
    monkeypatch.setattr(engine, "train", lambda algo, *a, **kw: names.append(algo.name) or train(algo, *a, **kw))
    return names


CLIPPED = {
    "dp_fedavg_ditto": {"algorithm": "dp_fedavg"},
    "hdp_fedavg_ditto": {"algorithm": "hdp_fedavg", "clip_nonprivate": True},
}


def test_dp_fedavg_is_read_off_hdp_fedavgs_training_where_every_update_is_clipped(pdir, monkeypatch):
    """HDP-FedAvg with every update clipped trains DP-FedAvg's model (exact arithmetic): the run trains it once and
    reads DP-FedAvg's columns off it. They equal DP-FedAvg trained alone, by its own class, to float32 summation
    order; its group columns stay its own (every client private). Unclipped, HDP-FedAvg is another training."""
    names = _trainings(monkeypatch)
    both = run(params(methods=CLIPPED, checks={}), pdir)
    assert names == ["hdp_fedavg"]
    alone = run(params(methods=CLIPPED, checks={}, only_methods=["dp_fedavg_ditto"]), pdir)
    assert names == ["hdp_fedavg", "dp_fedavg_adaptive"]
    for lam in ("lam0.005", "lam0.25"):
        shared, own = both.metrics[lam]["dp_fedavg_ditto"], alone.metrics[lam]["dp_fedavg_ditto"]
        assert set(shared) == set(own) == {"acc_g", "acc_g_p", "acc_g_p_var", "acc_l_p", "acc_l_p_var"}
        assert shared == pytest.approx(own, rel=1e-6)
        assert set(both.metrics[lam]["hdp_fedavg_ditto"]) == FULL
    clip = both.metrics["final_clip"]
    assert (
        clip["dp_fedavg_ditto"]
        == clip["hdp_fedavg_ditto"]
        == pytest.approx(alone.metrics["final_clip"]["dp_fedavg_ditto"])
    )
    h = both.history
    dp, hdp = h[h["method"] == "dp_fedavg_ditto"], h[h["method"] == "hdp_fedavg_ditto"]
    assert len(dp) and dp.drop(columns="method").reset_index(drop=True).equals(
        hdp.drop(columns="method").reset_index(drop=True)
    )
    for k in ("hidden.0.weight", "out.bias"):
        assert np.array_equal(both.arrays[f"dp_fedavg_ditto.{k}"], both.arrays[f"hdp_fedavg_ditto.{k}"])
        assert np.allclose(both.arrays[f"dp_fedavg_ditto.{k}"], alone.arrays[f"dp_fedavg_ditto.{k}"], atol=1e-6)
    names.clear()
    unclipped = {**CLIPPED, "hdp_fedavg_ditto": {"algorithm": "hdp_fedavg"}}
    run(params(methods=unclipped, checks={}, local_readings=False), pdir)
    assert names == ["dp_fedavg_adaptive", "hdp_fedavg"]


def test_dp_fedavg_trains_itself_where_a_round_of_hdp_fedavg_had_no_private_client(tmp_path, monkeypatch, capsys):
    """8 of 10 clients opt out and 2 train a round: some rounds sample no private client, where HDP-FedAvg draws no
    noise and DP-FedAvg does. Its columns are then not HDP-FedAvg's: the run trains DP-FedAvg itself, exactly as
    alone (read off HDP-FedAvg's training they would differ: its final clip is another)."""
    opt = np.ones(M, bool)
    opt[[0, 5]] = False
    path = _write(tmp_path / "p", {"opt_out": opt})
    names = _trainings(monkeypatch)
    p = params(methods=CLIPPED, checks={}, sampling_rate=0.2, rounds=6, local_readings=False)
    both = run(p, path)
    assert names == ["hdp_fedavg", "dp_fedavg_adaptive"]
    assert "dp_fedavg_ditto trained itself: " in capsys.readouterr().out
    alone = run({**p, "only_methods": ["dp_fedavg_ditto"]}, path)
    assert both.metrics["lam0.005"]["dp_fedavg_ditto"] == alone.metrics["lam0.005"]["dp_fedavg_ditto"]
    clip = both.metrics["final_clip"]
    assert clip["dp_fedavg_ditto"] == alone.metrics["final_clip"]["dp_fedavg_ditto"] != clip["hdp_fedavg_ditto"]
