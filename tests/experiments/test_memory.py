"""Sizes checked against memory before a run starts (fedrepro.experiments.memory): a refusal is one line with the
estimate and the machine's memory, the estimate is a lower bound of what a run allocates, and every configured
experiment fits."""

import tracemalloc

import pytest

from fedrepro.cli import main
from fedrepro.config import load_global, load_paper, resolve_experiment
from fedrepro.errors import ResourceError
from fedrepro.experiments import RunContext, all_kinds, get_kind
from fedrepro.experiments.memory import MemoryNeed, check_memory, machine_memory, size_text
from fedrepro.seeding import rng_for

# the kinds whose arrays grow with their parameters (Monte Carlo repetitions x clients x dimensions)
SIZED_KINDS = {
    "adamix_linreg",
    "bernoulli_synthetic",
    "fedhdp_opt_out",
    "fedhdp_server_variance",
    "fedhdp_server_variance_vs_rho",
    "fedhdp_table2",
    "gaussian_dp_estimation",
    "histograms_synthetic",
    "adaped_linreg",
    "ppsgd_synthetic",
}


def test_the_kinds_with_parameter_sized_arrays_declare_their_memory():
    assert {name for name, k in all_kinds().items() if k.memory is not None} == SIZED_KINDS


def test_a_run_too_big_for_the_machine_is_refused_in_one_line():
    need = MemoryNeed(("m", "eps0"), lambda p: 8 * p["m"] * len(p["eps0"]))
    check_memory("p.e", need, {"m": 10, "eps0": [1, 2]}, available=160)  # fits exactly
    with pytest.raises(ResourceError) as err:
        check_memory("p.e", need, {"m": 1 << 40, "eps0": [1, 2], "other": 3}, available=8 << 30)
    assert str(err.value) == (
        "p.e: m=1099511627776, eps0=2 values: its arrays need at least 16 TiB of memory and this machine has 8 GiB; "
        "lower m, eps0 (--set KEY=VALUE) or run it on a larger machine"
    )
    assert size_text(1536) == "1.5 KiB" and size_text(100) == "100 B" and machine_memory() > 1 << 28


@pytest.mark.parametrize("override", ["m=1000000000000", "reps=1e12", "d=1000000000000"])
def test_run_refuses_an_absurd_size_before_any_work(tmp_path, capsys, override):
    out = tmp_path / "run"
    assert main(["run", "adaped.fig1a", "--set", override, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    key = override.split("=")[0]
    assert "\n" not in err and err.startswith("fedrepro: error: adaped.fig1a: ") and f"{key}=" in err
    assert "PiB of memory and this machine has" in err and size_text(machine_memory()) in err
    assert not out.exists()


def test_every_configured_experiment_fits():
    cfg = load_global()
    for paper in cfg["papers"]:
        experiments = load_paper(cfg, paper)["experiments"]
        for name in (n for n, e in experiments.items() if e["kind"] in SIZED_KINDS):
            for scale in ("quick", "paper"):
                exp = resolve_experiment(cfg, f"{paper}.{name}", scale)
                kind = get_kind(exp.kind)
                check_memory(exp.id, kind.memory, exp.params, available=2 << 30)  # the largest bound is ~0.8 GiB


# Small runs of each sized kind: numpy reports its allocations to tracemalloc, whose peak must reach the bound.
SMALL_RUNS = [
    ("adaped.fig1a", {"reps": 3, "m": 2000}),
    ("adaped.bernoulli", {"m": 2000, "reps": 3}),
    ("adaped.linreg_d50", {"m": 200}),
    ("fedhdp.fig1", {"trials": 2000}),
    ("fedhdp.fig2", {"trials": 2000}),
    ("fedhdp.fig4", {"trials": 2000}),
    ("fedhdp.table2", {"trials": 2000}),
    ("ppsgd.fig1a_synthetic", {"niter": 3, "n_users": 200, "sigmas": [0, 100]}),
    ("histograms.x_synthetic", {}),
]


@pytest.mark.parametrize("exp_id, overrides", SMALL_RUNS)
def test_the_estimate_is_a_lower_bound(exp_id, overrides):
    cfg = load_global()
    exp = resolve_experiment(cfg, exp_id, "quick", overrides)
    kind = get_kind(exp.kind)
    from fedrepro.papers.adaped.experiments import linreg

    linreg._POPULATIONS.clear()  # populations kept from another test's run would not be allocated here
    tracemalloc.start()
    try:
        kind.fn(exp.params, rng_for(exp.id, 0), RunContext(exp.id, 0, config=cfg))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kind.memory.bytes(exp.params) <= peak, (size_text(kind.memory.bytes(exp.params)), size_text(peak))
