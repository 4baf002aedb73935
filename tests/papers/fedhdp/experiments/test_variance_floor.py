"""The variance floor (fedrepro.papers.fedhdp.experiments.variance_floor): the least expected across-client variance
of measured accuracies is 100 p(1 - p)/n_max, whatever the model (checked by simulation); a printed variance below it
(with the scatter and rounding allowed) is forbidden under the reading, one above it is not explained there."""

from __future__ import annotations

import numpy as np
import pytest

from fedrepro.papers.fedhdp.experiments.variance_floor import conclude, floor_of
from fedrepro.report.registry import Target


def _t(rid, value, tol=0.005, text=None):
    return Target(
        paper="fedhdp", id=rid, artifact="Table 3", table_row="", table_col="", setting="", metric="", unit="",
        value=value, value_text=text or f"{value:g}", pm=None, pm_text="", pm_reading="single", runs=None,
        tolerance=tol, experiment="fedhdp.noniid_mnist", key="k", row="printed", ci=False, needs="", note="",
    )  # fmt: skip


@pytest.mark.parametrize("spread", [0.0, 0.02, 0.08])
def test_the_floor_holds_for_any_spread_of_true_accuracies(spread):
    """1,900 clients with true accuracies around 0.9 (spread 0 to 0.08) measured on 4-6 images each: the variance of
    the measured accuracies (paper's unit) is never below 100 pbar(1 - pbar)/6 beyond its own scatter."""
    rng = np.random.default_rng(0)
    k = 1900
    p = np.clip(rng.normal(0.9, spread, k), 0, 1)
    n = rng.integers(4, 7, k)
    variances = [100 * np.var(rng.binomial(n, p) / n) for _ in range(50)]
    assert np.mean(variances) >= floor_of(100 * p.mean(), 6) * 0.99


def test_a_printed_variance_below_the_floor_is_forbidden_and_one_above_is_not():
    mean = _t("T3.x.Acc_g_p", 88.64)
    low = conclude(_t("T3.x.Acc_g_p.var", 0.39), mean, 6, 4, 100)  # floor 1.68
    assert not low.passed and "needs local test sets of >= 26 images per client" in low.detail
    high = conclude(_t("T3.x.Acc_g_p.var", 2.5), mean, 6, 4, 100)
    assert high.passed and "does not forbid it" in high.detail
    # the allowance: three relative sd of a realized variance over the smallest group (100 clients) and the rounding
    edge = floor_of(88.64, 6) * (1 - 3 * (2 / 100) ** 0.5)
    assert conclude(_t("v.var", edge - 0.01, tol=0.005), mean, 6, 4, 100).passed is False
    assert conclude(_t("v.var", edge - 0.004, tol=0.005), mean, 6, 4, 100).passed is True


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("T3.skewed.NonPrivate+Ditto.Acc_g_np", "is not a variance row with a mean row beside it"),
        ("T3.skewed.NoSuchMethod.Acc_g_np.var", "is no row of config/targets/fedhdp.csv"),
        ("T3.nonIID.NonPrivate+Ditto.Acc_g_np.var", "is a row of fedhdp.noniid_mnist, not of skewed_mnist"),
    ],
)
def test_a_row_that_is_no_variance_row_of_the_experiment_stops_before_any_work(row, says):
    from kinds import call_kind

    from fedrepro.config import load_global
    from fedrepro.errors import ConfigError
    from fedrepro.experiments import RunContext

    ctx = RunContext(exp_id="fedhdp.forensic_skewed_variance_floor", seed=0, config=load_global())  # no partition
    params = {"experiment": "skewed_mnist", "partition": "mnist_fedhdp_skewed", "rows": [row]}
    with pytest.raises(ConfigError, match="params.rows: .*" + says.replace("+", r"\+").replace(".", r"\.")):
        call_kind("fedhdp_variance_floor", params, np.random.default_rng(0), ctx)
