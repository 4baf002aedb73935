"""The SLURM profile and the per-job resources it submits (the cluster itself is exercised by .ci/slurm_test.sh)."""

from __future__ import annotations

import copy

import pytest
import yaml

from fedrepro.config import REPO_ROOT, load_global, load_paper, load_schema, validate
from fedrepro.errors import ConfigError
from fedrepro.plan import experiment_resources

ROOT = REPO_ROOT


def test_profile_is_a_slurm_profile_with_known_keys():
    prof = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert prof["executor"] == "slurm"
    assert prof["rerun-incomplete"] is True and prof["latency-wait"] >= 5
    assert set(prof["default-resources"]) == {"mem_mb", "runtime"}
    # every key is a Snakemake option (a typo would otherwise only surface on the cluster)
    from snakemake.cli import get_argument_parser

    options = {a.dest for a in get_argument_parser()._actions}
    assert {k.replace("-", "_") for k in prof} <= options


def test_defaults_come_from_config_yaml_per_scale():
    cfg = load_global()
    entry = load_paper(cfg, "adaped")["experiments"]["fig1a"]  # declares no resources of its own
    for scale in ("quick", "paper"):
        want = {"gpu": 0, **cfg["resources"][scale]}
        assert experiment_resources(cfg, entry, scale) == want


def test_experiment_block_overrides_key_by_key():
    cfg = copy.deepcopy(load_global())
    cfg["resources"] = {
        "quick": {"threads": 1, "mem_mb": 100, "runtime": 5},
        "paper": {"threads": 2, "mem_mb": 300, "runtime": 50},
    }
    entry = {"resources": {"paper": {"mem_mb": 999, "gpu": 2}}}
    assert experiment_resources(cfg, entry, "paper") == {"threads": 2, "mem_mb": 999, "runtime": 50, "gpu": 2}
    assert experiment_resources(cfg, entry, "quick") == {"threads": 1, "mem_mb": 100, "runtime": 5, "gpu": 0}
    no_block = {k: v for k, v in cfg.items() if k != "resources"}
    assert experiment_resources(no_block, {}, "paper") == {"threads": 1, "gpu": 0}
    with pytest.raises(ConfigError, match="scale"):
        experiment_resources(cfg, entry, "huge")


def test_paper_scale_experiments_request_a_gpu_where_compute_yaml_finds_one_worth_it_and_the_rest_do_not():
    cfg = load_global()
    gpu = {
        f"{p}.{name}"
        for p in cfg["papers"]
        for name, e in load_paper(cfg, p)["experiments"].items()
        if experiment_resources(cfg, e, "paper", f"{p}.{name}")["gpu"] > 0
    }
    assert gpu == {
        "adaped.table1_cifar10",
        "adaped.table1_cifar100",
        "adaped.table5_cifar10",
        "ppsgd.fig1d_emnist_cnn",
        "fedhdp.femnist",
        # LeNet5 at K = 30 and 50: the step measured 4.2x and 12.9x faster on an H100 (config/compute.yaml gpu_step)
        "adaped.table2_fmnist",
        "adaped.table2_mnist",
        "adaped.table4_femnist",
        "adaped.table4_femnist_sample",
    }
    assert all(
        experiment_resources(cfg, e, "quick")["gpu"] == 0
        for p in cfg["papers"]
        for e in load_paper(cfg, p)["experiments"].values()
    )


@pytest.mark.parametrize(
    "block, key",
    [
        ({"paper": {"mem": 4}}, "resources.paper.mem"),  # unknown key
        ({"paper": {"runtime": "2h"}}, "resources.paper.runtime"),  # minutes as an integer
        ({"paper": {"gpu": -1}}, "resources.paper.gpu"),
        ({"huge": {"threads": 2}}, "resources.huge"),  # unknown scale
    ],
)
def test_schema_rejects_bad_resource_blocks(block, key):
    exp = {"kind": "k", "description": "d", "params": {}, "resources": block}
    doc = {"paper": "x", "title": "t", "experiments": {"e": exp}}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(doc, load_schema("paper.schema.yaml"), source="x.yaml")


def test_global_defaults_must_be_complete():
    cfg = copy.deepcopy(load_global())
    del cfg["resources"]["paper"]["runtime"]
    with pytest.raises(ConfigError, match=r"resources\.paper\.runtime"):
        validate(cfg, load_schema("config.schema.yaml"), source="config.yaml")
