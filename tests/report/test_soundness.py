"""The report judges only what its runs show (issue: verdicts a statistician would sign): a summary its seed runs do
not bear out makes its rows invalid, a run made under other parameters or data makes them stale, and neither is
ever judged; ci-check fails on an affected CI row. Real runs of two cheap paper-scale experiments, then one edit each,
as a user's hand or a damaged disk would make it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from fedrepro.cli import main
from fedrepro.config import REPO_ROOT, load_global
from fedrepro.report import verdict as v
from fedrepro.report.status import evaluate_paper
from fedrepro.staleness import changed_inputs, changed_params

SEEDS = (0, 1)
EXPERIMENTS = ("bernoulli", "fig3b")  # K.bern.uniform (printed, ci), F3b.claim (a paper claim judged by a check)
ROWS = ("K.bern.uniform", "F3b.claim")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """results/ with two paper-scale seeds of each experiment and their summaries, made by the command line."""
    res = tmp_path_factory.mktemp("built") / "results"
    for exp in EXPERIMENTS:
        runs = [res / "adaped" / exp / "paper" / f"seed{s}" for s in SEEDS]
        for s, run in zip(SEEDS, runs):
            assert main(["run", f"adaped.{exp}", "--scale", "paper", "--seed", str(s), "--out", str(run)]) == 0
        summary = res / "adaped" / exp / "paper" / "summary.json"
        assert main(["aggregate", "--runs", *map(str, runs), "--out", str(summary)]) == 0
    return res


@pytest.fixture
def results(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "results"))


def statuses(results: Path, **overrides) -> dict[str, tuple[str, str]]:
    cfg = load_global(overrides={"results_dir": str(results), **overrides})
    return {r.target.id: (r.status, r.reason) for r in evaluate_paper(cfg, "adaped") if r.target.id in ROWS}


def test_untouched_runs_are_judged(results):
    got = statuses(results)
    assert all(status not in (v.INVALID, v.STALE) for status, _ in got.values()), got


def _summary(results: Path, exp: str) -> Path:
    return results / "adaped" / exp / "paper" / "summary.json"


def _edit_json(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def remove_a_seed(results):
    (results / "adaped" / "bernoulli" / "paper" / "seed1" / "metrics.json").unlink()
    return "K.bern.uniform", "seed run", "seed1/metrics.json is missing"


def damage_a_seed(results):
    (results / "adaped" / "bernoulli" / "paper" / "seed1" / "metrics.json").write_text('{"experiment": ')
    return "K.bern.uniform", "seed run is damaged", "seed1/metrics.json"


def edit_a_mean(results):
    _edit_json(_summary(results, "bernoulli"), lambda d: d["metrics"]["gain_pct.uniform"].update(mean=12.0))
    return "K.bern.uniform", "metric 'gain_pct.uniform' has mean 12.0, its seed runs give", "summary.json"


def pass_a_failed_check(results):
    name = "dp_recovers_personalized_at_max_eps0"

    def edit(d):
        d["checks"][name].update(passed=True, n_passed=0)

    _edit_json(_summary(results, "fig3b"), edit)
    return "F3b.claim", f"check {name} says passed=True but 0 of 2 seeds passed", "summary.json"


def pass_a_check_and_its_counts(results):
    name = "dp_recovers_personalized_at_max_eps0"
    _edit_json(_summary(results, "fig3b"), lambda d: d["checks"][name].update(passed=True, n_passed=2))
    return "F3b.claim", f"check '{name}' is", "its seed runs give"


@pytest.mark.parametrize(
    "edit", [remove_a_seed, damage_a_seed, edit_a_mean, pass_a_failed_check, pass_a_check_and_its_counts]
)
def test_a_summary_its_runs_do_not_bear_out_is_invalid(results, edit):
    before = statuses(results)
    row, *words = edit(results)
    status, reason = statuses(results)[row]
    assert status == v.INVALID and all(w in reason for w in words), (before[row], reason)


def test_a_check_edited_to_pass_was_failing(built):
    """The fixture's F3b claim fails in both seeds (the edits above turn a failure into a pass, not a pass into a
    pass)."""
    doc = json.loads(_summary(built, "fig3b").read_text())
    assert doc["checks"]["dp_recovers_personalized_at_max_eps0"]["n_passed"] == 0


def test_a_parameter_changed_after_the_run_makes_its_rows_stale(results, tmp_path):
    """bernoulli n 14 -> 40 in config/adaped.yaml after the run: the rows are stale, naming the parameter."""
    doc = yaml.safe_load((REPO_ROOT / "config" / "adaped.yaml").read_text())
    doc["experiments"]["bernoulli"]["params"]["n"] = 40
    changed = tmp_path / "adaped.yaml"
    changed.write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = load_global()
    papers = {**cfg["papers"], "adaped": str(changed)}
    status, reason = statuses(results, papers=papers)["K.bern.uniform"]
    assert status == v.STALE and "made under other parameters" in reason and "n: 14 -> 40" in reason
    assert statuses(results, papers=papers)["F3b.claim"][0] != v.STALE  # another experiment: untouched

    # the report and ci-check from the command line: the CI row K.bern.uniform is stale, so the check fails
    out = tmp_path / "report"
    sets = ["--config-set", f"results_dir={results}", "--config-set", f"papers.adaped={changed}"]
    assert main(["report", "--out-dir", str(out), *sets]) == 0
    lines = (out / "replication.csv").read_text().splitlines()[1:]
    rows = {r.split(",")[1]: r for r in lines if r.startswith("adaped,")}
    assert ",stale," in rows["K.bern.uniform"]
    assert main(["ci-check", "--report", str(out / "replication.csv"), *sets]) == 1


def test_changed_inputs_and_params_name_what_changed():
    rec = {"datasets": {"mnist": {"a.gz": "1" * 64, "b.gz": "2" * 64}}, "partitions": {"p": "3" * 64, "q": "4" * 64}}
    now = {"datasets": {"mnist": {"a.gz": "1" * 64, "b.gz": "5" * 64}}, "partitions": {"p": "6" * 64}}
    assert changed_inputs(rec, now) == [
        f"dataset mnist file b.gz (the run read sha256 {'2' * 12}…, here {'5' * 12}…)",
        f"partition p (the run read manifest {'3' * 12}…, built here {'6' * 12}…)",
    ]  # q is not built here: not held against the run
    assert changed_inputs(rec, rec) == []
    assert changed_params({"a": 1, "b": {"c": [1, 2]}}, {"a": 1.0, "b": {"c": [1, 3]}, "d": 0}) == [
        "b.c: [1, 2] -> [1, 3]",
        "d: '(absent)' -> 0",
    ]


# a cheap forensic sweep of AdaPeD's Bernoulli experiment: one reading, one row
BERN_SWEEP = {
    "kind": "forensic_sweep",
    "description": "test: K.bern.uniform at n = 20",
    "params": {"experiment": "bernoulli", "rows": ["K.bern.uniform"], "grid": {"n": [20]}, "seeds": [0]},
}


def _bern_sweep(tmp_path: Path, entry: dict) -> tuple[dict, Path, Path, dict]:
    """AdaPeD's config with ``entry`` as experiment forensic_bern, written to tmp_path, and its paper-scale run made
    there: (the config doc, its file, the run directory, the run's metrics)."""
    doc = yaml.safe_load((REPO_ROOT / "config" / "adaped.yaml").read_text())
    doc["experiments"]["forensic_bern"] = entry
    config = tmp_path / "adaped.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = tmp_path / "results" / "adaped" / "forensic_bern" / "paper" / "seed0"
    sets = ["--config-set", f"papers.adaped={config}", "--config-set", f"results_dir={tmp_path / 'results'}"]
    assert main(["run", "adaped.forensic_bern", "--scale", "paper", "--seed", "0", "--out", str(run), *sets]) == 0
    return doc, config, run, json.loads((run / "metrics.json").read_text())


def test_a_sweep_goes_stale_when_what_it_reads_changes(tmp_path):
    """A forensic sweep's parameters name only its readings; the swept experiment's parameters and the printed rows
    it judges are read besides them. Either changed after the sweep ran makes it stale (its digest of them,
    ``reads_digest``), naming what changed; a registry note edited changes nothing it judges."""
    import csv

    from fedrepro.staleness import stale_reasons

    doc, config, run, made = _bern_sweep(tmp_path, BERN_SWEEP)
    assert "reads_digest" in made

    def reasons(papers_doc: dict, targets: Path | None = None) -> list[str]:
        config.write_text(yaml.safe_dump(papers_doc, sort_keys=False))
        over = {"papers": {**load_global()["papers"], "adaped": str(config)}}
        if targets is not None:
            over["targets"] = {**load_global()["targets"], "adaped": str(targets)}
        return stale_reasons(load_global(overrides=over), made, run)

    assert reasons(doc) == []
    doc["experiments"]["bernoulli"]["params"]["n"] = 15  # the swept experiment changed: the sweep's readings did too
    got = reasons(doc)
    assert len(got) == 1 and "reads_digest" in got[0] and "experiment.paper.n: 14 -> 15" in got[0], got
    doc["experiments"]["bernoulli"]["params"]["n"] = 14

    registry = (REPO_ROOT / "config" / "targets" / "adaped.csv").read_text().splitlines(keepends=True)
    header = next(csv.reader(registry[:1]))
    at = next(i for i, line in enumerate(registry) if line.startswith("K.bern.uniform,"))
    row = dict(zip(header, next(csv.reader(registry[at : at + 1]))))

    def registry_with(**edit) -> Path:
        out = tmp_path / f"targets_{'_'.join(edit)}.csv"
        with out.open("w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            for i, line in enumerate(registry):
                w.writerow([{**row, **edit}[h] for h in header] if i == at else next(csv.reader([line])))
        return out

    assert reasons(doc, registry_with(note=row["note"] + " (edited)")) == []
    got = reasons(doc, registry_with(value=str(float(row["value"]) + 1)))
    assert len(got) == 1 and "rows.K.bern.uniform.value" in got[0], got


def test_a_sweeps_paper_issue_reworded_keeps_its_run_current_and_the_report_words_it_anew(tmp_path):
    """A forensic sweep's paper_issue only words what it concludes: reworded after the run, the run stays current
    (it records the old wording, and nothing else changed), and the report gives the conclusion with the config's
    new wording, judged again from the run's history; a changed reading (its grid) makes the run stale."""
    from fedrepro.config import resolve_path
    from fedrepro.report.registry import load_registry
    from fedrepro.report.status import forensic_evidence
    from fedrepro.staleness import stale_reasons

    sweep, params = BERN_SWEEP, BERN_SWEEP["params"]
    old = dict(sweep, params=dict(params, paper_issue={"K.bern.uniform": "OLD words"}))
    doc, config, run, made = _bern_sweep(tmp_path, old)
    assert "OLD words" in made["checks"]["conclusion.K.bern.uniform"]["detail"]
    summary = {
        "checks": made["checks"],
        "effective_scale": "paper",
        "seeds": [0],
        "metrics": {"verdict_rule": {"mean": float(made["metrics"]["verdict_rule"])}},
    }

    def now(**edit) -> tuple[dict, list[str], str]:
        entry = dict(sweep, params=dict(params, **edit))
        config.write_text(yaml.safe_dump({**doc, "experiments": {**doc["experiments"], "forensic_bern": entry}}))
        cfg = load_global(overrides={"papers": {**load_global()["papers"], "adaped": str(config)},
                                     "results_dir": str(tmp_path / "results")})  # fmt: skip
        rows = {t.id: t for t in load_registry(resolve_path(cfg["targets"]["adaped"]), "adaped")}
        paper_doc = yaml.safe_load(config.read_text())
        (text,) = forensic_evidence(cfg, "adaped", paper_doc, lambda n: ("paper", summary), None, rows)[
            "K.bern.uniform"
        ]
        return cfg, stale_reasons(cfg, made, run), text

    _, reasons, text = now(paper_issue={"K.bern.uniform": "OLD words"})
    assert reasons == [] and "paper issue: OLD words" in text
    _, reasons, text = now(paper_issue={"K.bern.uniform": "NEW words"})
    assert reasons == [] and "paper issue: NEW words" in text and "OLD" not in text and "judged again" not in text
    _, reasons, _ = now(paper_issue={"K.bern.uniform": "NEW words"}, grid={"n": [15]})
    assert len(reasons) == 1 and "grid.n: [20] -> [15]" in reasons[0], reasons


def test_a_change_to_what_its_kind_computes_makes_a_run_stale(built, results, monkeypatch):
    """A run records its kind's revision (Kind.revision: 1 + the changes its ``revisions`` lists). A change listed
    after the run makes it stale, naming the change, in the report as in fedrepro.staleness; a run made before the
    record is the kind's first revision; the summary keeps its oldest run's revision."""
    import dataclasses

    from fedrepro.experiments import KINDS, get_kind
    from fedrepro.staleness import stale_reasons

    run = built / "adaped" / "bernoulli" / "paper" / "seed0"
    made = json.loads((run / "metrics.json").read_text())
    kind = get_kind("bernoulli_synthetic")
    assert made["kind_revision"] == kind.revision == 1
    assert json.loads(_summary(built, "bernoulli").read_text())["kind_revision"] == 1
    assert stale_reasons(load_global(), made, run) == []
    before = {k: v for k, v in made.items() if k != "kind_revision"}
    assert stale_reasons(load_global(), before, run) == []

    changed = dataclasses.replace(kind, revisions=("the estimator's clipping fixed (test)",))
    monkeypatch.setitem(KINDS._entries, "bernoulli_synthetic", changed)
    for doc in (made, before):
        (reason,) = stale_reasons(load_global(), doc, run)
        assert reason == (
            "made by revision 1 of what kind bernoulli_synthetic computes, which is at revision 2 now: "
            "the estimator's clipping fixed (test)"
        )
    status, reason = statuses(results)["K.bern.uniform"]
    assert status == v.STALE and "revision 1 of what kind bernoulli_synthetic computes" in reason
    assert statuses(results)["F3b.claim"][0] != v.STALE  # another kind: untouched
    assert stale_reasons(load_global(), dict(made, kind_revision=2), run) == []
