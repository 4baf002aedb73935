"""The forensic sweep (fedrepro.audit.forensics): readings, conclusions per row, resumability, and the report's
link from a deviating row to its forensic conclusion."""

import json

import pytest
from kinds import call_kind

from fedrepro.audit.forensics import readings
from fedrepro.config import load_global
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext

SWEEP = {
    "experiment": "remark1",
    "rows": ["R1.ex"],
    "seeds": [0, 1],
    "grid": {"n": [100, 10], "sigma_theta2": [0.001, 0.1]},
}


def sweep(tmp_path, **params):
    ctx = RunContext("adaped.forensic_test", 0, checkpoint_dir=tmp_path, config=load_global())
    return call_kind("forensic_sweep", {**SWEEP, **params}, None, ctx)


def test_readings_are_every_combination_in_order():
    assert readings({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
    ]


def test_a_reading_that_reproduces_the_row_is_named(tmp_path):
    out = sweep(tmp_path)
    c = out.checks["conclusion.R1.ex"]
    # the grid's (n=100, 0.001) is the config's reading: counted once
    assert c.passed and c.detail.startswith("reproduced under 1 of 4 readings")
    assert "at the config's reading: reproduced" in c.detail
    assert out.metrics["reproducing_readings"]["R1.ex"] == 1 and out.metrics["n_readings"] == 4
    assert set(out.history["outcome"]) == {"reproduced", "deviates"} and len(out.history) == 4


def test_no_reading_reproduces_and_the_closest_is_named(tmp_path):
    out = sweep(tmp_path, grid={"n": [1000], "sigma_theta2": [0.1]}, fixed={"m": 100})
    c = out.checks["conclusion.R1.ex"]
    assert not c.passed and c.detail.startswith("no reading of the 2 in the ranges reproduces it (closest: ")
    assert ", resolved): " in c.detail
    assert not out.checks["joint"].passed


def test_fix_and_paper_issue_are_said(tmp_path):
    out = sweep(tmp_path, implementation_fix={"R1.ex": "eq. (5) weight (test_x)"}, paper_issue={"R1.ex": "Thm 2"})
    d = out.checks["conclusion.R1.ex"].detail
    assert d.startswith("implementation fixed: eq. (5) weight (test_x); ") and d.endswith("; paper issue: Thm 2")


def _digest(**over):
    from fedrepro.config import resolve_experiment
    from fedrepro.provenance import params_digest

    return params_digest(resolve_experiment(load_global(), "adaped.remark1", "paper", over).params)


def test_resumes_from_the_readings_already_run(tmp_path):
    first = sweep(tmp_path)
    cached = sorted(p.name for p in tmp_path.iterdir())
    # 4 readings x 2 seeds (the grid's first, n = 100, 0.001, is the config's reading)
    assert len(cached) == 8 and f"point_{_digest()}_0.json" in cached
    assert f"point_{_digest(n=10, sigma_theta2=0.001)}_1.json" in cached
    point = tmp_path / f"point_{_digest(n=10, sigma_theta2=0.001)}_1.json"
    made = json.loads(point.read_text())["code"]  # the source files the point was made with
    assert "audit/forensics.py" in made
    point.write_text(json.dumps({"metrics": {"ratio": 0.01}, "checks": {}, "code": made}))  # a "cached" result
    again = sweep(tmp_path)
    row = again.history.set_index("reading").loc[2]
    assert row["rebuilt"] != first.history.set_index("reading").loc[2]["rebuilt"]  # the cache was read, not rerun
    # made by other code: one of those files read otherwise then; trained again, and the stale cache replaced
    point.write_text(
        json.dumps({"metrics": {"ratio": 0.01}, "checks": {}, "code": {**made, "audit/forensics.py": "0"}})
    )
    again = sweep(tmp_path)
    assert again.history.set_index("reading").loc[2]["rebuilt"] == first.history.set_index("reading").loc[2]["rebuilt"]
    assert json.loads(point.read_text())["code"] == made


def test_joined_axes_and_a_union_of_grids():
    from fedrepro.audit.forensics import _nest

    grid = [{"n,m": [[100, 10000], [10, 100]]}, {"sigma_theta2": [0.1]}]
    rs = readings(grid)
    assert rs == [{"n,m": [100, 10000]}, {"n,m": [10, 100]}, {"sigma_theta2": [0.1][0]}]
    assert _nest(rs[1]) == {"n": 10, "m": 100} and _nest({"a.b,c": [1, 2]}) == {"a": {"b": 1}, "c": 2}
    with pytest.raises(ConfigError, match="sets 2 parameters together"):
        readings({"n,m": [[100, 10000], 5]})


def test_readings_are_compared_by_value():
    from fedrepro.provenance import params_digest

    assert params_digest({"r": 0, "g": {"mu": [1, 2]}}) == params_digest({"r": 0.0, "g": {"mu": [1.0, 2.0]}})
    assert params_digest({"r": 0}) != params_digest({"r": 0.5})
    assert params_digest({"r": True}) != params_digest({"r": 1})


def test_a_joined_axis_sets_both_parameters(tmp_path):
    out = sweep(tmp_path, grid={"n,sigma_theta2": [[100, 0.001], [10, 0.1]]})
    assert out.metrics["reproducing_readings"]["R1.ex"] == 1  # the config's; (100, 0.001) is the same reading
    assert list(out.history["outcome"]) == ["reproduced", "deviates"]


class _Row:
    id, value, value_text, check_names = "X", None, "", ["c"]


def _pt(passed, value=None, expected=None, tolerance=None):
    return {
        "metrics": {},
        "checks": {
            "c": {
                "passed": passed,
                "detail": f"c={value}",
                "value": value,
                "expected": expected,
                "tolerance": tolerance,
            }
        },
    }


def test_a_check_row_takes_its_distance_from_the_check():
    from fedrepro.audit.forensics import conclusion, judge_row

    near = judge_row(_Row, [_pt(False, 1.3, 1.0, 0.1)], True)
    far = judge_row(_Row, [_pt(False, 2.0, 1.0, 0.1)], True)
    assert near["numeric"] and abs(near["distance"] - 3.0) < 1e-9 and abs(far["distance"] - 10.0) < 1e-9
    # a failed check is at least at its boundary, even if its value sits inside the tolerance
    assert judge_row(_Row, [_pt(False, 1.05, 1.0, 0.1)], True)["distance"] == 1.0
    c = conclusion(_Row, [({}, far), ({"a": 1}, near)], None, None)
    assert not c.passed and "(closest: a=1 at distance 3, resolved): c=1.3 (distance 3" in c.detail
    # pass/fail checks without value/tolerance: no reading is called the closest
    plain = judge_row(_Row, [_pt(False)], True)
    assert not plain["numeric"] and plain["distance"] == 1.0
    c = conclusion(_Row, [({}, plain), ({"a": 1}, plain)], None, None)
    assert "closest" not in c.detail and "at the config's reading: c=None" in c.detail
    holds = judge_row(_Row, [_pt(True)], True)
    c = conclusion(_Row, [({}, plain), ({"a": 1}, holds), ({"a": 2}, holds)], None, None)
    assert c.passed and c.detail.startswith("reproduced under 2 of 3 readings: a=1; a=2 (first: c=None)")


def test_what_a_sweep_reads_is_the_swept_experiment_and_its_rows():
    from fedrepro.audit.forensics import swept_inputs

    got = swept_inputs(SWEEP, load_global(), "adaped.forensic_test")
    assert got["experiment"]["paper"] == {"m": 10000, "n": 100, "sigma_x2": 10.0, "sigma_theta2": 0.001}
    assert set(got["experiment"]) == {"paper", "quick"} and set(got["rows"]) == {"R1.ex"}
    assert got["rows"]["R1.ex"]["value"] == 0.01 and "note" not in got["rows"]["R1.ex"]  # what is judged, only


def test_bad_rows_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no registry row NOPE"):
        sweep(tmp_path, rows=["NOPE"])
    with pytest.raises(ConfigError, match="rows of another experiment"):
        sweep(tmp_path, rows=["K.bern.uniform"])
    with pytest.raises(ConfigError, match="needs the global configuration"):
        call_kind("forensic_sweep", SWEEP, None, RunContext("adaped.f", 0))


def test_the_sweep_figure_draws_every_row(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from fedrepro.plots import get_plot

    out = sweep(tmp_path)
    fig = get_plot("forensic_sweep")({"artifact": "Forensics"}, {}, [out.history])
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "Forensics: R1.ex"


def test_a_sweep_of_many_rows_is_one_panel_a_row_per_line(tmp_path):
    """77 rows as 77 panels made a 28,000-pixel-tall figure; past MAX_PANELS rows each row is a line of one panel,
    its points at (rebuilt - printed) / tol."""
    import matplotlib
    import numpy as np
    import pandas as pd

    matplotlib.use("Agg")
    from fedrepro.plots import get_plot
    from fedrepro.plots.forensics import MAX_PANELS

    h = sweep(tmp_path).history
    many = pd.concat([h.assign(row=f"R{i}", rebuilt=h["rebuilt"] + i) for i in range(MAX_PANELS + 12)])
    fig = get_plot("forensic_sweep")({"artifact": "Forensics"}, {}, [many])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"R{i}" for i in range(MAX_PANELS + 12)]
    assert fig.get_size_inches()[1] * 150 < 6000
    last = many[many["row"] == f"R{MAX_PANELS + 11}"]
    want = sorted(((last["rebuilt"] - last["printed"].astype(float)) / last["tol"].astype(float)).round(9))
    got = sorted(
        round(float(c.get_offsets()[0][0]), 9)
        for c in ax.collections
        if len(c.get_offsets()) and c.get_offsets()[0][1] == MAX_PANELS + 11
    )
    assert len(got) == len(last) > 0 and got == want and np.isfinite(got).all()


def test_a_closest_reading_that_is_undecided_says_so():
    from fedrepro.audit.forensics import conclusion

    row = type("R", (), {"id": "R", "value_text": "8.0"})
    j = {
        "outcome": "inconclusive",
        "rebuilt": 8.08,
        "se": 1.4,
        "n": 2,
        "diff": 0.08,
        "tol": 3.2,
        "distance": 0.03,
        "numeric": True,
        "detail": "rebuild too noisy to judge",
    }
    far = dict(j, outcome="deviates", rebuilt=29.4, diff=21.4, distance=6.7, detail="")
    # App. K's d = 50 local row (issue #30): the nearest reading is within tolerance but unresolved, so the row is
    # inconclusive under it, never "no reading reproduces it"
    c = conclusion(row, [({}, far), ({"a": 1}, dict(j, more_seeds=3))], None, None)
    assert not c.passed and c.detail.startswith("inconclusive under a=1 (2 seeds; run 3 more): 8.08 ± 1.4 (n=2)")
    assert "no reading of the 2 is resolved as reproducing it" in c.detail
    assert c.detail.endswith("closest resolved: the config's reading at distance 6.7")
    assert "reproduces it (closest" not in c.detail
    assert (
        "more seeds cannot resolve it"
        in conclusion(row, [({}, far), ({"a": 1}, dict(j, more_seeds=None))], None, None).detail
    )
    resolved = conclusion(row, [({}, far)], None, None).detail
    assert (
        resolved.startswith(
            "no reading of the 1 in the ranges reproduces it (closest: the config's reading at distance 6.7, resolved)"
        )
        and "(deviates" not in resolved
    )


def test_a_reading_too_noisy_to_judge_is_not_the_closest():
    """FedHDP r = 0: the config's reading collapses in one seed (33 +- 24, tolerance 80: distance 0.7, too noisy),
    the other reading deviates by 0.48 with tolerance 0.25 (distance 1.9): the closest is the one that was judged."""
    from fedrepro.audit.forensics import conclusion

    row = type("R", (), {"id": "R", "value_text": "90.7"})
    noisy = {
        "outcome": "inconclusive",
        "rebuilt": 33.4,
        "se": 23.6,
        "n": 2,
        "diff": -57.3,
        "tol": 80.2,
        "distance": 0.71,
        "numeric": True,
        "detail": "rebuild too noisy to judge",
    }
    judged = dict(noisy, outcome="deviates", rebuilt=90.2, se=0.08, diff=-0.48, tol=0.25, distance=1.9, detail="")
    c = conclusion(row, [({}, noisy), ({"r0_population": "nonprivate"}, judged)], None, None).detail
    assert "(closest: r0_population=nonprivate at distance 1.9, resolved): 90.2" in c and "inconclusive" not in c


@pytest.mark.parametrize(
    "pm, reading, runs, std, n, want",
    [
        (None, "std", None, 1.0, 1, 1),  # one seed: no spread yet, one more first
        (0.0, "std", None, 0.0, 3, 0),  # no spread: nothing to resolve
        (0.0, "std", None, 2.0, 2, 25),  # t(n' - 1) * 2 / sqrt(n') <= 0.8 (10 % of 8.0) -> n' = 27 (0.791), 25 more
        (None, "single", None, 0.2, 2, 2),  # t(n' - 1) * 0.2 * sqrt(1 + 1/n') <= 0.8: 0.99 at n' = 3, 0.71 at 4
        (None, "single", None, 0.1, 5, 0),  # t(4) * 0.1 * sqrt(1.2) = 0.30 <= 0.8: resolved already
        (None, "single", None, 0.5, 2, None),  # 1.96 * 0.5 = 0.98 > 0.8: no number of seeds resolves one printed run
    ],
)
def test_seeds_to_resolve_follows_the_rule(pm, reading, runs, std, n, want):
    from fedrepro.report import verdict as v

    got = v.seeds_to_resolve(8.0, pm, reading, runs, 0.05, std, n)
    assert got == want
    if got and n >= 2:  # that many more seeds of the same spread resolve it under the rule; one fewer does not
        resolved = v.judge(8.0, pm, reading, runs, 0.05, 8.0, std, n + got, False).outcome
        assert resolved == v.REPRODUCED
        if n + got - 1 >= 2:
            assert v.judge(8.0, pm, reading, runs, 0.05, 8.0, std, n + got - 1, False).outcome == v.INCONCLUSIVE


class _Cell:
    id, value, pm, pm_reading, runs, tolerance = "T", 10.42, 0.15, "unknown", None, 0.005


STOP = {"param": "rounds", "step": "round", "value": "mse", "select": "n", "rows": {"T": 10}}


def _traj(*values):
    return {"trajectory": {"10": [[float(i), v] for i, v in enumerate(values)]}}


def test_stopping_time_finds_the_steps_within_tolerance_and_the_crossings():
    from fedrepro.audit.forensics import _spans, stopping_steps, stopping_text

    assert _spans([27.0, 28.0, 29.0, 35.0]) == "27-29, 35"
    hit = stopping_steps(_Cell, [_traj(39.9, 12.0, 10.5, 10.3, 9.0)], STOP, True)
    assert hit["good"] == [2.0, 3.0]  # |10.5 - 10.42| and |10.3 - 10.42| <= 1.96 x 0.15
    jump = stopping_steps(_Cell, [_traj(39.9, 12.0, 9.0, 4.0)], STOP, True)  # passes 10.42 between steps 1 and 2
    assert jump["good"] == [] and jump["crossings"] == [(1.0, 2.0, 12.0, 9.0)]
    never = stopping_steps(_Cell, [_traj(39.9, 30.0, 20.0)], STOP, True)
    assert never == {"good": [], "crossings": []}
    text = stopping_text(STOP, [{}, {"loss": "sum"}, {"loss": "mean"}], [hit, jump, never])
    assert "reproduced at rounds 2-3 under the config" in text
    assert "never within tolerance under loss=sum: passes the printed value between rounds 1-2 (12 -> 9)" in text
    assert text.endswith("never reaches the printed value under loss=mean")


def test_stopping_time_needs_the_rows_cell_in_the_history():
    from fedrepro.audit.forensics import stopping_steps

    with pytest.raises(ConfigError, match="no history rows with n = 10"):
        stopping_steps(_Cell, [{"trajectory": {"20": [[0.0, 1.0]]}}], STOP, True)


def test_a_sweep_reads_the_stopping_time_from_each_runs_history(tmp_path):
    """AdaMix on a small population (m = 60, 12 rounds): the row's conclusion starts with the stopping-time finding
    and a joint check says whether one T gives all rows."""
    ctx = RunContext("adaped.forensic_test", 0, checkpoint_dir=tmp_path, config=load_global())
    p = {
        "experiment": "table3",
        "rows": ["T3.r2.c1", "T3.r2.c2"],
        "seeds": [0, 1],
        "grid": {"loss": ["sum"]},
        "fixed": {"m": 60, "rounds": 12, "variants": []},
        "stopping_time": {**STOP, "value": "mse_adamix", "rows": {"T3.r2.c1": 10, "T3.r2.c2": 20}},
    }
    out = call_kind("forensic_sweep", p, None, ctx)
    for row in ("T3.r2.c1", "T3.r2.c2"):
        assert out.checks[f"conclusion.{row}"].detail.startswith(
            "stopping time rounds (unstated; every round of each reading's run): "
        )
        assert "; at rounds as configured: " in out.checks[f"conclusion.{row}"].detail
    assert "T3.r2.c1, T3.r2.c2" in out.checks["stopping_time.joint"].detail
    assert set(out.metrics["stopping_steps"]) == {"T3.r2.c1", "T3.r2.c2"}
    with pytest.raises(ConfigError, match="stopping_time.rows"):
        call_kind("forensic_sweep", {**p, "rows": ["T3.r2.c1"]}, None, ctx)


def test_the_config_reading_can_be_read_from_the_swept_experiments_runs(tmp_path):
    """``config_reading_from_runs``: the config's reading comes from the swept experiment's own run with the config's
    parameters (its metric edited here, so the sweep must show the edit), the other readings are trained; with no such
    run (none, or one made with other parameters) the sweep stops with one line naming what to build."""
    from fedrepro.config import resolve_experiment
    from fedrepro.experiments import get_kind
    from fedrepro.runio import read_metrics, write_run
    from fedrepro.seeding import rng_for

    cfg = {**load_global(), "results_dir": str(tmp_path / "results")}
    ctx = RunContext("adaped.forensic_test", 0, checkpoint_dir=tmp_path / "ckpt", config=cfg)
    params = {**SWEEP, "config_reading_from_runs": True, "grid": {"n": [10]}, "seeds": [0]}
    with pytest.raises(ConfigError, match="config_reading_from_runs needs a run of adaped.remark1 seed 0 .* build it"):
        call_kind("forensic_sweep", params, None, ctx)
    exp = resolve_experiment(cfg, "adaped.remark1", "paper")
    run_dir = tmp_path / "results" / "adaped" / "remark1" / "paper" / "seed0"
    out = get_kind(exp.kind).fn(exp.params, rng_for(exp.id, 0), RunContext(exp.id, 0))
    trained = sweep(tmp_path / "trained", grid={"n": [10]}, seeds=[0]).history.set_index("reading")
    out.metrics["ratio"] = 0.5  # edited after the run: what a read run shows and a trained one cannot
    write_run(run_dir, exp, 0, out, 1.0)
    assert read_metrics(run_dir)["metrics"]["ratio"] == 0.5
    got = call_kind("forensic_sweep", params, None, ctx).history.set_index("reading")
    assert got.loc[0, "rebuilt"] != trained.loc[0, "rebuilt"]
    assert got.loc[1, "rebuilt"] == pytest.approx(trained.loc[1, "rebuilt"])  # the other reading is trained
    other = resolve_experiment(cfg, "adaped.remark1", "paper", {"m": 7})
    write_run(run_dir, other, 0, out, 1.0)  # the run is now one of other parameters: not the config's reading
    with pytest.raises(ConfigError, match=r"needs a run of adaped.remark1 seed 0 .*seed0: other parameters\)"):
        call_kind("forensic_sweep", params, None, ctx)


def test_the_config_readings_run_has_the_experiments_own_only_methods():
    """A sweep that trains some methods (``fixed: {only_methods: ...}``) reads the config's reading from the swept
    experiment's full run: null where the kind defaults only_methods (FedHDP), absent where it states no default
    (AdaPeD: runs made before the option keep their digest); every other parameter is the reading's."""
    from fedrepro.audit.forensics import run_params

    reading = {"epochs": 50, "only_methods": ["dp_adaped"]}
    assert run_params(reading, {"epochs": 50}) == {"epochs": 50}
    assert run_params(reading, {"epochs": 50, "only_methods": None}) == {"epochs": 50, "only_methods": None}
    assert run_params({"epochs": 1}, {"epochs": 50}) == {"epochs": 1}


def test_a_sweep_reading_runs_declares_them_to_the_workflow():
    from fedrepro.experiments import get_kind

    reads = get_kind("forensic_sweep").reads_runs
    assert reads({"experiment": "noniid_mnist", "config_reading_from_runs": True}) == "noniid_mnist"
    assert (
        reads({"experiment": "noniid_mnist", "fixed": {"reevaluate": {"test_reading": "partition"}}}) == "noniid_mnist"
    )
    assert reads({"experiment": "noniid_mnist", "config_reading_from_runs": False}) is None
    assert reads({"experiment": "noniid_mnist"}) is None


def test_only_a_sweep_that_trains_nothing_follows_the_read_experiments_scale():
    """A re-evaluation runs at the scale its archived runs were made at; a sweep that trains other readings beside
    the config's read one keeps its own default scale (else the default run would train it at paper scale)."""
    from fedrepro.experiments import get_kind

    kind = get_kind("forensic_sweep")
    assert kind.follows_read_scale({"experiment": "e", "fixed": {"reevaluate": {"test_reading": "partition"}}})
    assert not kind.follows_read_scale({"experiment": "e", "config_reading_from_runs": True})
    assert not kind.follows_read_scale({"experiment": "e"})


def test_a_sweep_says_whether_it_ran_the_swept_experiment_at_its_quick_settings():
    """FedHDP's non-IID sweeps' quick grids run noniid_mnist for 5 rounds of 1 local epoch (its quick values): a
    wiring check; PPSGD's Fig. 1a sweep's quick grid thins its readings, seeds and panels but runs each at the paper's
    settings; at paper scale neither is at quick settings."""
    from fedrepro.audit.forensics import quick_settings
    from fedrepro.config import deep_merge, resolve_experiment

    cfg = load_global()

    def swept(sweep_id, scale):
        sweep = resolve_experiment(cfg, sweep_id, scale).params
        exp_id = f"{sweep_id.split('.')[0]}.{sweep['experiment']}"
        return quick_settings(cfg, exp_id, [resolve_experiment(cfg, exp_id, "paper", deep_merge(sweep["fixed"], {}))])

    assert swept("fedhdp.forensic_noniid_clip", "quick") == ["eval_every", "local_epochs", "local_readings", "rounds"]
    assert swept("fedhdp.forensic_noniid_clip", "paper") == []
    assert swept("ppsgd.forensic_fig1a", "quick") == []


def _kind_calling(fn):
    """forensics' get_kind with every kind's function replaced by fn(kind, params, rng, ctx), in this process only."""
    import dataclasses

    from fedrepro.experiments import get_kind

    def patched(name, source="kind"):
        real = get_kind(name, source)
        return dataclasses.replace(real, fn=lambda p, rng, ctx: fn(real, p, rng, ctx))

    return patched


def test_a_point_keeps_round_checkpoints_of_its_own_until_its_result_is_cached(tmp_path, monkeypatch):
    import fedrepro.audit.forensics as forensics

    given = []

    def recorded(real, p, rng, ctx):
        given.append(ctx.checkpoint_dir)
        ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (ctx.checkpoint_dir / "round.pt").write_bytes(b"")  # what a training kind leaves there until it ends
        return real.fn(p, rng, ctx)

    monkeypatch.setattr(forensics, "get_kind", _kind_calling(recorded))
    monkeypatch.delenv("FEDREPRO_THREADS", raising=False)
    sweep(tmp_path)
    # one folder per point, named as its cached result, and gone once that result is written
    assert sorted(d.name for d in given) == sorted(p.stem for p in tmp_path.glob("point_*.json"))
    assert len(given) == 8 and all(d.parent == tmp_path and not d.exists() for d in given)


def test_with_two_threads_the_points_train_in_two_processes_with_the_same_results(tmp_path, monkeypatch, capsys):
    import fedrepro.audit.forensics as forensics

    serial = sweep(tmp_path / "serial").history

    def not_here(real, p, rng, ctx):
        raise AssertionError("a point was trained in the sweep's own process")

    monkeypatch.setattr(forensics, "get_kind", _kind_calling(not_here))  # the spawned workers import their own
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    parallel = sweep(tmp_path / "parallel").history
    assert "8 points in 2 processes" in capsys.readouterr().out
    assert parallel.equals(serial)


def test_a_metric_the_run_left_undefined_is_judged_invalid_and_a_missing_one_is_a_config_error():
    """A re-evaluation of a run that kept no personal-model accuracies leaves those columns undefined (None): the row
    is invalid under that reading and never the closest; a row naming a metric no point has is a wrong registry
    row."""
    from fedrepro.audit.forensics import judge_row

    class Row:
        id, value, pm, pm_reading, runs, tolerance, key, check_names = "R", 99.9, None, "single", None, 0.005, "m", None

    j = judge_row(Row, [{"metrics": {"m": None}}, {"metrics": {"m": 99.8}}], False)
    assert j["outcome"] == "invalid" and j["distance"] == float("inf")
    assert judge_row(Row, [{"metrics": {"m": 99.9}}, {"metrics": {"m": 99.8}}], False)["outcome"] != "invalid"
    with pytest.raises(ConfigError, match="produces no metric 'm'"):
        judge_row(Row, [{"metrics": {}}, {"metrics": {"m": 99.8}}], False)


def test_readings_can_be_given_short_names(tmp_path):
    """A reading that sets many parameters at once (six methods' flags) is hard to read by its parameters: named, the
    conclusions and the history say its name; the history keeps its parameters beside it."""
    grid = {"n,sigma_theta2": [[1000, 0.1], [10, 0.001]]}
    out = sweep(tmp_path, grid=grid, reading_names=["big n, wide prior", "small n"])
    assert list(out.history["reading_text"].unique()) == ["config", "big n, wide prior", "small n"]
    assert "n,sigma_theta2=" not in out.checks["conclusion.R1.ex"].detail
    assert set(out.history["axis.n,sigma_theta2"].dropna()) == {"[1000, 0.1]", "[10, 0.001]"}
    with pytest.raises(ConfigError, match=r"params.reading_names: 1 names for the grid's 2 readings"):
        sweep(tmp_path, grid=grid, reading_names=["one"])


def test_a_resumed_sweep_counts_the_compute_of_the_attempt_that_made_its_cached_points(tmp_path, monkeypatch):
    """Each point's cache says which attempt made it and the job's compute then; a later attempt that reads it
    resumes the job's clock from there, as a round checkpoint does, and this attempt's own points add nothing twice."""
    from fedrepro.runio import RunClock

    def attempt(clock):
        ctx = RunContext("adaped.forensic_test", 0, checkpoint_dir=tmp_path, clock=clock, config=load_global())
        return call_kind("forensic_sweep", SWEEP, None, ctx)

    for threads in ("1", "2"):  # points made here, or by workers with copies of the job's clock
        monkeypatch.setenv("FEDREPRO_THREADS", threads)
        for f in tmp_path.glob("point_*.json"):
            f.unlink()
        first = RunClock()
        attempt(first)
        assert not first.resumed  # its own points, read back from the cache, are not an earlier attempt's
        made = [json.loads(f.read_text())["made"] for f in tmp_path.glob("point_*.json")]
        assert len(made) == 8 and {m["attempt"] for m in made} == {first.attempt}
        second = RunClock()
        attempt(second)
        assert second.resumed and second.before_s == max(m["elapsed_s"] for m in made)


def _registry_rows():
    from fedrepro.config import resolve_path
    from fedrepro.report.registry import load_registry

    cfg = load_global()
    return {t.id: t for t in load_registry(resolve_path(cfg["targets"]["adaped"]), "adaped")}


def test_a_sweep_judged_again_from_its_history_gives_its_own_conclusions(tmp_path):
    """fedrepro.audit.forensics.rejudge rebuilds every conclusion of a sweep judged under the current rule from what
    its history records (mean, se, n) alone: the same text, no verdict changed."""
    from fedrepro.audit.forensics import rejudge

    for params in ({}, {"fixed": {"m": 100}, "implementation_fix": {"R1.ex": "eq. (5) (test_x)"}}):
        out = sweep(tmp_path / str(len(params)), **params)
        again = rejudge(out.history, _registry_rows(), True, params.get("implementation_fix"))
        (c, changes) = again["R1.ex"]
        assert c.detail == out.checks["conclusion.R1.ex"].detail and c.passed == out.checks["conclusion.R1.ex"].passed
        assert changes == []


def test_judging_again_judges_the_recorded_values_not_the_recorded_verdicts(tmp_path):
    """A reading whose recorded mean is moved far from the printed value deviates when judged again, whatever its
    run recorded, and the change is named; a row of unknown id is left out."""
    from fedrepro.audit.forensics import rejudge

    out = sweep(tmp_path)
    h = out.history.copy()
    good = h.index[h["outcome"] == "reproduced"]
    h.loc[good, "rebuilt"] = 0.5
    (c, changes) = rejudge(h, _registry_rows(), True)["R1.ex"]
    assert not c.passed and c.detail.startswith("no reading of the 4 in the ranges reproduces it")
    assert changes == ["config: reproduced -> deviates"]
    h.loc[:, "row"] = "nope"
    assert rejudge(h, _registry_rows(), True) == {}


def test_judging_again_a_row_printed_with_a_standard_error_follows_the_rule_now():
    """Table 2's DP-AdaPeD at eps = 3.35 (93.32 ± 1.18) against two seeds 99.08 ± 0.10: under rule 1 (Hsu's t at
    one df) its run called it reproduced with a tolerance of 15; judged again it deviates (tolerance ~2.6). A row
    judged by checks keeps its recorded outcome."""
    import pandas as pd

    from fedrepro.audit.forensics import rejudge
    from fedrepro.report import verdict as v

    h = pd.DataFrame(
        [
            {"reading": 0, "reading_text": "config", "row": "T2.r2.c1", "rebuilt": 99.075, "se": 0.1017, "n": 2.0,
             "outcome": v.REPRODUCED, "numeric": True, "distance": 0.38, "detail": "", "axis.c": None},
            {"reading": 1, "reading_text": "c=1.0", "row": "T2.r2.c1", "rebuilt": 92.9, "se": 0.2, "n": 2.0,
             "outcome": v.REPRODUCED, "numeric": True, "distance": 0.03, "detail": "", "axis.c": "1.0"},
            {"reading": 0, "reading_text": "config", "row": "Q2", "rebuilt": None, "se": None, "n": None,
             "outcome": v.DEVIATES, "numeric": False, "distance": 1.0, "detail": "psi stuck", "axis.c": None},
        ]
    )  # fmt: skip
    rows = _registry_rows()
    rows["Q2"] = type("Q", (), {"id": "Q2", "value_text": "", "check_names": ["q"]})
    again = rejudge(h, rows, False)
    (c, changes) = again["T2.r2.c1"]
    assert changes == ["config: reproduced -> deviates"]
    assert c.passed and c.detail.startswith("reproduced under 1 of 2 readings; closest: c=1.0: 92.9")
    assert "at the config's reading: deviates" in c.detail
    assert again["Q2"][1] == [] and not again["Q2"][0].passed and "psi stuck" in again["Q2"][0].detail
