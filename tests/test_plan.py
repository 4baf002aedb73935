"""The compute plan (fedrepro.plan, config/compute.yaml): one entry per experiment, the arithmetic of an
extrapolation, and the paper-scale cluster resources read from the same numbers."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from fedrepro import plan
from fedrepro.cli import main
from fedrepro.config import load_global, load_paper
from fedrepro.errors import ConfigError
from fedrepro.plan import experiment_resources


def _doc(**experiments):
    return {
        "margin": {"runtime": 1.5, "memory": 2},
        "min_runtime": 30,
        "min_mem_mb": 1000,
        "sources": {"m": "a measurement"},
        "experiments": experiments,
    }


def test_every_experiment_has_a_cost_and_the_totals_add_up():
    cfg = load_global()
    rows = plan.rows(cfg)  # a ConfigError if compute.yaml lacks an experiment
    n = sum(len(load_paper(cfg, p)["experiments"]) for p in cfg["papers"])
    assert len(rows) == n and all(r.cost.cpu_s >= 0 and r.seeds >= 1 for r in rows)
    text = plan.render(rows, 4, {})
    total = sum(r.cpu_h for r in rows)
    assert f"all experiments ({n} experiments): {total:,.0f} CPU-h" in text or f"{total:,.2f} CPU-h" in text


def test_an_experiment_without_a_cost_is_named(tmp_path, monkeypatch):
    cfg = copy.deepcopy(load_global())
    doc = yaml.safe_load(open(plan.load_compute(cfg)["path"]))
    del doc["experiments"]["adaped.fig1a"]
    path = tmp_path / "compute.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg["compute"] = str(path)
    with pytest.raises(ConfigError, match=r"no paper-scale cost for adaped\.fig1a"):
        plan.rows(cfg)


def test_extrapolated_and_like_costs_are_computed_not_typed():
    doc = _doc(
        a={"basis": "measured", "cpu_s": 100, "peak_mb": 600, "from": "m"},
        b={"basis": "extrapolated", "steps": 2000, "ms_per_step": 3.0, "mix": 2.5, "peak_mb": 800, "from": "m"},
        c={"basis": "extrapolated", "like": "a", "gpu": True},
    )
    assert plan.cost(doc, "b").cpu_s == pytest.approx(15.0)
    assert plan.cost(doc, "c").cpu_s == 100 and plan.cost(doc, "c").gpu and plan.cost(doc, "c").basis == "extrapolated"
    assert plan.cost(doc, "missing") is None


def test_a_measured_gpu_step_decides_the_gpu_and_its_hours():
    step = {"ms": 0.5, "from": "m"}
    doc = _doc(
        fast={"basis": "measured", "cpu_s": 7200, "peak_mb": 600, "from": "m", "gpu_step": {**step, "cpu_ms": 5.0}},
        slow={"basis": "measured", "cpu_s": 7200, "peak_mb": 600, "from": "m", "gpu_step": {**step, "cpu_ms": 1.5}},
        like={"basis": "extrapolated", "like": "fast"},
    )
    fast, slow = plan.cost(doc, "fast"), plan.cost(doc, "slow")
    assert fast.gpu and fast.gpu_ratio == pytest.approx(10) and fast.gpu_s == pytest.approx(720)
    assert not slow.gpu and slow.gpu_s == pytest.approx(2400)  # 3x is below GPU_WORTH
    assert plan.cost(doc, "like").gpu_s == pytest.approx(720)
    assert plan.paper_resources(doc, "fast")["gpu"] == 1 and plan.paper_resources(doc, "slow")["gpu"] == 0
    row = plan.Row("fast", fast, 5, True)
    assert "step 10.0x faster, ~1.00 GPU-h (m)" in plan.render([row], 2, {})


def test_a_cost_may_not_state_the_gpu_and_measure_it(tmp_path):
    cfg = copy.deepcopy(load_global())
    doc = yaml.safe_load(open(plan.load_compute(cfg)["path"]))
    doc["experiments"]["adaped.table1_cifar10"]["gpu"] = True  # it has a measured gpu_step
    path = tmp_path / "compute.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg["compute"] = str(path)
    with pytest.raises(ConfigError, match="table1_cifar10"):
        plan.load_compute(cfg)


def test_resources_are_the_cost_with_margins_and_floors():
    doc = _doc(
        big={"basis": "measured", "cpu_s": 36000, "peak_mb": 3000, "from": "m", "gpu": True},
        small={"basis": "measured", "cpu_s": 5, "peak_mb": 100, "from": "m"},
    )
    assert plan.paper_resources(doc, "big") == {"runtime": math.ceil(36000 * 1.5 / 60), "mem_mb": 6000, "gpu": 1}
    assert plan.paper_resources(doc, "big", threads=2)["runtime"] == math.ceil(18000 * 1.5 / 60)
    # two threads may be two one-thread processes, each at the run's one-process peak
    assert plan.paper_resources(doc, "big", threads=2)["mem_mb"] == 2 * 6000
    assert plan.paper_resources(doc, "small") == {"runtime": 30, "mem_mb": 1000, "gpu": 0}


def test_the_workflow_resources_read_compute_yaml():
    cfg = load_global()
    entry = load_paper(cfg, "adaped")["experiments"]["table1_cifar100"]
    got = experiment_resources(cfg, entry, "paper", "adaped.table1_cifar100")
    c = plan.cost(plan.load_compute(cfg), "adaped.table1_cifar100")
    assert got["runtime"] == math.ceil(c.cpu_s * 1.5 / 60) and got["gpu"] == 1
    assert experiment_resources(cfg, entry, "quick", "adaped.table1_cifar100")["gpu"] == 0


def test_an_experiment_may_not_set_what_compute_yaml_derives():
    cfg = load_global()
    entry = {"resources": {"paper": {"runtime": 60}}}
    with pytest.raises(ConfigError, match=r"adaped\.fig1a: resources\.paper sets runtime"):
        experiment_resources(cfg, entry, "paper", "adaped.fig1a")


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"basis": "measured", "peak_mb": 1, "from": "m"}, "experiments"),  # no cpu_s
        ({"basis": "measured", "cpu_s": 1, "steps": 2, "peak_mb": 1, "from": "m"}, "experiments"),  # both
        ({"basis": "extrapolated", "like": "nowhere"}, "like: 'nowhere'"),
        ({"basis": "measured", "cpu_s": 1, "peak_mb": 1, "from": "typo"}, "from: 'typo'"),
    ],
)
def test_bad_entries_are_refused(tmp_path, entry, match):
    path = tmp_path / "compute.yaml"
    path.write_text(yaml.safe_dump(_doc(x=entry)))
    with pytest.raises(ConfigError, match=match):
        plan.load_compute({"compute": str(path)})


def test_plan_command_prints_totals(capsys):
    assert main(["plan", "--cores", "8"]) == 0
    out = capsys.readouterr().out
    assert "available here (" in out and "all experiments (" in out and "on 8 cores" in out
    assert main(["plan", "--cores", "0"]) == 2


def test_the_campaign_is_ordered_by_printed_rows_per_cpu_hour():
    c = plan.Cost(3600.0, 1.0, "measured", "x")
    rows = [
        plan.Row("p.none", c, 1, True, 0, 5),  # judges no printed row: last among the data here
        plan.Row("p.slow", c, 10, True, 20, 0),  # 2 printed rows per CPU-h
        plan.Row("p.fast", c, 1, True, 10, 0),  # 10 per CPU-h
        plan.Row("p.away", c, 1, False, 100, 0),  # data not here: after everything that can run here
    ]
    assert [r.exp_id for r in plan.campaign_order(rows)] == ["p.fast", "p.slow", "p.none", "p.away"]
    counts = plan.registry_counts(load_global())
    assert counts["fedhdp.noniid_mnist"][0] == 260  # Tables 3 (top) and 8, printed rows


def test_plan_remaining_lists_what_the_archive_lacks(capsys, tmp_path):
    assert main(["plan", "--remaining", "--config-set", f"archive.dir={tmp_path / 'empty'}"]) == 0
    out = capsys.readouterr().out
    assert "lacks or holds stale" in out and "seeds lacking" in out
    line = next(x for x in out.splitlines() if x.startswith("| fedhdp.noniid_mnist |"))
    seeds = load_paper(load_global(), "fedhdp")["experiments"]["noniid_mnist"]["seeds"]["paper"]
    # its printed and check rows, and every paper seed lacking
    assert "| 260 | 21 |" in line and f"| {len(seeds)} |" in line
    assert "| adaped.bernoulli |" not in out  # cheap at paper scale: the default run builds it
