"""The forensic sweep (fedrepro.experiments.forensics): readings, conclusions per row, resumability, and the report's
link from a deviating row to its forensic conclusion."""

import pytest

from fedrepro.config import load_global
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext, get_kind
from fedrepro.experiments.forensics import readings

SWEEP = {"experiment": "remark1", "rows": ["R1.ex"], "seeds": [0, 1],
         "grid": {"n": [100, 10], "sigma_theta2": [0.001, 0.1]}}


def sweep(tmp_path, **params):
    ctx = RunContext("adaped.forensic_test", 0, checkpoint_dir=tmp_path, config=load_global())
    return get_kind("forensic_sweep").fn({**SWEEP, **params}, None, ctx)


def test_readings_are_every_combination_in_order():
    assert readings({"a": [1, 2], "b": ["x", "y"]}) == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"},
                                                          {"a": 2, "b": "y"}]


def test_a_reading_that_reproduces_the_row_is_named(tmp_path):
    out = sweep(tmp_path)
    c = out.checks["conclusion.R1.ex"]
    assert c.passed and c.detail.startswith("reproduced under 2 of 5 readings")   # the config's and n=100, 0.001
    assert "at the config's reading: reproduced" in c.detail
    assert out.metrics["reproducing_readings"]["R1.ex"] == 2 and out.metrics["n_readings"] == 5
    assert set(out.history["outcome"]) == {"reproduced", "deviates"} and len(out.history) == 5


def test_no_reading_reproduces_and_the_closest_is_named(tmp_path):
    out = sweep(tmp_path, grid={"n": [1000], "sigma_theta2": [0.1]}, fixed={"m": 100})
    c = out.checks["conclusion.R1.ex"]
    assert not c.passed and c.detail.startswith("no reading of the 2 in the ranges reproduces it; closest: ")
    assert not out.checks["joint"].passed


def test_fix_and_paper_issue_are_said(tmp_path):
    out = sweep(tmp_path, implementation_fix={"R1.ex": "eq. (5) weight (test_x)"}, paper_issue={"R1.ex": "Thm 2"})
    d = out.checks["conclusion.R1.ex"].detail
    assert d.startswith("implementation fixed: eq. (5) weight (test_x); ") and d.endswith("; paper issue: Thm 2")


def test_resumes_from_the_readings_already_run(tmp_path):
    first = sweep(tmp_path)
    cached = sorted(p.name for p in tmp_path.iterdir())
    assert len(cached) == 10   # 5 readings x 2 seeds
    (tmp_path / "point_3_1.json").write_text('{"metrics": {"ratio": 0.01}, "checks": {}}')   # a "cached" result
    again = sweep(tmp_path)
    row = again.history.set_index("reading").loc[3]
    assert row["rebuilt"] != first.history.set_index("reading").loc[3]["rebuilt"]   # the cache was read, not rerun


def test_bad_rows_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no registry row NOPE"):
        sweep(tmp_path, rows=["NOPE"])
    with pytest.raises(ConfigError, match="rows of another experiment"):
        sweep(tmp_path, rows=["K.bern.uniform"])
    with pytest.raises(ConfigError, match="needs the global configuration"):
        get_kind("forensic_sweep").fn(SWEEP, None, RunContext("adaped.f", 0))


def test_the_sweep_figure_draws_every_row(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from fedrepro.plots import get_plot

    out = sweep(tmp_path)
    fig = get_plot("forensic_sweep")({"artifact": "Forensics"}, {}, [out.history])
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "Forensics: R1.ex"
