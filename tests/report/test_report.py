"""Target status, tolerance rule, aggregation and the CI check, on hand-made summaries."""

import csv
import json
import math

import pytest

from fedrepro.aggregate import summarize
from fedrepro.cli import main
from fedrepro.report.registry import Target, effective_tolerance
from fedrepro.report.status import DEVIATES, NOT_RUN, REFERENCE, REPRODUCED, evaluate


def target(**kw):
    base = dict(paper="adaped", id="X", artifact="Table 3", table_row="r", table_col="c", setting="", metric="MSE",
                unit="", value=10.0, value_text="10.00", pm=0.1, pm_text="0.10", tolerance=0.005,
                experiment="adaped.remark1", key="mse", ci=True, needs="", note="")
    base.update(kw)
    return Target(**base)


def summary(mean, std=0.0, checks=None):
    return {"effective_scale": "paper", "metrics": {"mse": {"mean": mean, "std": std, "n": 3, "values": []}},
            "checks": checks or {}}


ENTRY = {"kind": "gaussian_remark1", "params": {}}


def test_tolerance_rule():
    t = target()
    assert math.isclose(effective_tolerance(t, 0.0), 0.2)
    assert math.isclose(effective_tolerance(t, 0.3), 2 * math.sqrt(0.1**2 + 0.3**2))
    assert effective_tolerance(target(pm=None), 0.0) == 0.005  # never below the printed rounding


@pytest.mark.parametrize("mean, std, status", [(10.19, 0.0, REPRODUCED), (10.21, 0.0, DEVIATES),
                                               (9.5, 0.2, DEVIATES), (9.5, 0.3, REPRODUCED)])
def test_numeric_status(cfg, mean, std, status):
    r = evaluate(cfg, target(), "quick", summary(mean, std), ENTRY)
    assert r.status == status
    assert math.isclose(r.diff, mean - 10.0)


def test_check_rows(cfg):
    t = target(key="check:a,b", value=None, value_text="")
    ok = {"a": {"passed": True, "detail": "fine"}, "b": {"passed": True, "detail": "fine"}}
    assert evaluate(cfg, t, "quick", summary(0, checks=ok), ENTRY).status == REPRODUCED
    bad = dict(ok, b={"passed": False, "detail": "curve goes up"})
    r = evaluate(cfg, t, "quick", summary(0, checks=bad), ENTRY)
    assert r.status == DEVIATES and "curve goes up" in r.reason
    assert evaluate(cfg, t, "quick", summary(0, checks={"a": ok["a"]}), ENTRY).status == NOT_RUN


def test_not_run_reasons(cfg):
    t = target()
    r = evaluate(cfg, t, "quick", None, None)
    assert r.status == NOT_RUN and "no rule yet" in r.reason
    r = evaluate(cfg, t, "quick", None, ENTRY)
    assert r.status == NOT_RUN and "snakemake" in r.command and "remark1/quick/summary.json" in r.command
    r = evaluate(cfg, t, "quick", None, dict(ENTRY, datasets=["election_county_returns"]))
    assert r.status == NOT_RUN and "data unavailable offline" in r.reason and "countypres_2000-2020.csv" in r.reason
    assert "fedrepro data fetch election_county_returns" in r.command and "scale=paper" in r.command
    assert evaluate(cfg, target(value=None, value_text=""), "quick", summary(1.0), ENTRY).status == REFERENCE


def test_summarize_mean_std_and_checks():
    docs = [{"experiment": "p.e", "kind": "k", "scale": "quick", "effective_scale": "quick", "seed": s,
             "metrics": {"a": {"b": v}, "flag": True}, "wall_time_s": 1.0, "versions": {},
             "checks": {"c": {"passed": s != 2, "detail": f"seed {s}"}}} for s, v in [(2, 3.0), (0, 1.0), (1, 2.0)]]
    out = summarize(docs)
    assert out["seeds"] == [0, 1, 2]
    assert out["metrics"]["a.b"]["mean"] == 2.0 and out["metrics"]["a.b"]["std"] == 1.0
    assert "flag" not in out["metrics"]
    assert out["checks"]["c"] == {"passed": False, "n_passed": 2, "n": 3, "detail": "seed 2"}


def _report(tmp_path, rows):
    p = tmp_path / "replication.csv"
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["paper", "id", "printed", "rebuilt", "status", "ci", "reason"])
        w.writeheader()
        w.writerows(rows)
    return p


def test_ci_check_fails_on_deviation_or_not_built(tmp_path):
    row = dict(paper="adaped", id="R1", printed="0.01", rebuilt="0.01", status="reproduced", ci="true", reason="")
    assert main(["ci-check", "--report", str(_report(tmp_path, [row]))]) == 0
    for status in ("deviates", "not run"):
        assert main(["ci-check", "--report", str(_report(tmp_path, [row, dict(row, id="X", status=status)]))]) == 1
    # a deviating target not flagged for CI does not fail the check
    assert main(["ci-check", "--report", str(_report(tmp_path, [row, dict(row, status="deviates", ci="false")]))]) == 0
    # nothing flagged: refuse rather than pass vacuously
    assert main(["ci-check", "--report", str(_report(tmp_path, [dict(row, ci="false")]))]) == 2


def test_run_writes_all_files_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert main(["run", "adaped.fig3b", "--out", str(out), "--seed", "3", "--set", "reps=5"]) == 0
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["metrics"] == mb["metrics"] and ma["seed"] == 3 and ma["effective_scale"] == "quick"
    assert ma["accountant"]["name"].startswith("closed form") and ma["wall_time_s"] > 0
    assert (a / "history.parquet").stat().st_size > 0 and "reps: 5" in (a / "config.yaml").read_text()
    assert not list(a.glob(".*tmp"))  # no temporaries left behind
    main(["run", "adaped.fig3b", "--out", str(b), "--seed", "4", "--set", "reps=5"])
    assert json.loads((b / "metrics.json").read_text())["metrics"] != ma["metrics"]


def test_gap_comments_carry_their_key_path(tmp_path):
    from fedrepro.report.gaps import gap_comments

    p = tmp_path / "x.yaml"
    p.write_text("experiments:\n  a:\n    params:\n      m: 3   # GAP: m unstated\n      n: 4\n"
                 "  b:\n    params:\n      # GAP: whole block guessed\n      k: 1  # not a gap\n")
    assert gap_comments(p) == [("experiments.a.params.m", "3", "m unstated"),
                               ("experiments.b.params", "", "whole block guessed")]
