"""`compare`: a user's Algorithm from a file of its own under a training experiment's protocol, as one more row beside
the paper's methods over paired seeds; a broken file is one line naming the file and line; a method that produces
NaN fails its row, not the run; experiments that cannot run a method are refused with the reason."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from fedrepro.cli import main
from fedrepro.compare.method_file import load_method
from fedrepro.compare.paired import Difference, holm, paired_difference
from fedrepro.compare.protocol import compare
from fedrepro.compare.table import write_comparison, write_record
from fedrepro.config import Experiment, resolve_params
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext, get_kind
from fedrepro.experiments.method_slot import YOURS
from fedrepro.seeding import rng_for

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
FEDPROX = REPO / "examples" / "fedprox.py"


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory):
    from learning_helpers import write_quadrant_partition

    return write_quadrant_partition(tmp_path_factory.mktemp("cmp") / "p")


def experiment(**over) -> Experiment:
    params = {
        "partition": "p",
        "model": {"name": "mlp", "in_features": 64, "hidden": [16]},
        "epochs": 2,
        "iters_per_epoch": 4,
        "batch_size": "auto",
        "tau": 2,
        "eval_every": 2,
        "threads": 1,
        "methods": {
            "fedavg": {"algorithm": "fedavg", "lr": [0.05, 0.2]},
            "local": {"algorithm": "local", "lr": 0.2},
        },
        "checks": {"beats_chance": ["fedavg"]},
    }
    params = resolve_params({**params, **over}, get_kind("adaped_fl_training").schema)  # as a run resolves them
    return Experiment("adaped", "cmp_test", "adaped_fl_training", "a test protocol", params, params, "quick", ())


def context(partition_dir):
    return lambda seed: RunContext("adaped.cmp_test", seed, partitions={"p": partition_dir})


def method_file(tmp_path, body: str, name: str = "method.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_fedprox_with_mu_zero_is_fedavg_in_every_seed(tmp_path, partition_dir):
    """Same protocol, same seed: FedProx at mu = 0 trains exactly FedAvg's model (same init, data order, lr grid and
    selection), so its cells equal FedAvg's seed by seed and every paired difference to FedAvg is 0."""
    path = method_file(
        tmp_path,
        f"""
        import importlib.util
        import sys

        spec = importlib.util.spec_from_file_location("fedprox_example", {str(FEDPROX)!r})
        mod = sys.modules["fedprox_example"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)

        class ProxZero(mod.FedProx):
            name = "prox_zero"

            def __init__(self, weight_decay=1e-4, dp=None):
                super().__init__(mu=0.0, weight_decay=weight_decay, dp=dp)
        """,
    )
    cls = load_method(f"{path}:ProxZero")
    exp = experiment()
    comp = compare(exp, cls, path, [0, 1], context(partition_dir))
    rows = {r.name: r for r in comp.rows}
    assert list(rows) == ["fedavg", "local", "prox_zero"] and rows["prox_zero"].origin == YOURS
    for mine, theirs in zip(rows["prox_zero"].cells, rows["fedavg"].cells):
        assert mine["acc"] == pytest.approx(theirs["acc"], abs=1e-9)
    # the paper's rows are the kind's own run of each seed
    for i, seed in enumerate([0, 1]):
        plain = get_kind("adaped_fl_training").fn(exp.params, rng_for(exp.id, seed), context(partition_dir)(seed))
        assert rows["local"].cells[i]["acc"] == plain.metrics["acc"]["local"]
    written = write_comparison(comp, tmp_path / "out", figure=True)
    assert [p.name for p in written] == ["table.md", "table.csv", "differences.csv", "figure.png"]
    diffs = pd.read_csv(tmp_path / "out" / "differences.csv")
    to_fedavg = diffs[diffs["baseline"] == "fedavg"].iloc[0]
    assert to_fedavg["diff"] == pytest.approx(0.0, abs=1e-9) and to_fedavg["n"] == 2 and not to_fedavg["resolved"]


def test_fedprox_row_in_the_table_with_numbers(tmp_path, partition_dir):
    comp = compare(experiment(), load_method(f"{FEDPROX}:FedProx"), FEDPROX, [0, 1], context(partition_dir))
    write_comparison(comp, tmp_path, figure=False)
    md = (tmp_path / "table.md").read_text()
    fedprox = next(line for line in md.splitlines() if line.startswith("| fedprox |"))
    assert "never judged" in fedprox and "(n=2)" in fedprox
    table = pd.read_csv(tmp_path / "table.csv")
    assert set(table["method"]) == {"fedavg", "local", "fedprox"}
    assert table["mean"].notna().all() and (table["n"] == 2).all()
    assert not (tmp_path / "figure.png").exists()


def private_experiment(**over) -> Experiment:
    return experiment(
        privacy={"epsilons": [2.0, 20.0], "delta": 1e-5, "clip": 0.5},
        methods={"dp_fedavg": {"algorithm": "fedavg", "lr": 0.2, "private": True}},
        checks={},
        **over,
    )


def test_private_protocol_releases_every_local_step_for_the_method(tmp_path, partition_dir):
    """Privacy by construction under AdaPeD's DP protocol: the method is built without dp= (one that takes none is
    accepted), each local step's minibatches reach it as a Released whose gradients the protocol clips and noises
    with DP-FedAvg's calibrated mechanism and generator, so a FedAvg subclass is DP-FedAvg exactly, per epsilon."""
    path = method_file(
        tmp_path,
        """
        from fedrepro.learning.fedavg import FedAvg

        SEEN = []

        class Spy(FedAvg):
            name = "spy"

            def __init__(self, weight_decay=1e-4, **kw):
                SEEN.append(sorted(kw))
                super().__init__(weight_decay)

            def local_step(self, state, x, y, selected, lr):
                SEEN.append((type(x).__name__, y))
                return super().local_step(state, x, y, selected, lr)
        """,
    )
    cls = load_method(f"{path}:Spy")
    comp = compare(private_experiment(), cls, path, [0], context(partition_dir))
    seen = sys.modules[cls.__module__].SEEN
    assert [s for s in seen if isinstance(s, list)] == [[], []]  # one build per epsilon, never handed dp=
    assert {s for s in seen if isinstance(s, tuple)} == {("Released", None)}
    spy, dp_fedavg = comp.rows[-1].cells[0], comp.rows[0].cells[0]
    assert set(spy) == set(dp_fedavg) == {"acc eps_2p00", "acc eps_20p00"}
    assert spy == pytest.approx(dp_fedavg, abs=1e-9)  # the protocol's release is DP-FedAvg's own noise
    assert comp.privacy_note.startswith("privacy by construction")


def test_a_method_that_reads_the_data_or_releases_twice_fails_its_row(tmp_path, partition_dir, capsys):
    """What the protocol does not release cannot be had: reading the minibatch itself fails the method's row, and so
    does a second gradient in one step (privacy its accountant does not count); the paper's rows are unaffected."""
    path = method_file(
        tmp_path,
        """
        from fedrepro.learning.engine import client_grads
        from fedrepro.learning.fedavg import FedAvg

        class Peeks(FedAvg):
            name = "peeks"

            def local_step(self, state, x, y, selected, lr):
                return x.sum()

        class Twice(FedAvg):
            name = "twice"

            def local_step(self, state, x, y, selected, lr):
                client_grads(state.net, state.local, x, y)
                return super().local_step(state, x, y, selected, lr)
        """,
    )
    for name, why in [("Peeks", "has no attribute 'sum'"), ("Twice", "released once")]:
        comp = compare(private_experiment(), load_method(f"{path}:{name}"), path, [0], context(partition_dir))
        mine = comp.rows[-1]
        assert mine.cells == [None] and len(mine.failures) == 1 and why in mine.failures[0], mine.failures
        assert all(math.isfinite(v) for v in comp.rows[0].cells[0].values())
    capsys.readouterr()


def test_private_protocol_refuses_unsampled_steps(tmp_path, partition_dir):
    path = method_file(
        tmp_path,
        """
        from fedrepro.learning.fedavg import FedAvg

        class Everyone(FedAvg):
            name = "everyone"
            steps_unsampled = True
        """,
    )
    with pytest.raises(ConfigError, match=r"Everyone.steps_unsampled: under .* private protocol"):
        compare(private_experiment(), load_method(f"{path}:Everyone"), path, [0], context(partition_dir))


def test_nan_method_fails_its_row_not_the_run(tmp_path, partition_dir, capsys):
    path = method_file(
        tmp_path,
        """
        import torch
        from fedrepro.learning.fedavg import FedAvg

        class Diverges(FedAvg):
            name = "diverges"

            def local_step(self, state, x, y, selected, lr):
                return super().local_step(state, x, y, selected, lr) * float("nan")
        """,
    )
    comp = compare(experiment(), load_method(f"{path}:Diverges"), path, [0, 1], context(partition_dir))
    err = capsys.readouterr().err
    assert err.count("fedrepro: method diverges failed in seed") == 2 and "non-finite training loss" in err
    mine = comp.rows[-1]
    assert mine.cells == [None, None] and len(mine.failures) == 2
    assert all(c is not None and math.isfinite(c["acc"]) for r in comp.rows[:-1] for c in r.cells)
    write_comparison(comp, tmp_path / "out", figure=False)
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| diverges | yours: not in the paper, never judged | failed |" in md and "**diverges failed**" in md
    table = pd.read_csv(tmp_path / "out" / "table.csv").set_index("method")
    assert math.isnan(table.loc["diverges", "mean"]) and "non-finite" in table.loc["diverges", "failed"]
    assert table.loc["fedavg", "n"] == 2


def test_an_exception_in_the_methods_code_names_its_line(tmp_path, partition_dir, capsys):
    path = method_file(
        tmp_path,
        """
        from fedrepro.learning.fedavg import FedAvg

        class Broken(FedAvg):
            name = "broken"

            def sync(self, state, selected):
                raise RuntimeError("server went away")
        """,
    )
    comp = compare(experiment(), load_method(f"{path}:Broken"), path, [0], context(partition_dir))
    assert comp.rows[-1].failures == [f"seed 0: {path}:8: RuntimeError: server went away"]
    assert f"{path}:8: RuntimeError" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        ("x = 1\ndef broken(:\n    pass\n", 2, "SyntaxError"),
        ("import math\n\nraise ValueError('bad constant')\n", 3, "ValueError while importing: bad constant"),
        ("class Other:\n    pass\n", 1, "no class Method (classes defined there: Other)"),
        ("class Method:\n    pass\n", 1, "Method is not a subclass of fedrepro.learning.engine.Algorithm"),
        (
            "from fedrepro.learning.engine import Algorithm\n\n\nclass Method(Algorithm):\n    name = 'm'\n",
            4,
            "Method does not implement deployed_params, init_state, local_step",
        ),
    ],
)
def test_a_broken_method_file_is_one_line_naming_file_and_line(tmp_path, capsys, body, line, what):
    path = tmp_path / "mine.py"
    path.write_text(body, encoding="utf-8")
    rc = main(["compare", f"{path}:Method", "--experiment", "adaped.table4_femnist_sample", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"fedrepro: error: {path}:{line}: ") and what in err


def test_missing_file_and_bad_spec(tmp_path, capsys):
    assert main(["compare", "nowhere.py:X", "--experiment", "adaped.table4_femnist_sample", "--out", str(tmp_path)])
    assert "nowhere.py: no such method file" in capsys.readouterr().err
    assert main(["compare", "examples/fedprox.py", "--experiment", "adaped.table4_femnist_sample", "--out", "x"])
    assert "expected FILE:CLASS" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("exp_id", "why"),
    [
        ("adaped.fig1a", "trains no federated method"),
        ("adaped.linreg_d50", "trains no federated method"),
        ("ppsgd.eps_emnist", "trains no federated method"),
        ("ppsgd.fig1a_synthetic", "excess risk of each user's linear regression parameters"),
    ],
)
def test_protocols_that_cannot_run_a_method_are_refused_in_one_line(tmp_path, capsys, exp_id, why):
    rc = main(["compare", "examples/fedprox.py:FedProx", "--experiment", exp_id, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"fedrepro: error: {exp_id} (kind ") and "cannot run a user's Algorithm" in err
    assert why in err and not (tmp_path / "o").exists()


def test_paired_difference_by_hand():
    # d = (1, 2, 3): mean 2, sd 1, se 1/sqrt(3) = 0.577, t = 3.46 at 2 df: p = 0.074, not resolved alone (1.96 se =
    # 1.13 < 2 called it resolved); at this spread n' = 4 resolves it (t(3) / 2 = 1.59 < 2): one more seed
    d = holm([paired_difference([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])])[0]
    assert (d.mean, d.n, d.resolved, d.more_seeds) == (pytest.approx(2.0), 3, False, 1)
    assert d.se == pytest.approx(1 / math.sqrt(3)) and d.p_value == pytest.approx(0.0742, abs=1e-4)
    # d = (1, -1, 2): mean 2/3, sd sqrt(7/3) = 1.528: t(n' - 1) * 1.528 / sqrt(n') < 0.667 first at n' = 23
    d = holm([paired_difference([1.0, -1.0, 2.0], [0.0, 0.0, 0.0])])[0]
    assert d.mean == pytest.approx(2 / 3) and d.se == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    assert not d.resolved and d.more_seeds == 23 - 3
    # a failed seed (NaN) drops out of the pairs; one pair left: no standard error, never resolved
    d = holm([paired_difference([5.0, math.nan], [1.0, 1.0])])[0]
    assert d.n == 1 and not d.resolved and d.more_seeds is None and math.isnan(d.p_value)
    assert paired_difference([math.nan], [1.0]).n == 0
    # float rounding around zero (identical columns): no number of seeds is stated
    d = holm([paired_difference([1e-18, -1e-9, 1e-9], [0.0, 0.0, 0.0])])[0]
    assert not d.resolved and d.more_seeds is None


def test_two_seeds_of_a_large_noisy_difference_are_not_resolved():
    """scaffold - fedavg: -12.56 ± 6.02 from 2 seeds was "resolved: yes" under 1.96; at 1 df p = 0.28."""
    d = holm([paired_difference([-12.56 - 6.02, -12.56 + 6.02], [0.0, 0.0])])[0]
    assert d.se == pytest.approx(6.02) and d.p_value == pytest.approx(0.285, abs=1e-3) and not d.resolved


def test_a_tables_differences_are_resolved_together_by_holm():
    """Three comparisons at p = 0.001, 0.03, 0.04: each alone is below 5 %, but Holm's step-down stops at the second
    (0.03 > 0.05 / 2); at 0.001, 0.02, 0.04 every step passes (0.0167, 0.025, 0.05)."""

    def at(*ps):
        return holm([Difference(1.0, 0.1, 5, p) for p in ps])

    assert [d.resolved for d in at(0.03, 0.001, 0.04)] == [False, True, False]
    assert [d.resolved for d in at(0.02, 0.001, 0.04)] == [True, True, True]
    assert [d.resolved for d in at(0.06)] == [False]
    # an untestable difference (one seed) is not counted in the family
    assert [d.resolved for d in holm([Difference(1.0, 0.1, 5, 0.04), Difference(1.0, math.nan, 1, math.nan)])] == [
        True,
        False,
    ]


def fedhdp_protocol(tmp_path, methods: dict, **over):
    """A small FedHDP protocol (6 clients, two of them opt-out) and the RunContext of its partition."""
    import numpy as np

    from fedrepro.data import fedformat
    from fedrepro.data.partition import Partition

    m, opt = 6, np.zeros(6, bool)
    opt[[1, 4]] = True
    rng = np.random.default_rng(0)
    classes = [rng.choice(4, 2, replace=False) for _ in range(m)]
    ytr = np.concatenate([rng.choice(c, 30) for c in classes])
    yte = np.concatenate([rng.choice(c, 12) for c in classes])

    def images(labels):
        x = rng.integers(0, 100, (len(labels), 8, 8)).astype(np.uint8)
        for c in range(4):
            r, q = divmod(c, 2)
            x[labels == c, 4 * r : 4 * r + 4, 4 * q : 4 * q + 4] += 90
        return x

    part = Partition("t", {"seed": 0}, m, np.repeat(np.arange(m), 30), np.repeat(np.arange(m), 12), {"opt_out": opt})
    pdir = fedformat.write(tmp_path / "p", part, images(ytr), ytr, images(yte), yte)
    params = {
        "partition": "p",
        "model": {"name": "mlp", "in_features": 64, "hidden": [16]},
        "methods": methods,
        "lams": [0.005, 0.25],
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 10,
        "lr": 0.1,
        "sampling_rate": 0.5,
        "clip": {"init": 1.0},
        "privacy": {"noise_multiplier_eff": 0.5, "count_std": 1.0, "delta": 1e-4},
        "threads": 1,
        **over,
    }
    params = resolve_params(params, get_kind("fedhdp_training").schema)
    exp = Experiment("fedhdp", "cmp_test", "fedhdp_training", "a test protocol", params, params, "quick", ())
    return exp, lambda seed: RunContext("fedhdp.cmp_test", seed, partitions={"p": pdir})


def test_fedhdp_protocol_trains_a_method_without_messages_as_non_private(tmp_path):
    """Under FedHDP's protocol a method from outside that sends no client messages has nothing the protocol can
    release: it trains like the NON-PRIVATE row (every client non-private, ε ∞, and the note says so). Its one
    deployed model per client fills Acc_g (pooled), Acc_g,np and every lambda's Acc_l,np, and FedAvg from outside has
    NON-PRIVATE's global model (FedAvg, same seed): the same Acc_g and Acc_g,np. Group columns are paired with
    NON-PRIVATE only (other rows' groups are their private and opt-out clients), ε never."""
    methods = {"nonprivate_ditto": {"algorithm": "nonprivate"}, "fedhdp_r_0_1": {"algorithm": "fedhdp", "r": 0.1}}
    exp, ctx = fedhdp_protocol(
        tmp_path,
        methods,
        checks={"np_ge_p_global": ["fedhdp_r_0_1"]},
        differences={"gain": ["lam0.005.fedhdp_r_0_1.acc_g", "lam0.005.nonprivate_ditto.acc_g"]},
    )
    path = method_file(tmp_path, "from fedrepro.learning.fedavg import FedAvg\n\nclass Fa(FedAvg):\n    name = 'fa'\n")
    comp = compare(exp, load_method(f"{path}:Fa"), path, [0, 1], ctx)
    rows = {r.name: r for r in comp.rows}
    fa, nonprivate = rows["fa"].cells, rows["nonprivate_ditto"].cells
    assert set(fa[0]) == set(nonprivate[0]) == {"acc_g", "acc_g_np", "lam0.005 acc_l_np", "lam0.25 acc_l_np", "ε"}
    assert all(0 < c["acc_g"] < 100 for c in fa)  # not saturated: equal accuracies say the same model
    for seed in (0, 1):
        for col in ("acc_g", "acc_g_np"):
            assert fa[seed][col] == pytest.approx(nonprivate[seed][col], abs=1e-9)
        assert fa[seed]["lam0.25 acc_l_np"] == fa[seed]["acc_g_np"]  # one model per client in every role
        assert fa[seed]["ε"] == math.inf and math.isfinite(rows["fedhdp_r_0_1"].cells[seed]["ε"])
    assert comp.private and not comp.by_construction and "trained without privacy" in comp.privacy_note
    write_comparison(comp, tmp_path / "out", figure=False)
    diffs = pd.read_csv(tmp_path / "out" / "differences.csv")
    assert sorted(diffs[diffs["baseline"] == "nonprivate_ditto"]["column"]) == sorted(set(fa[0]) - {"ε"})
    assert list(diffs[diffs["baseline"] == "fedhdp_r_0_1"]["column"]) == ["acc_g"]


MESSAGE_FEDAVG = """
from fedrepro.learning.fedavg import FedAvg

class Released(FedAvg):
    # FedAvg whose server sees only the protocol's release: each client sends its local update
    name = "released"

    def client_message(self, state, selected):
        return {k: v - state.global_params[k] for k, v in state.local.items()}

    def server_update(self, state, selected, released):
        state.global_params = {k: w + released[k] for k, w in state.global_params.items()}
        state.local = None
"""


def test_fedhdp_protocol_releases_a_methods_messages_as_hdp_fedavg(tmp_path):
    """Privacy by construction under FedHDP's protocol: a method that sends client messages is run as messages, the
    protocol's release (HDP-FedAvg's server step: the private clients' messages clipped to the adaptive norm, their
    mean noised with the paper's z, the noisy count moving the norm), server_update. FedAvg sending its local update
    therefore has HDP-FedAvg's global model, draw for draw: the same Acc_g and group columns in every seed, the same
    finite ε; its group columns pair with HDP-FedAvg's (same clients) and not NON-PRIVATE's. That it can fail: a
    release without the noise gives another model (tests/papers/fedhdp/test_fedhdp.py)."""
    methods = {"nonprivate_ditto": {"algorithm": "nonprivate"}, "hdp_fedavg_ditto": {"algorithm": "hdp_fedavg"}}
    exp, ctx = fedhdp_protocol(tmp_path, methods)
    path = method_file(tmp_path, MESSAGE_FEDAVG)
    cls = load_method(f"{path}:Released")
    comp = compare(exp, cls, path, [0, 1], ctx)
    rows = {r.name: r for r in comp.rows}
    mine, hdp = rows["released"].cells, rows["hdp_fedavg_ditto"].cells
    personal = {f"lam{lam} acc_l_{g}" for lam in (0.005, 0.25) for g in ("p", "np")}
    assert set(mine[0]) == set(hdp[0]) == {"acc_g", "acc_g_p", "acc_g_np", "ε", *personal}
    for seed in (0, 1):
        assert 0 < mine[seed]["acc_g"] < 100
        for col in ("acc_g", "acc_g_p", "acc_g_np", "ε"):
            assert mine[seed][col] == pytest.approx(hdp[seed][col], abs=1e-9), col
        assert math.isfinite(mine[seed]["ε"]) and rows["nonprivate_ditto"].cells[seed]["ε"] == math.inf
    assert comp.private and comp.by_construction and "privacy by construction" in comp.privacy_note
    write_comparison(comp, tmp_path / "out", figure=False)
    diffs = pd.read_csv(tmp_path / "out" / "differences.csv")
    assert sorted(diffs[diffs["baseline"] == "hdp_fedavg_ditto"]["column"]) == sorted(set(mine[0]) - {"ε"})
    assert list(diffs[diffs["baseline"] == "nonprivate_ditto"]["column"]) == ["acc_g"]
    record = write_record(comp, tmp_path / "out", f"{path}:Released", {}, 0.0).read_text(encoding="utf-8")
    eps = json.loads(record, parse_constant=lambda token: pytest.fail(f"compare.json holds {token}"))["epsilon"]
    assert eps["released"]["ε"] == pytest.approx(hdp[0]["ε"]) and eps["nonprivate_ditto"]["ε"] == "inf"

    # without noise (z_eff = 0) the messages are still released, clipped as HDP-FedAvg's: the groups still pair so
    noiseless, ctx0 = fedhdp_protocol(tmp_path / "z0", methods, privacy={"noise_multiplier_eff": 0.0, "delta": 1e-4})
    quiet = compare(noiseless, cls, path, [0, 1], ctx0)
    assert quiet.by_construction and not quiet.private
    mine0, hdp0 = quiet.rows[-1].cells, quiet.rows[1].cells
    assert mine0[0]["acc_g_p"] == pytest.approx(hdp0[0]["acc_g_p"], abs=1e-9) and "ε" not in mine0[0]
    write_comparison(quiet, tmp_path / "out0", figure=False)
    diffs = pd.read_csv(tmp_path / "out0" / "differences.csv")
    assert "acc_g_p" in set(diffs[diffs["baseline"] == "hdp_fedavg_ditto"]["column"])


def test_baselines_are_read_only_when_made_from_the_same_data(tmp_path, partition_dir):
    """--baselines (the workflow's runs of the paper's methods) pair with the method only when made from the data the
    method trains on: a run whose recorded partition digest differs is refused, naming the run and the partition."""
    from fedrepro.errors import ResultError
    from fedrepro.runio import write_run

    exp = experiment()
    inputs = {"datasets": {}, "partitions": {"p": "a" * 64}}
    run = tmp_path / "run0"
    out = get_kind(exp.kind).fn(exp.params, rng_for(exp.id, 0), context(partition_dir)(0))
    write_run(run, exp, 0, out, 0.0, inputs=inputs)
    cls = load_method(f"{FEDPROX}:FedProx")
    same = compare(exp, cls, FEDPROX, [0], context(partition_dir), [run], inputs)
    fedavg = next(r for r in same.rows if r.name == "fedavg")
    assert fedavg.cells[0]["acc"] == out.metrics["acc"]["fedavg"]  # read from the run, not rebuilt
    rebuilt = {"datasets": {}, "partitions": {"p": "b" * 64}}
    with pytest.raises(ResultError, match=r"run0: made from other input data .*\(partition p\)"):
        compare(exp, cls, FEDPROX, [0], context(partition_dir), [run], rebuilt)


def test_a_killed_compare_resumes_from_its_finished_seeds(tmp_path, partition_dir):
    """Killed (Ctrl-C) while training seed 1: seed 0's result is kept under the state dir, the next run reads it
    back without training it and writes the same table as a run never killed; a changed method file trains again."""
    plain = context(partition_dir)
    calls: list[int] = []

    def killed_in_seed_1(seed):
        calls.append(seed)
        if seed == 1:
            raise KeyboardInterrupt
        return plain(seed)

    def counting(seed):
        calls.append(seed)
        return plain(seed)

    method = method_file(tmp_path, FEDPROX.read_text(), "fedprox.py")
    cls, exp, state = load_method(f"{method}:FedProx"), experiment(), tmp_path / "state"
    with pytest.raises(KeyboardInterrupt):
        compare(exp, cls, method, [0, 1], killed_in_seed_1, state_dir=state)
    assert sorted(p.name for p in state.iterdir()) == ["0.json"]
    calls.clear()
    resumed = compare(exp, cls, method, [0, 1], counting, state_dir=state)
    assert set(calls) == {1}  # seed 0 was not trained again
    write_comparison(resumed, tmp_path / "resumed", figure=True)
    record = json.loads(write_record(resumed, tmp_path / "resumed", f"{method}:FedProx", None, 1.5).read_text())
    assert record["resumed_seeds"] == [0] and record["baselines"] == "rebuilt" and record["seeds"] == [0, 1]
    assert record["method"]["file_sha256"] == hashlib.sha256(method.read_bytes()).hexdigest()
    assert record["params_digest"] and record["experiment"] == exp.id and record["wall_s"] == 1.5
    write_comparison(compare(exp, cls, method, [0, 1], plain), tmp_path / "whole", figure=True)
    for name in ("table.md", "table.csv", "differences.csv"):
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    # the key holds: the method file changed, so every seed trains again
    method.write_text(FEDPROX.read_text() + "\n# changed\n")
    calls.clear()
    compare(exp, load_method(f"{method}:FedProx"), method, [0, 1], counting, state_dir=state)
    assert set(calls) == {0, 1}


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity tokens (what a strict parser does)."""

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_a_module_the_method_imports_is_in_the_cache_key(tmp_path, partition_dir):
    """Editing a module the method file imports from its own directory trains it again (the key covered only the
    method file: a rerun read the old seeds), and compare.json lists the module with its sha256."""
    plain = context(partition_dir)
    calls: list[int] = []

    def counting(seed):
        calls.append(seed)
        return plain(seed)

    (tmp_path / "prox_helpers.py").write_text("MU = 0.01\n")
    method = method_file(
        tmp_path,
        FEDPROX.read_text().replace("class FedProx(", "from prox_helpers import MU  # noqa: F401\n\n\nclass FedProx("),
        "fedprox_mod.py",
    )
    state = tmp_path / "state"
    exp = experiment()
    first = compare(exp, load_method(f"{method}:FedProx"), method, [0], counting, state_dir=state)
    assert "prox_helpers.py" in first.method_sources and "fedprox_mod.py" in first.method_sources
    calls.clear()
    compare(exp, load_method(f"{method}:FedProx"), method, [0], counting, state_dir=state)
    assert calls == []  # nothing changed: read back
    (tmp_path / "prox_helpers.py").write_text("MU = 0.5\n")
    compare(exp, load_method(f"{method}:FedProx"), method, [0], counting, state_dir=state)
    assert set(calls) == {0}  # the imported module changed: trained again
    record = _strict_json(write_record(first, tmp_path / "r", f"{method}:FedProx", None, 1.0).read_text())
    assert set(record["method"]["sources"]) >= {"prox_helpers.py", "fedprox_mod.py"}


def test_compare_json_is_strict_json_with_infinite_parameters(tmp_path, partition_dir):
    comp = compare(experiment(), load_method(f"{FEDPROX}:FedProx"), FEDPROX, [0], context(partition_dir))
    comp.experiment.params["alphas"] = [1.0, math.inf]  # as PPSGD's alpha Q = inf
    text = write_record(comp, tmp_path / "r", f"{FEDPROX}:FedProx", None, 1.0).read_text()
    assert _strict_json(text)["params"]["alphas"] == [1.0, "inf"]


DIVERGES_ABOVE = """
from fedrepro.learning.fedavg import FedAvg

class Touchy(FedAvg):
    name = "touchy"

    def __init__(self, limit=1.0, **kw):
        super().__init__(**kw)
        self.limit = limit

    def local_step(self, state, x, y, selected, lr):
        loss = super().local_step(state, x, y, selected, lr)
        return loss * float("nan") if lr > self.limit else loss
"""


def test_method_args_and_an_lr_grid_with_a_diverging_lr(tmp_path, partition_dir, capsys):
    """--method-arg reaches the constructor in every seed and is in the key; --lr replaces the protocol's grid and is
    picked by its select rule; an lr that diverges is dropped (AdaPeD's protocol failed the whole row)."""
    path = method_file(tmp_path, DIVERGES_ABOVE, "touchy.py")
    exp = experiment()
    comp = compare(exp, load_method(f"{path}:Touchy"), path, [0], context(partition_dir), method_args={"limit": 0.1},
                   lr=[0.05, 0.2])  # fmt: skip
    mine = comp.rows[-1]
    assert mine.failures == [] and math.isfinite(mine.cells[0]["acc"])  # 0.2 diverged and was dropped, 0.05 kept
    assert "this lr is dropped from the grid" in capsys.readouterr().out
    assert comp.method_args == {"limit": 0.1} and comp.lr == [0.05, 0.2]
    md = "\n".join(write_comparison(comp, tmp_path / "o", figure=False)[0].read_text().splitlines())
    assert "touchy's arguments: limit=0.1." in md and "touchy's learning rates: 0.05, 0.2:" in md
    # every lr diverging fails the row
    allbad = compare(exp, load_method(f"{path}:Touchy"), path, [0], context(partition_dir), method_args={"limit": 0.01},
                     lr=[0.05, 0.2])  # fmt: skip
    assert allbad.rows[-1].cells == [None] and "non-finite training loss" in allbad.rows[-1].failures[0]
    # an argument the constructor does not take: one line naming the file and the keyword
    with pytest.raises(ConfigError, match=r"touchy\.py:\d+: --method-arg mu: Touchy.__init__ takes no keyword 'mu'"):
        compare(exp, load_method(f"{path}:Touchy"), path, [0], context(partition_dir), method_args={"mu": 1})


def test_compare_exits_1_when_the_method_failed_in_every_seed(tmp_path, partition_dir, capsys, monkeypatch):
    """So that a Snakemake job whose every seed failed fails (it finished green)."""
    import fedrepro.compare.protocol as protocol

    path = method_file(tmp_path, DIVERGES_ABOVE, "touchy2.py")
    exp = experiment()
    monkeypatch.setattr("fedrepro.config.resolve_experiment", lambda *a, **k: exp)
    monkeypatch.setattr("fedrepro.run_inputs.prepare_inputs", lambda cfg, e: [])
    monkeypatch.setattr("fedrepro.run_inputs.run_inputs", lambda cfg, e: ({}, {"p": partition_dir}, {}))
    monkeypatch.setattr("fedrepro.config.paper_seeds", lambda *a, **k: [0])
    monkeypatch.setattr("fedrepro.config.load_paper", lambda *a, **k: {"experiments": {"cmp_test": {}}})
    assert protocol.slot_of(exp) is not None
    rc = main(["compare", f"{path}:Touchy", "--experiment", "adaped.cmp_test", "--method-arg", "limit=0.001",
               "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "touchy failed in every seed" in err and (tmp_path / "out" / "table.md").is_file()


def test_each_protocol_says_how_it_takes_your_learning_rates():
    from fedrepro.papers.fedhdp.experiments.training import METHOD_SLOT as FEDHDP
    from fedrepro.papers.ppsgd.method import METHOD_SLOT as PPSGD

    assert FEDHDP.with_lr({"lr": 0.5}, "x", [0.1]) == {"lr": 0.1}
    with pytest.raises(ConfigError, match="FedHDP's protocol trains at one lr"):
        FEDHDP.with_lr({"lr": 0.5}, "x", [0.1, 0.2])
    assert PPSGD.with_lr({"steps": [1.0, 2.0], "sigmas": [0]}, "x", [0.01, 0.03]) == {
        "steps": [0.01, 0.03],
        "sigmas": [0],
    }
    assert all(s.lr_text for s in (FEDHDP, PPSGD))


def test_list_marks_the_experiments_that_take_a_method(capsys):
    assert main(["list"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("adaped.", "ppsgd."))}
    assert " compare " in lines["adaped.table4_femnist_sample"] and " compare " in lines["ppsgd.x_fig1c_femnist_sample"]
    assert " compare " not in lines["adaped.fig1a"] and " compare " not in lines["ppsgd.eps_emnist"]


def test_scaffold_trains_under_the_private_protocol_by_construction(tmp_path, partition_dir):
    """The README's SCAFFOLD example under AdaPeD's DP protocol: its corrected steps take the protocol's released
    gradients (its control variates are computed from them: post-processing), and its row has a number per epsilon."""
    scaffold = REPO / "examples" / "scaffold.py"
    comp = compare(private_experiment(), load_method(f"{scaffold}:Scaffold"), scaffold, [0], context(partition_dir))
    mine = comp.rows[-1]
    assert mine.failures == [] and set(mine.cells[0]) == {"acc eps_2p00", "acc eps_20p00"}
    assert all(math.isfinite(v) for v in mine.cells[0].values())
