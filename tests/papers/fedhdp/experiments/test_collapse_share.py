"""FedHDP's r = 0 collapse forensics (fedrepro.papers.fedhdp.experiments.collapse_share): under a global model that
answers the opt-out digit, each printed private-group number bounds from below how many private clients hold that
digit, whatever the accuracies of those clients (checked by simulation); a partition with fewer is forbidden, one with
enough is not, and a cell whose Acc_g is not the digit's share is not judged."""

from __future__ import annotations

import numpy as np
import pytest
from learning_helpers import write_digit_manifest

from fedrepro.config import load_global
from fedrepro.experiments import RunContext
from fedrepro.papers.fedhdp.experiments.collapse_share import (
    conclude,
    fedhdp_collapse_share,
    least_holding,
    least_share,
    value_at,
)
from fedrepro.report.registry import Target


def _t(rid, value, tol=0.05, key="lam0.005.fedhdp_r_0.acc_g_p"):
    return Target(
        paper="fedhdp", id=rid, artifact="Table 9", table_row="", table_col="", setting="", metric="", unit="",
        value=value, value_text=f"{value:g}", pm=None, pm_text="", pm_reading="single", runs=None, tolerance=tol,
        experiment="fedhdp.skewed_mnist", key=key, row="printed", ci=False, needs="", note="",
    )  # fmt: skip


def _part(holding, n_private=1900):
    return {"digit": 7, "n_clients": n_private + 100, "n_private": n_private, "n_nonprivate": 100,
            "private_holding": holding, "test_images": 10000, "test_share": 0.1028, "min_test_images": 4}  # fmt: skip


def test_the_bounds_of_table_9s_r0_cell():
    """7.1 (6.5), Δ 92.9 beside Acc_np 100: at the low edges of their rounding, less the 10 stray images / 4."""
    assert least_holding(least_share("acc_g_p", 7.1, 0.05), 1900, 10 / 4) == 132  # ceil(1900 x 0.0705 - 2.5)
    assert least_holding(least_share("acc_g_p_var", 6.5, 0.05), 1900, 10 / 4) == 130
    assert least_holding(least_share("d_g", 92.9, 0.05, (100.0, 0.5)), 1900, 10 / 4) == 122
    with pytest.raises(ValueError, match="no collapse relation"):
        least_share("acc_g", 10.27, 0.005)


@pytest.mark.parametrize("holding", [100, 135, 300])
def test_the_bounds_hold_for_any_accuracies_of_the_holders(holding):
    """Private clients of the digit score anything in [0, 1] (a model answering it on most of their images), the
    others 0 but for a few stray images: the mean and the variance never give a count above the true one."""
    rng = np.random.default_rng(holding)
    for _ in range(200):
        acc = np.zeros(1900)
        acc[:holding] = rng.uniform(0.5, 1.0, holding) if rng.random() < 0.5 else 1.0
        stray = rng.choice(np.arange(holding, 1900), 10, replace=False)
        acc[stray] += rng.integers(0, 2, 10) / 4  # at most 10 images answered right, 1/4 of a client each
        mean, var = 100 * acc.mean(), 100 * acc.var()
        assert least_holding(least_share("acc_g_p", round(mean, 1), 0.05), 1900, 10 / 4) <= holding
        assert least_holding(least_share("acc_g_p_var", round(var, 1), 0.05), 1900, 10 / 4) <= holding
        assert least_holding(least_share("d_g", round(100 - mean, 1), 0.05, (100.0, 0.5)), 1900, 10 / 4) <= holding


def test_a_partition_with_too_few_holders_is_forbidden_and_one_with_enough_is_not():
    acc_g = _t("T9.x.Acc_g", 10.27, tol=0.005, key="lam0.005.fedhdp_r_0.acc_g")
    row = _t("T9.x.Acc_g_p", 7.1)
    check, least = conclude(row, "acc_g_p", acc_g, None, _part(100), 0.1)
    assert not check.passed and least == 132
    assert check.detail.startswith("the config's partition cannot make it: the printed 7.1 needs >= 132 of the 1900")
    assert "the partition has 100, which makes 5.263 at any seed" in check.detail
    assert check.expected == pytest.approx(value_at("acc_g_p", 100 / 1900, 100.0))
    enough, _ = conclude(row, "acc_g_p", acc_g, None, _part(134), 0.1)
    assert enough.passed and enough.detail.startswith("not forbidden")
    # no collapse: a cell whose Acc_g is far from the digit's share of the test set is not judged
    other, least = conclude(row, "acc_g_p", _t("T9.x.Acc_g", 87.11, key="k.acc_g"), None, _part(100), 0.1)
    assert other.passed and least is None and other.detail.startswith("not judged: the premise does not hold")


def test_the_kind_reads_the_partitions_digits_and_the_registry(tmp_path):
    part = write_digit_manifest(tmp_path / "p", sevens_private=100, opt_out=100, per_other_digit=200)
    ctx = RunContext("fedhdp.forensic_skewed_r0_share", 0, partitions={"p": part}, config=load_global())
    rows = ["T9.lam0.005.FedHDP_r=0.Acc_g_p", "T9.lam0.005.FedHDP_r=0.Acc_g_p.var", "T9.lam0.25.FedHDP_r=0.D_l"]
    # this partition's sevens are 10.00% of its test images: the printed 10.27 is a collapse only within 0.5 points
    p = {"experiment": "skewed_mnist", "partition": "p", "rows": rows, "collapse_tol": 0.1}
    out = fedhdp_collapse_share(p, None, ctx)
    assert out.metrics["partition"]["private_holding"] == 100 and out.metrics["partition"]["n_private"] == 1900
    assert out.metrics["partition"]["test_share"] == pytest.approx(0.1)  # 200 x 5 of 2,000 x 5 test images
    assert all(c.passed and "premise does not hold" in c.detail for c in out.checks.values())
    out = fedhdp_collapse_share({**p, "collapse_tol": 0.5}, None, ctx)
    assert not any(c.passed for c in out.checks.values())
    # 50 stray images over >= 5 test images a client: 10 clients' worth off each bound
    assert out.metrics["needs_private_holding"] == {rows[0]: 124, rows[1]: 122, rows[2]: 115}
