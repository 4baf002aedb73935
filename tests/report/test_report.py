"""Row statuses on hand-made summaries (printed / check rows, scale, calibration), aggregation with standard errors
and loud failures, and the CI check."""

import csv
import json
import math

import pytest
from report_fixture import target as fixture_target

from fedrepro.aggregate import summarize
from fedrepro.cli import main
from fedrepro.config import load_global
from fedrepro.errors import ResultError
from fedrepro.report import verdict as v
from fedrepro.report.cicheck import ci_check, flagged_rows
from fedrepro.report.status import NOT_EVIDENCE, QUICK_GRID, WIRING, Calibration, evaluate


def target(**kw):
    """The shared fixture's target, in Remark 1's experiment with neutral cell labels unless given."""
    return fixture_target(**{"table_row": "r", "table_col": "c", "experiment": "adaped.remark1", **kw})


def summary(mean, std=0.0, n=5, checks=None, scale="paper", deterministic=False):
    return {
        "effective_scale": scale,
        "deterministic": deterministic,
        "seeds": list(range(n)),
        "metrics": {"mse": {"mean": mean, "std": std, "se": None if std is None else std / math.sqrt(n), "n": n}},
        "checks": checks or {},
    }


ENTRY = {"kind": "gaussian_remark1", "params": {}}
OK = {"a": {"passed": True, "detail": "fine"}, "b": {"passed": True, "detail": "fine"}}
BAD = dict(OK, b={"passed": False, "detail": "curve goes up"})


@pytest.mark.parametrize("mean, status", [(10.19, v.REPRODUCED), (10.21, v.DEVIATES)])
def test_printed_number_at_paper_scale(cfg, mean, status):
    r = evaluate(cfg, target(), "paper", summary(mean), ENTRY)
    assert r.status == status and math.isclose(r.diff, mean - 10.0) and r.n == 5


def test_quick_scale_never_gets_a_verdict(cfg):
    for mean in (10.0, 50.0):
        r = evaluate(cfg, target(), "quick", summary(mean, scale="quick"), ENTRY)
        assert r.status == v.NOT_COMPARABLE and r.rebuilt == mean
    claim = target(key="check:a,b", value=None, value_text="", pm=None, pm_text="", pm_reading="")
    r = evaluate(cfg, claim, "quick", summary(0, checks=OK, scale="quick"), ENTRY)
    assert r.status == v.NOT_COMPARABLE and "passes there" in r.reason


def test_printed_claims(cfg):
    t = target(key="check:a,b", value=None, value_text="", pm=None, pm_text="", pm_reading="")
    assert evaluate(cfg, t, "paper", summary(0, checks=OK), ENTRY).status == v.REPRODUCED
    r = evaluate(cfg, t, "paper", summary(0, checks=BAD), ENTRY)
    assert r.status == v.DEVIATES and "curve goes up" in r.reason
    assert evaluate(cfg, t, "paper", summary(0, checks={"a": OK["a"]}), ENTRY).status == v.NOT_RUN


def test_check_rows_pass_or_fail_and_are_never_reproduced(cfg):
    t = target(key="check:a,b", value=None, value_text="", pm=None, pm_text="", pm_reading="", row="check")
    assert evaluate(cfg, t, "quick", summary(0, checks=OK, scale="quick"), ENTRY).status == v.PASSES
    assert evaluate(cfg, t, "paper", summary(0, checks=BAD), ENTRY).status == v.FAILS
    num = target(row="check")
    assert evaluate(cfg, num, "paper", summary(10.0), ENTRY).status == v.PASSES
    assert evaluate(cfg, num, "paper", summary(11.0), ENTRY).status == v.FAILS
    assert (
        evaluate(
            cfg,
            target(row="check", value=None, value_text="", pm=None, pm_text="", pm_reading=""),
            "paper",
            summary(1.0),
            ENTRY,
        ).status
        == v.SHOWN
    )


@pytest.mark.parametrize("mean, std", [(math.nan, 0.0), (math.inf, 0.0), (10.0, math.inf), (None, None)])
@pytest.mark.parametrize("row, scale", [("printed", "paper"), ("check", "paper"), ("printed", "quick")])
def test_a_non_finite_or_undefined_mean_is_invalid_naming_the_summary(cfg, mean, std, row, scale):
    """A NaN / inf mean (hand-edited or corrupted: the code writes null for them) or a metric undefined in every seed
    (mean None, n 0) is never judged: not reproduced, not "not run", and not fitted by a calibration."""
    cal = [Calibration("adaped.remark1", "x", ("X",), None, "...")]
    for t in (target(row=row), target(row=row, value=None, value_text="", pm=None, pm_text="", pm_reading="")):
        r = evaluate(cfg, t, scale, summary(mean, std, scale=scale), ENTRY, cal)
        assert r.status == v.INVALID, (t.value, r.status)
        assert f"remark1/{scale}/summary.json" in r.reason and "'mse'" in r.reason and "\n" not in r.reason


@pytest.mark.parametrize("row", ["printed", "check"])
def test_a_summary_made_from_synthetic_test_data_is_never_judged(cfg, row):
    """A rehearsal's run reads files pinned by FEDREPRO_TEST_PINS (synthetic): its summary records the pins file, and
    every row on it is invalid, whatever its numbers (10.19 reproduces the printed value); without the record it is
    judged as usual."""
    pinned = {**summary(10.19), "inputs": [{"datasets": {}, "partitions": {}, "test_pins": "/tmp/pins.json"}]}
    r = evaluate(cfg, target(row=row), "paper", pinned, ENTRY)
    assert r.status == v.INVALID and "synthetic test data (FEDREPRO_TEST_PINS /tmp/pins.json)" in r.reason
    real = {**summary(10.19), "inputs": [{"datasets": {}, "partitions": {}}]}
    assert evaluate(cfg, target(row=row), "paper", real, ENTRY).status != v.INVALID


def test_a_metric_missing_from_a_paper_scale_summary_is_invalid(cfg):
    s = summary(10.0)
    s["metrics"] = {}
    r = evaluate(cfg, target(), "paper", s, ENTRY)
    assert r.status == v.INVALID and "remark1/paper/summary.json" in r.reason and "missing" in r.reason
    # a quick run may leave out some of the paper's settings: not run, as before (no verdict at quick scale)
    s["effective_scale"] = "quick"
    assert evaluate(cfg, target(), "quick", s, ENTRY).status == v.NOT_RUN


def test_calibration(cfg):
    cal = [Calibration("adaped.remark1", "prior.std", ("FIT",), None, "least squares on FIT's printed gain")]
    fitted = evaluate(cfg, target(id="FIT"), "paper", summary(10.0), ENTRY, cal)
    assert fitted.status == v.FITTED and "prior.std fitted to FIT" in fitted.calibration
    other = evaluate(cfg, target(id="OTHER"), "paper", summary(10.0), ENTRY, cal)
    assert other.status == v.CALIBRATED
    assert evaluate(cfg, target(id="OTHER"), "paper", summary(12.0), ENTRY, cal).status == v.DEVIATES
    # a calibration of another experiment, or one that names the rows it enters, leaves this row alone
    elsewhere = [Calibration("adaped.fig1a", "x", ("FIT",), None, "...")]
    assert evaluate(cfg, target(id="OTHER"), "paper", summary(10.0), ENTRY, elsewhere).status == v.REPRODUCED
    narrow = [Calibration("adaped.remark1", "x", ("FIT",), ("THIRD",), "...")]
    assert evaluate(cfg, target(id="OTHER"), "paper", summary(10.0), ENTRY, narrow).status == v.REPRODUCED
    # ... and one that names rows of other experiments enters them (one accountant reading for several captions)
    wide = [Calibration("adaped.fig1a", "accountant", ("FIT",), ("OTHER",), "...")]
    assert evaluate(cfg, target(id="OTHER"), "paper", summary(10.0), ENTRY, wide).status == v.CALIBRATED


def test_not_run_reasons(cfg):
    t = target()
    r = evaluate(cfg, t, "paper", None, None)
    assert r.status == v.NOT_RUN and "no rule yet" in r.reason
    r = evaluate(cfg, t, "paper", None, ENTRY)
    assert r.status == v.NOT_RUN and "snakemake" in r.command and "remark1/paper/summary.json" in r.command
    r = evaluate(cfg, t, "paper", None, dict(ENTRY, datasets=["election_county_returns"]))
    assert r.status == v.NOT_RUN and "data unavailable offline" in r.reason and "countypres_2000-2020.csv" in r.reason
    assert "fedrepro data fetch election_county_returns" in r.command and "scale=paper" in r.command


def _doc(seed, value, **kw):
    return {
        "experiment": "p.e",
        "kind": "k",
        "scale": "paper",
        "effective_scale": "paper",
        "seed": seed,
        "metrics": {"a": {"b": value}, "flag": True},
        "wall_time_s": 1.0,
        "versions": {},
        "checks": {"c": {"passed": seed != 2, "detail": f"seed {seed}"}},
        **kw,
    }


def test_summarize_mean_std_se_n_and_checks():
    out = summarize([_doc(2, 3.0), _doc(0, 1.0), _doc(1, 2.0)])
    assert out["seeds"] == [0, 1, 2]
    m = out["metrics"]["a.b"]
    assert m["mean"] == 2.0 and m["std"] == 1.0 and math.isclose(m["se"], 1 / math.sqrt(3)) and m["n"] == 3
    assert "flag" not in out["metrics"]
    assert out["checks"]["c"] == {"passed": False, "n_passed": 2, "n": 3, "detail": "seed 2"}


def test_a_nan_seed_fails_the_aggregate_loudly():
    with pytest.raises(ResultError, match=r"a\.b \(undefined in seed 1\)"):
        summarize([_doc(0, 1.0), _doc(1, None), _doc(2, 2.0)])
    with pytest.raises(ResultError, match="undefined in run1"):
        summarize([_doc(0, 1.0), _doc(1, float("nan"))], ["run0", "run1"])
    # undefined in every seed (e.g. epsilon without noise): no mean, no error
    assert summarize([_doc(0, None), _doc(1, None)])["metrics"]["a.b"]["n"] == 0
    # a kind may declare that a metric can be undefined in some seeds
    ok = summarize([_doc(0, 1.0, undefined_ok=["a.*"]), _doc(1, None, undefined_ok=["a.*"])])
    assert ok["metrics"]["a.b"]["n"] == 1


@pytest.mark.parametrize("odd", ["abc", True, [1.0], "1.5"])
def test_a_value_that_is_not_a_number_is_never_dropped_silently(odd):
    """Where another seed has a number, a string, boolean or list stops the aggregate naming the file and the key."""
    with pytest.raises(ResultError, match=r"^run1/metrics.json: metrics\.a\.b is .* not a number, where run0") as err:
        summarize([_doc(0, 1.0), _doc(1, odd), _doc(2, 2.0)], ["run0/metrics.json", "run1/metrics.json", "run2"])
    assert "\n" not in str(err.value)
    # a key that is not a number in any seed is a description the kind records (e.g. the noise's source)
    assert "a.b" not in summarize([_doc(0, "thm5"), _doc(1, "thm5")])["metrics"]


def test_aggregate_lists_what_it_does_not_average(tmp_path, capsys):
    from fedrepro.runio import write_json

    for seed in (0, 1):
        write_json(tmp_path / f"s{seed}" / "metrics.json", dict(_doc(seed, 1.0 + seed), undefined_ok=[]))
    assert main(["aggregate", "--runs", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "x")]) == 0
    assert "not averaged (not a number in any seed): flag" in capsys.readouterr().out


def test_runs_of_different_experiments_or_scales_are_not_averaged():
    with pytest.raises(ResultError, match=r"^run1: scale is 'quick' but run0 has 'paper'"):
        summarize([_doc(0, 1.0), dict(_doc(1, 1.0), scale="quick")], ["run0", "run1"])
    with pytest.raises(ResultError, match=r"^run1: experiment is 'p.f' but run0 has 'p.e'"):
        summarize([_doc(0, 1.0), dict(_doc(1, 1.0), experiment="p.f")], ["run0", "run1"])


def test_a_seed_twice_is_not_averaged():
    with pytest.raises(ResultError, match=r"^run2: seed 1 again \(run1 is seed 1 too\)") as err:
        summarize([_doc(0, 1.0), _doc(1, 1.0), _doc(1, 1.0)], ["run0", "run1", "run2"])
    assert "\n" not in str(err.value)


def test_runs_with_different_parameters_are_not_averaged():
    with pytest.raises(ResultError, match=r"^run1: params_digest bbbb but run0 has aaaa"):
        summarize([_doc(0, 1.0, params_digest="aaaa"), _doc(1, 1.0, params_digest="bbbb")], ["run0", "run1"])


def test_runs_made_from_different_input_data_are_not_averaged():
    a = {"datasets": {"mnist": {"t10k": "11"}}, "partitions": {"mnist_m50": "aa"}}
    b = {"datasets": {"mnist": {"t10k": "11"}}, "partitions": {"mnist_m50": "bb"}}
    with pytest.raises(ResultError, match=r"^run1: made from other input data than run0 \(partition mnist_m50\)"):
        summarize([_doc(0, 1.0, inputs=a), _doc(1, 1.0, inputs=b)], ["run0", "run1"])
    assert summarize([_doc(0, 1.0, inputs=a), _doc(1, 2.0, inputs=a)], ["run0", "run1"])["inputs"] == [a]


def test_runs_without_provenance_still_aggregate(tmp_path):
    """Results written before the provenance was recorded (no params_digest, code_version, inputs) aggregate, alone
    or beside new runs; what they hold (experiment, scale, seed) is still checked."""
    from fedrepro.aggregate import aggregate_runs
    from fedrepro.runio import write_json

    runs = tmp_path / "results" / "p" / "e" / "paper"
    new = {"params_digest": "aaaa", "code_version": "v1", "inputs": {"datasets": {}, "partitions": {"x": "ab"}}}
    for seed, extra in ((0, {}), (1, {}), (2, new)):
        write_json(runs / f"seed{seed}" / "metrics.json", _doc(seed, 1.0 + seed, **extra))
    old = aggregate_runs([runs / "seed0", runs / "seed1"], runs / "summary.json")
    assert old["seeds"] == [0, 1] and "params_digest" not in old and old["code_versions"] == []
    mixed = aggregate_runs([runs / f"seed{s}" for s in (0, 1, 2)], runs / "summary.json")
    assert mixed["params_digest"] == "aaaa" and mixed["code_versions"] == ["v1"]
    assert mixed["inputs"] == [new["inputs"]] and mixed["experiment"] == "p.e" and mixed["scale"] == "paper"


def _placed_runs(tmp_path, docs):
    from fedrepro.runio import write_json

    runs = tmp_path / "results" / "p" / "e" / "paper"
    for seed, doc in docs.items():
        write_json(runs / f"seed{seed}" / "metrics.json", doc)
    return runs


def _aggregate(capsys, *args):
    rc = main(["aggregate", *map(str, args)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_aggregate_refuses_a_run_directory_given_twice(tmp_path, capsys):
    runs = _placed_runs(tmp_path, {0: _doc(0, 1.0), 1: _doc(1, 2.0)})
    err = _aggregate(capsys, "--runs", runs / "seed0", runs / "seed1", runs / "seed0", "--out", runs / "summary.json")
    assert f"{runs / 'seed0' / 'metrics.json'}: given twice in --runs" in err


def test_aggregate_refuses_a_run_copied_into_another_seeds_place(tmp_path, capsys):
    runs = _placed_runs(tmp_path, {0: _doc(1, 1.0), 1: _doc(1, 2.0)})  # seed1's metrics.json copied into seed0
    err = _aggregate(capsys, "--runs", runs / "seed0", runs / "seed1", "--out", runs / "summary.json")
    assert f"{runs / 'seed0' / 'metrics.json'}: records seed 1 (its place says 0)" in err


def test_aggregate_refuses_another_experiments_run_in_its_place(tmp_path, capsys):
    runs = _placed_runs(tmp_path, {0: _doc(0, 1.0), 1: dict(_doc(1, 2.0), experiment="q.f")})
    err = _aggregate(capsys, "--runs", runs / "seed0", runs / "seed1", "--out", runs / "summary.json")
    assert f"{runs / 'seed1' / 'metrics.json'}: records experiment 'q.f' (its place says 'p.e')" in err


def test_aggregate_refuses_to_write_runs_into_another_experiments_summary(tmp_path, capsys):
    runs = _placed_runs(tmp_path, {0: _doc(0, 1.0), 1: _doc(1, 2.0)})
    other = tmp_path / "results" / "p" / "g" / "paper" / "summary.json"
    err = _aggregate(capsys, "--runs", runs / "seed0", runs / "seed1", "--out", other)
    assert "a run of p.e at paper scale" in err and "the summary of p.g at paper scale" in err
    assert not other.exists()


def test_aggregate_refuses_mixed_scales_and_parameters_naming_the_run(tmp_path, capsys):
    runs = _placed_runs(tmp_path, {0: _doc(0, 1.0, params_digest="aaaa"), 1: _doc(1, 2.0, params_digest="bbbb")})
    err = _aggregate(capsys, "--runs", runs / "seed0", runs / "seed1", "--out", runs / "summary.json")
    assert f"{runs / 'seed1' / 'metrics.json'}: params_digest bbbb but" in err
    quick = tmp_path / "elsewhere"  # not laid out as results/<paper>/<exp>/<scale>: only the siblings are compared
    _placed_runs(quick, {0: _doc(0, 1.0), 1: dict(_doc(1, 2.0), scale="quick")})
    runs = quick / "results" / "p" / "e" / "paper"
    (runs / "seed1").rename(quick / "s1")
    err = _aggregate(capsys, "--runs", runs / "seed0", quick / "s1", "--out", quick / "summary.json")
    assert f"{quick / 's1' / 'metrics.json'}: scale is 'quick' but" in err


def test_summary_records_its_provenance(tmp_path):
    out = summarize([_doc(0, 1.0, params_digest="aaaa"), _doc(1, 2.0, params_digest="aaaa")])
    assert (out["experiment"], out["scale"], out["seeds"], out["params_digest"]) == ("p.e", "paper", [0, 1], "aaaa")


def test_the_report_judges_no_summary_of_another_experiment_or_scale(cfg):
    """Another experiment's summary copied over this one's (or another scale's) is invalid, naming the file."""
    ok = dict(summary(10.19), experiment="adaped.remark1", scale="paper")
    assert evaluate(cfg, target(), "paper", ok, ENTRY).status == v.REPRODUCED
    for wrong in (dict(ok, experiment="adaped.fig1a"), dict(ok, scale="quick")):
        r = evaluate(cfg, target(), "paper", wrong, ENTRY)
        assert r.status == v.INVALID and "adaped/remark1/paper/summary.json: records" in r.reason
    # a summary without these fields (hand-made, as in the tests above) is judged on what it holds
    assert evaluate(cfg, target(), "paper", summary(10.19), ENTRY).status == v.REPRODUCED


def test_a_summary_read_for_a_figure_must_be_the_one_of_its_place(tmp_path):
    from fedrepro.runio import read_summary, write_json

    doc = summarize([_doc(0, 1.0), _doc(1, 2.0)])
    here = tmp_path / "results" / "p" / "e" / "paper" / "summary.json"
    write_json(here, doc)
    assert read_summary(here)["experiment"] == "p.e"
    there = tmp_path / "results" / "p" / "f" / "paper" / "summary.json"
    write_json(there, doc)
    with pytest.raises(ResultError, match=r"summary.json: records experiment 'p.e' \(its place says 'p.f'\)"):
        read_summary(there)
    assert read_summary(there, check_place=False)["experiment"] == "p.e"


def _report(tmp_path, rows):
    p = tmp_path / "replication.csv"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(
            fh, fieldnames=["paper", "id", "row", "printed", "rebuilt", "status", "ci", "reason", "evidence"]
        )
        w.writeheader()
        w.writerows(rows)
    return p


def test_ci_check_fails_unless_reproduced_or_passing(tmp_path):
    row = dict(
        paper="adaped",
        id="R1",
        row="printed",
        printed="0.01",
        rebuilt="0.01",
        status="reproduced",
        ci="true",
        reason="",
        evidence="",
    )

    def check(rows):
        return ci_check(_report(tmp_path, rows), [("adaped", "R1")])

    for good in (v.REPRODUCED, v.CALIBRATED, v.PASSES):
        assert check([dict(row, status=good)]) == 0
    for status in (
        v.DEVIATES,
        v.NOT_RUN,
        v.INCONCLUSIVE,
        v.NOT_COMPARABLE,
        v.FITTED,
        v.FAILS,
        v.SHOWN,
        v.INVALID,
        v.STALE,
    ):
        assert check([row, dict(row, id="X", status=status)]) == 1
    # a deviating row not flagged for CI does not fail the check when a forensic conclusion explains it ...
    explained = dict(row, id="D", status="deviates", ci="false", evidence="forensics adaped.f: no reading ...")
    assert check([row, explained]) == 0
    # ... and so does one on its quick grid of fewer readings at the paper's settings ...
    assert check([row, dict(explained, evidence=f"forensics adaped.f {QUICK_GRID}: no reading ...")]) == 0
    # ... but an unexplained deviation, or one whose forensic sweep is not built, not read or a wiring check (the
    # swept experiment at its quick settings), fails it
    for evidence in (
        "",
        "forensics adaped.f: not built (`snakemake ...`)",
        "forensics adaped.f: not read (stale): params changed",
        f"forensics adaped.f {WIRING}: no reading ...",
        f"forensics adaped.f {WIRING}: no reading ... | forensics adaped.g: not built (`snakemake ...`)",
    ):
        bad = dict(explained, evidence=evidence)
        assert check([row, bad]) == 1, evidence
    # listed as unexplained with the readings tried (config/<paper>.yaml `unexplained:`): shown, and accepted
    for evidence in (
        "unexplained: readings tried: clip (quick grid only)",
        f"forensics adaped.f {WIRING}: no reading ... | unexplained: readings tried: clip",
    ):
        assert check([row, dict(explained, evidence=evidence)]) == 0, evidence
    # a deviating check row is not a printed deviation
    assert check([row, dict(explained, row="check", evidence="")]) == 0
    # nothing flagged: refuse rather than pass vacuously
    assert main(["ci-check", "--report", str(_report(tmp_path, [dict(row, ci="false")]))]) == 2


def test_ci_check_fails_when_a_flagged_registry_row_is_missing_from_the_report(tmp_path, capsys):
    """A report that lacks CI rows (cut short, edited, or of other papers) passed as long as its own CI rows did."""
    row = dict(paper="adaped", id="R1", row="printed", printed="1", rebuilt="1", status="reproduced", ci="true")
    row |= dict(reason="", evidence="")
    assert ci_check(_report(tmp_path, [row]), [("adaped", "R1"), ("fedhdp", "T2.eps.p")]) == 1
    assert "fedhdp.T2.eps.p" in capsys.readouterr().out
    # the command line takes the flagged rows from the configured registries: one row of 52 is not enough
    assert main(["ci-check", "--report", str(_report(tmp_path, [row]))]) == 1
    out = capsys.readouterr().out
    flagged = flagged_rows(load_global())
    assert len(flagged) > 40 and f"{len(flagged)} CI row(s) of the registries are missing from the report" in out


def test_run_writes_all_files_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert main(["run", "adaped.fig3b", "--out", str(out), "--seed", "3", "--set", "reps=5"]) == 0
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["metrics"] == mb["metrics"] and ma["seed"] == 3 and ma["deterministic"] is False
    assert ma["accountant"]["name"].startswith("closed form") and ma["wall_time_s"] > 0
    assert (a / "history.parquet").stat().st_size > 0 and "reps: 5" in (a / "config.yaml").read_text()
    assert not list(a.glob(".*tmp"))  # no temporaries left behind
    main(["run", "adaped.fig3b", "--out", str(b), "--seed", "4", "--set", "reps=5"])
    assert json.loads((b / "metrics.json").read_text())["metrics"] != ma["metrics"]


def test_gap_comments_carry_their_key_path(tmp_path):
    from fedrepro.report.gaps import gap_comments

    p = tmp_path / "x.yaml"
    p.write_text(
        "experiments:\n  a:\n    params:\n      m: 3   # GAP: m unstated\n      n: 4\n"
        "  b:\n    params:\n      # GAP: whole block guessed\n      k: 1  # not a gap\n"
    )
    assert gap_comments(p) == [
        ("experiments.a.params.m", "3", "m unstated"),
        ("experiments.b.params", "", "whole block guessed"),
    ]


def test_a_calibration_naming_an_unknown_row_is_a_config_error(cfg, tmp_path):
    import yaml

    from fedrepro.errors import ConfigError
    from fedrepro.report.status import evaluate_paper

    doc = yaml.safe_load(open(cfg["papers"]["adaped"]))
    doc["experiments"]["bernoulli"]["calibration"][0]["fitted_to"] = ["K.bern.nope"]
    (tmp_path / "adaped.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="calibration .*no registry row K.bern.nope"):
        evaluate_paper(dict(cfg, papers=dict(cfg["papers"], adaped=str(tmp_path / "adaped.yaml"))), "adaped")


def test_forensic_evidence_names_the_sweep_and_its_grid(cfg):
    from fedrepro.report.status import forensic_evidence

    doc = {"experiments": {"f": {"kind": "forensic_sweep", "params": {"rows": ["X", "Y"]}}}}
    from fedrepro.report.verdict import RULE_VERSION

    rule = {"verdict_rule": {"mean": float(RULE_VERSION)}}
    concl = {"checks": {"conclusion.X": {"passed": False, "detail": "no reading of the 3 ..."}}, "metrics": rule}
    quick = dict(concl, effective_scale="quick")
    built = {
        "paper": ("paper", dict(concl, effective_scale="paper")),
        "thinner": ("quick", dict(quick, metrics={"swept_at_quick_settings": {"mean": 0.0}, **rule})),
        "wiring": ("quick", dict(quick, metrics={"swept_at_quick_settings": {"mean": 1.0}, **rule})),
        "unsaid": ("quick", quick),  # a forensic kind that does not say: taken as a wiring check
        "none": ("paper", None),
    }
    for case, expect in (
        ("paper", "forensics adaped.f: no reading of the 3 ..."),
        ("thinner", f"forensics adaped.f {QUICK_GRID}: no reading of the 3 ..."),
        # a wiring check's quick conclusion is not shown against a printed value: the row says how to build it
        ("wiring", f"forensics adaped.f {WIRING}: {NOT_EVIDENCE}: `python -m fedrepro campaign adaped.f`"),
        ("unsaid", f"forensics adaped.f {WIRING}: {NOT_EVIDENCE}: `python -m fedrepro campaign adaped.f`"),
    ):
        ev = forensic_evidence(cfg, "adaped", doc, lambda name, c=case: built[c])
        assert ev["X"] == [expect] and ev["Y"][0].startswith("forensics adaped.f: not built")
    assert forensic_evidence(cfg, "adaped", doc, lambda name: built["none"])["X"][0].startswith(
        "forensics adaped.f: not built (`snakemake --cores 2 "
    )


def test_a_sweep_judged_under_an_older_verdict_rule_says_so(cfg):
    """A forensic sweep judges inside its run: one made before the rule it now would be judged under keeps its old
    verdicts, and the report says which rule made them; one made under the current rule says nothing more."""
    from fedrepro.report import verdict as v
    from fedrepro.report.status import forensic_evidence

    doc = {"experiments": {"f": {"kind": "forensic_sweep", "params": {"rows": ["X"]}}}}
    concl = {"checks": {"conclusion.X": {"passed": True, "detail": "reproduced under 2 of 2 readings"}}}
    made = {
        "before": dict(concl, effective_scale="paper", metrics={}),
        "old": dict(concl, effective_scale="paper", metrics={"verdict_rule": {"mean": 1.0}}),
        "now": dict(concl, effective_scale="paper", metrics={"verdict_rule": {"mean": float(v.RULE_VERSION)}}),
    }
    for case in ("before", "old"):
        (text,) = forensic_evidence(cfg, "adaped", doc, lambda name, c=case: ("paper", made[c]))["X"]
        assert text.endswith("until the sweep is run again]") and "verdict rule 1 (t at the smaller" in text
    (text,) = forensic_evidence(cfg, "adaped", doc, lambda name: ("paper", made["now"]))["X"]
    assert text == "forensics adaped.f: reproduced under 2 of 2 readings"


def test_a_sweep_under_an_older_rule_is_judged_again_from_its_history(cfg):
    """Given the registry rows and the sweep's history, the report judges an old-rule sweep's rows again under its
    own rule (fedrepro.audit.forensics.rejudge) and says which verdicts changed; a row with a stopping-time finding
    (not in the history) keeps the old rule's conclusion, flagged; a sweep under the current rule is not read again."""
    import pandas as pd

    from fedrepro.config import resolve_path
    from fedrepro.report import verdict as v
    from fedrepro.report.registry import load_registry
    from fedrepro.report.status import forensic_evidence

    rows = {t.id: t for t in load_registry(resolve_path(cfg["targets"]["adaped"]), "adaped")}
    sweep = {"kind": "forensic_sweep", "params": {"rows": ["R1.ex"], "experiment": "remark1"}}
    doc = {"experiments": {"f": sweep, "remark1": {"kind": "gaussian_remark1"}}}
    old = {
        "checks": {"conclusion.R1.ex": {"passed": False, "detail": "no reading of the 1 (rule 1)"}},
        "effective_scale": "paper",
        "metrics": {"verdict_rule": {"mean": 1.0}},
    }
    h = pd.DataFrame(
        [{"reading": 0, "reading_text": "config", "row": "R1.ex", "rebuilt": 0.0101, "se": 1e-4, "n": 2.0,
          "outcome": v.DEVIATES, "numeric": True, "distance": 2.0, "detail": ""}]
    )  # fmt: skip
    read = []

    def history(name, scale, summary):
        read.append((name, scale))
        return h

    (text,) = forensic_evidence(cfg, "adaped", doc, lambda n: ("paper", old), None, rows, history)["R1.ex"]
    assert read == [("f", "paper")]
    assert text.startswith("forensics adaped.f: reproduced under 1 of 1 readings; closest: the config's reading: ")
    assert f"judged again by the report under its verdict rule {v.RULE_VERSION}" in text
    assert "its run judged under rule 1 (t at the smaller" in text and text.endswith(
        ": config: deviates -> reproduced]"
    )
    stopped = dict(sweep, params=dict(sweep["params"], stopping_time={"rows": {"R1.ex": 1}}))
    doc_stop = {"experiments": {"f": stopped, "remark1": doc["experiments"]["remark1"]}}
    (text,) = forensic_evidence(cfg, "adaped", doc_stop, lambda n: ("paper", old), None, rows, history)["R1.ex"]
    assert text.startswith("forensics adaped.f: no reading of the 1 (rule 1) [judged under the verdict rule 1")
    now = dict(old, metrics={"verdict_rule": {"mean": float(v.RULE_VERSION)}})
    read.clear()
    (text,) = forensic_evidence(cfg, "adaped", doc, lambda n: ("paper", now), None, rows, history)["R1.ex"]
    assert text == "forensics adaped.f: no reading of the 1 (rule 1)" and read == []


def test_rows_listed_as_unexplained_say_the_readings_tried_when_they_deviate(cfg, tmp_path, monkeypatch):
    """config/<paper>.yaml `unexplained:` (glob patterns of registry ids + the readings tried): a deviating row it
    matches gets "unexplained: readings tried: ..." as evidence, a row that does not deviate gets nothing; a pattern
    that matches no row is a ConfigError naming it."""
    import yaml

    from fedrepro.errors import ConfigError
    from fedrepro.report import status

    doc = yaml.safe_load(open(cfg["papers"]["adaped"]))
    known = {"T2.a", "T2.b", "F3b.claim"}
    doc["unexplained"] = [{"rows": ["T2.*"], "tried": "lr in {0.1, 0.05} (paper scale)"}]
    assert status.unexplained_rows(cfg, "adaped", doc, known) == {
        "T2.a": "lr in {0.1, 0.05} (paper scale)",
        "T2.b": "lr in {0.1, 0.05} (paper scale)",
    }
    doc["unexplained"].append({"rows": ["T9.*"], "tried": "x"})
    with pytest.raises(ConfigError, match=r"unexplained\[1\]\.rows: 'T9\.\*' matches no row"):
        status.unexplained_rows(cfg, "adaped", doc, known)
    # through the report: the rows of one experiment made to deviate / reproduce
    doc["unexplained"] = [{"rows": ["R1.*"], "tried": "n in {10, 100} (paper scale)"}]
    path = tmp_path / "adaped.yaml"
    path.write_text(yaml.safe_dump(doc))
    here = dict(cfg, papers=dict(cfg["papers"], adaped=str(path)))
    for outcome, want in ((status.v.DEVIATES, True), (status.v.REPRODUCED, False)):
        monkeypatch.setattr(status, "evaluate", lambda cfg, t, *a, o=outcome, **k: status.Result(t, o, reason=""))
        rows = {r.target.id: r for r in status.evaluate_paper(here, "adaped")}
        got = [e for e in rows["R1.ex"].evidence if e.startswith("unexplained: ")]
        assert got == (["unexplained: readings tried: n in {10, 100} (paper scale)"] if want else [])
