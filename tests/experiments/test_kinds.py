"""The experiment-kind registry: lookup by name imports only the defining module."""

import subprocess
import sys

import pytest
from kinds import call_kind

from fedrepro.config import load_global
from fedrepro.errors import ConfigError
from fedrepro.experiments import all_kinds, get_kind


def test_lookup_does_not_import_other_experiments_dependencies():
    code = (
        "import sys; from fedrepro.experiments import get_kind; get_kind('gaussian_remark1'); "
        "print('sklearn' in sys.modules, 'fedrepro.papers.adaped.experiments.adamix' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_unknown_kind_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown experiment kind 'nope'.*gaussian_remark1"):
        get_kind("nope")


class _NoRandomness:
    """A stand-in generator that fails on any use: a kind registered as deterministic must never draw."""

    def __getattr__(self, name):
        raise AssertionError(f"deterministic kind used rng.{name}")


# Small valid parameters for every deterministic kind (a new deterministic kind must be added here).
DETERMINISTIC_PARAMS = {
    "privacy_curve": {
        "noise_multiplier": 2.0,
        "sampling_rate": 0.1,
        "rounds": 10,
        "delta": 1e-5,
        "accountants": ["rdp", "rdp_classic"],
        "curve_points": 2,
    },
    "privacy_grid": {
        "noise_multipliers": [1.0, 4.0],
        "sampling_rate": 0.1,
        "rounds": [5, 10],
        "delta": 1e-5,
        "accountants": ["rdp"],
        "curve_points": 2,
    },
    "adaped_thm5": {"K": 10, "m": 20, "T_over_tau": 10, "delta": 1e-5, "targets": [2.0]},
    "adaped_ldp": {"eps0": [0.5], "delta": 1e-5, "accountants": ["rdp"]},
    "histograms_thm31": {"total_epsilon": 5.0, "delta": 1e-8, "T": 5},
    "ppsgd_theorems": {"epsilons": [1.0], "delta": 1e-4, "n": 10, "N": 100, "T": 10, "M": 10, "q": 0.1, "clip": 1.0},
    # its seeds are parameters: the swept experiment draws from its own seeded streams, never from this rng
    "forensic_sweep": {"experiment": "remark1", "rows": ["R1.ex"], "grid": {"n": [10]}},
    "printed_relations": {"relations": {"r": {"what": "Remark 1", "value": "R1.ex", "equals": 0.01}}},
    # reads the registry and a partition's test sizes (a FedHDP kind: its context below)
    "fedhdp_variance_floor": {
        "experiment": "noniid_mnist",
        "partition": "p",
        "rows": ["T3.nonIID.DP-FedAvg+Ditto.Acc_g_p.var"],
    },
    # reads the registry and a partition's clients' digits (a FedHDP kind: its context below)
    "fedhdp_collapse_share": {
        "experiment": "skewed_mnist",
        "partition": "p",
        "rows": ["T9.lam0.005.FedHDP_r=0.Acc_g_p", "T9.lam0.005.FedHDP_r=0.D_g"],
        "collapse_tol": 0.1,
    },
}


def _context(name: str, tmp_path):
    """The run context of a deterministic kind in these tests: AdaPeD's, or a FedHDP kind's with a partition."""
    from fedrepro.experiments import RunContext

    if name == "fedhdp_variance_floor":
        from learning_helpers import write_quadrant_partition

        part = write_quadrant_partition(tmp_path / "p")
        return RunContext(f"fedhdp.{name}", 0, partitions={"p": part}, config=load_global())
    if name == "fedhdp_collapse_share":
        from learning_helpers import write_digit_manifest

        part = write_digit_manifest(tmp_path / "p", sevens_private=100, opt_out=100, per_other_digit=200)
        return RunContext(f"fedhdp.{name}", 0, partitions={"p": part}, config=load_global())
    return RunContext(f"adaped.{name}", 0, config=load_global())


def test_deterministic_kinds_never_draw_from_rng(tmp_path):
    kinds = {n: k for n, k in all_kinds().items() if k.deterministic}
    assert set(kinds) == set(DETERMINISTIC_PARAMS)
    for name in kinds:
        out = call_kind(name, DETERMINISTIC_PARAMS[name], _NoRandomness(), _context(name, tmp_path))
        assert out.metrics, name


def _undeclared(kind, out) -> list[str]:
    from fedrepro.aggregate import flatten

    return [k for k in flatten(out.metrics) if not kind.produces_metric(k)] + [
        f"check {c}" for c in out.checks if not kind.produces_check(c)
    ]


def test_deterministic_kinds_produce_only_what_they_declare(tmp_path):
    for name, params in DETERMINISTIC_PARAMS.items():
        kind = get_kind(name)
        out = call_kind(name, params, _NoRandomness(), _context(name, tmp_path / name))
        assert _undeclared(kind, out) == [], name


# Cheap runs of the other offline kinds, on the repository's experiments (quick scale, small overrides).
CHEAP_RUNS = [
    ("adaped.fig1a", {"reps": 2}),
    ("adaped.remark1", {}),
    ("adaped.bernoulli", {"m": 300, "reps": 1}),
    ("adaped.linreg_d50", {"m": 200}),
    ("adaped.table3", {"m": 100, "rounds": 2}),
    ("fedhdp.fig1", {"trials": 50}),
    ("fedhdp.fig2", {"trials": 50}),
    ("fedhdp.fig4", {"trials": 50}),
    ("fedhdp.table2", {"trials": 50}),
    ("ppsgd.fig1a_synthetic", {"niter": 12, "n_users": 50, "sigmas": [0, 100]}),
]


@pytest.mark.parametrize("exp_id, overrides", CHEAP_RUNS)
def test_kinds_produce_only_what_they_declare(exp_id, overrides):
    from fedrepro.config import resolve_experiment
    from fedrepro.experiments import RunContext
    from fedrepro.seeding import rng_for

    cfg = load_global()
    exp = resolve_experiment(cfg, exp_id, "quick", overrides)
    kind = get_kind(exp.kind)
    out = kind.fn(exp.params, rng_for(exp.id, 0), RunContext(exp.id, 0, config=cfg))
    assert _undeclared(kind, out) == []


def test_a_row_naming_what_no_kind_produces_is_refused(tmp_path):
    from fedrepro.config import load_paper
    from fedrepro.report.registry import check_keys, load_registry

    cfg = load_global()
    doc = load_paper(cfg, "adaped")
    rows = load_registry(cfg["targets"]["adaped"], "adaped", doc["experiments"])
    check_keys("adaped.csv", rows, doc["experiments"])  # the real registry passes
    import dataclasses

    bad = [
        dataclasses.replace(rows[0], experiment="adaped.bernoulli", key="gain_pctt.normal"),
        dataclasses.replace(rows[0], experiment="adaped.fig1a", key="check:recovers,dp_matches_closed_form"),
    ]
    with pytest.raises(ConfigError, match=r"(?s)2 registry row\(s\).*metric gain_pctt.normal.*check\(s\) recovers"):
        check_keys("adaped.csv", bad, doc["experiments"])
