"""The archive's commands: list, verify (and replay), compare; and which experiments the workflow restores."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from fedrepro import paths
from fedrepro.aggregate import flatten, summarize
from fedrepro.archive.store import SCALE, Entry, damaged, entries, misplaced, settings, stale
from fedrepro.config import load_paper, paper_seeds, resolve_experiment, run_scale
from fedrepro.data.sources import is_available
from fedrepro.errors import ResultError
from fedrepro.plan import cost, load_compute
from fedrepro.provenance import machine_text
from fedrepro.runio import METRICS, read_archived, read_metrics


def by_experiment(items: list[Entry]) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for e in items:
        out.setdefault(e.experiment, []).append(e)
    return out


def wanted_seeds(cfg: Mapping, exp_id: str) -> list[int]:
    """The paper-scale seeds the workflow runs for ``exp_id`` (one for a deterministic kind)."""
    paper, name = exp_id.split(".", 1)
    entry = load_paper(cfg, paper)["experiments"][name]
    seeds = list(paper_seeds(cfg, entry, SCALE))
    return seeds[:1] if resolve_experiment(cfg, exp_id, SCALE).deterministic else seeds


def restorable(cfg: Mapping) -> dict[str, list[int]]:
    """Experiments the workflow takes from the archive (``archive.use``): those whose every paper-scale seed is
    archived, sound and current; experiment id -> its seeds. An experiment with some seeds missing, damaged or
    stale is trained as configured instead (``archive list`` says what it lacks)."""
    if not settings(cfg)["use"]:
        return {}
    out = {}
    for exp_id, items in by_experiment(entries(cfg)).items():
        paper = exp_id.split(".", 1)[0]
        if paper not in cfg["papers"] or exp_id.split(".", 1)[1] not in load_paper(cfg, paper)["experiments"]:
            continue
        good = {e.seed for e in items if not damaged(e) and not misplaced(cfg, e) and not stale(cfg, e)}
        seeds = wanted_seeds(cfg, exp_id)
        if set(seeds) <= good:
            out[exp_id] = seeds
    return out


def restore_constraints(archived: Mapping[str, object]) -> dict[str, str]:
    """Rule restore_archived's wildcard constraints for the ``archived`` experiments ("paper.name" ids): ``exp`` one
    of their names, and ``paper`` one of their papers only where the name after it is one of that paper's, so a name
    archived under one paper does not match the same name under another (ppsgd.forensic_fig1a archived, not
    adaped.forensic_fig1a). A constraint sees only its own wildcard: the lookahead reads the ``/{exp}/`` that
    follows ``{paper}`` in the run paths (fedrepro.paths' run_file)."""
    import re

    names: dict[str, set[str]] = {}
    for exp_id in archived:
        paper, name = exp_id.split(".", 1)
        names.setdefault(paper, set()).add(re.escape(name))
    if not names:
        return {"paper": "(?!)", "exp": "(?!)"}
    papers = "|".join(f"{re.escape(p)}(?=/(?:{'|'.join(sorted(n))})/)" for p, n in sorted(names.items()))
    return {"paper": papers, "exp": "|".join(sorted(set().union(*names.values())))}


def campaign_experiments(cfg: Mapping, items: dict[str, list[Entry]] | None = None) -> list[str]:
    """The experiments the paper-scale campaign is about: those the default run builds only at quick scale (their
    paper-scale run is expensive) whose data is here, and any with archived seeds."""
    ids = set(items if items is not None else by_experiment(entries(cfg)))
    for paper in cfg["papers"]:
        for name, entry in load_paper(cfg, paper)["experiments"].items():
            exp = resolve_experiment(cfg, f"{paper}.{name}", SCALE)
            if run_scale(entry, "default") == "quick" and all(is_available(cfg, d) for d in exp.datasets):
                ids.add(exp.id)
    return sorted(ids)


def lacking_seeds(
    cfg: Mapping, exp_ids: list[str] | None = None, seeds: list[int] | None = None
) -> dict[str, list[int]]:
    """Per campaign experiment (:func:`campaign_experiments`), or per experiment of ``exp_ids``, the paper seeds (or
    of ``seeds``) the archive does not hold sound and current."""
    items = by_experiment(entries(cfg))
    out = {}
    for exp_id in campaign_experiments(cfg, items) if exp_ids is None else exp_ids:
        good = {e.seed for e in items.get(exp_id, []) if not damaged(e) and not misplaced(cfg, e) and not stale(cfg, e)}
        out[exp_id] = [s for s in (wanted_seeds(cfg, exp_id) if seeds is None else seeds) if s not in good]
    return out


def _made(e: Entry) -> str:
    made = e.manifest["made"]
    wall = made.get("wall_time_s") or 0.0
    earlier = dict.fromkeys(a.get("code_version", "?") for a in made.get("earlier_attempts") or [])
    return (
        f"made {str(made.get('started_at', '?'))[:10]} on {machine_text(made.get('machine') or {})}, "
        f"{wall / 60:.0f} min, {made.get('code_version', '?')}"
        + (f" (resumed from checkpoints of {', '.join(earlier)})" if earlier else "")
    )


def list_text(cfg: Mapping) -> str:
    """Per experiment: its paper-scale seeds, those archived (current / stale and why / damaged), and what is still
    missing with its CPU-h (config/compute.yaml); experiments the default run builds only at quick scale and whose
    data is here are listed even with nothing archived."""
    items = by_experiment(entries(cfg))
    compute = load_compute(cfg)
    lines, lacking_h = [], 0.0
    for exp_id in campaign_experiments(cfg, items):
        try:
            seeds = wanted_seeds(cfg, exp_id)
        except Exception as exc:  # noqa: BLE001 - an experiment gone from the config: say so, list the rest
            lines.append(f"{exp_id}: archived seeds {[e.seed for e in items.get(exp_id, [])]}, but {exc}")
            continue
        states = []
        sound = set()
        for e in items.get(exp_id, []):
            bad = damaged(e) or ([m] if (m := misplaced(cfg, e)) else [])
            why = stale(cfg, e) if not bad else []
            if bad:
                states.append(f"  seed {e.seed}: DAMAGED: {bad[0]}")
            elif why:
                states.append(f"  seed {e.seed}: stale: {'; '.join(why)}")
            else:
                sound.add(e.seed)
                extra = "" if e.seed in seeds else " (not among the config's paper seeds: unused until they are)"
                states.append(f"  seed {e.seed}: current{extra}; {_made(e)}")
        missing = [s for s in seeds if s not in sound]
        c = cost(compute, exp_id) if compute else None
        need = f"{c.cpu_s * len(missing) / 3600:.2f} CPU-h" if c is not None else "cost unknown"
        if c is not None:
            lacking_h += c.cpu_s * len(missing) / 3600
        head = f"{exp_id}: paper seeds {seeds}; " + (
            "complete: the default run restores it" if not missing else f"lacks seeds {missing} ({need})"
        )
        lines += [head, *states]
    lines.append(f"still to run at paper scale for the experiments listed: {lacking_h:.1f} CPU-h (config/compute.yaml)")
    return "\n".join(lines) + "\n"


def failing_ci_checks(cfg: Mapping, entry: Entry) -> list[str]:
    """The registry rows flagged ``ci=true`` that the archived run's own checks fail, in words: once the experiment's
    seeds are complete the default run restores them and the CI replication check fails on these rows."""
    from fedrepro.report.cicheck import flagged_targets

    checks = read_metrics(entry.dir).get("checks") or {}
    out = []
    for paper, t in flagged_targets(cfg, [entry.paper]):
        if t.experiment != entry.experiment or t.check_names is None:
            continue
        failed = [c for c in t.check_names if c in checks and not checks[c]["passed"]]
        out += [f"{paper}.{t.id}: check {c} fails in seed {entry.seed}: {checks[c]['detail']}" for c in failed]
    return out


def verify(cfg: Mapping, replay_rounds: int | None = None, out=print) -> int:
    """Check the archive; returns the number of failures (0: sound). Stale runs are reported, not failures: they are
    never restored or judged, and the report names them."""
    from fedrepro.archive.replay import replay, replayable

    items = entries(cfg)
    failures = 0
    budget = settings(cfg)["budget_mb"]

    def fail(text: str) -> None:
        nonlocal failures
        failures += 1
        out(f"FAIL {text}")

    for e in items:
        for problem in damaged(e):
            fail(problem)
        if (m := misplaced(cfg, e)) is not None:
            fail(m)
        if e.bytes() > budget["run"] * 2**20:
            fail(f"{e.dir}: {e.bytes() / 2**20:.1f} MB, over the per-run budget of {budget['run']} MB")
    total = sum(e.bytes() for e in items)
    if total > budget["total"] * 2**20:
        fail(f"the archive holds {total / 2**20:.1f} MB, over its budget of {budget['total']} MB")
    groups = by_experiment(items)
    for exp_id, group in groups.items():
        if any(damaged(e) for e in group):
            continue
        try:
            summarize([read_metrics(e.dir) for e in group], [str(e.dir / METRICS) for e in group])
        except ResultError as exc:
            fail(f"{exp_id}: its archived seeds do not make one summary: {exc}")
        for e in group:
            why = stale(cfg, e)
            out(f"{'stale' if why else 'ok  '} {exp_id} seed {e.seed}" + (f": {'; '.join(why)}" if why else ""))
    if replay_rounds:
        for exp_id, group in groups.items():
            pick = next((e for e in group if not damaged(e) and not stale(cfg, e) and replayable(e)), None)
            if pick is None:
                out(f"skip {exp_id}: no current archived seed with a per-round trace to replay")
                continue
            absent = [d for d in resolve_experiment(cfg, exp_id, SCALE).datasets if not is_available(cfg, d)]
            if absent:  # e.g. the LEAF sample in a clone without ../shared: its hashes were checked above
                out(
                    f"skip {exp_id}: its data is not here to replay from ({', '.join(absent)}; "
                    f"`python -m fedrepro data fetch {absent[0]}`)"
                )
                continue
            start = time.monotonic()
            result = replay(cfg, pick, replay_rounds)
            for problem in result.problems:
                fail(problem)
            if not result.problems:
                out(
                    f"ok   {exp_id} seed {pick.seed}: the first {replay_rounds} rounds of {result.compared} engine "
                    f"runs replay (relative difference: largest {result.max_relative_difference:.1e}, median "
                    f"{result.median_relative_difference:.1e}; {time.monotonic() - start:.0f} s)"
                    + (f"; {result.other_cpu}: judged by the median only" if result.other_cpu else "")
                )
    out(
        f"archive: {len(items)} runs of {len(groups)} experiments, {total / 2**20:.1f} MB of {budget['total']} MB; "
        f"{failures} failure(s)"
    )
    return failures


def compare_text(cfg: Mapping, rtol: float = 1e-6) -> str:
    """Archived vs rebuilt: for every archived seed with a run of the same experiment and seed made here (in
    results/, not itself restored from the archive), each metric's two values; the metrics that differ by more than
    ``rtol`` are listed, largest first."""
    lines = []
    for e in entries(cfg):
        run = paths.run_dir(cfg, e.paper, e.name, SCALE, e.seed)
        if not (run / METRICS).is_file() or read_archived(run) is not None:
            lines.append(f"{e.experiment} seed {e.seed}: no rebuilt run at {run} (only a restored one, or none)")
            continue
        mine, theirs = flatten(read_metrics(e.dir)["metrics"]), flatten(read_metrics(run)["metrics"])
        numbers = [
            (k, float(mine[k]), float(theirs[k]))
            for k in sorted(set(mine) & set(theirs))
            if isinstance(mine[k], (int, float)) and isinstance(theirs[k], (int, float))
        ]
        differ = [(k, a, b) for k, a, b in numbers if not math.isclose(a, b, rel_tol=rtol, abs_tol=rtol) and a == a]
        only = sorted(set(mine) ^ set(theirs))
        lines.append(
            f"{e.experiment} seed {e.seed}: {len(numbers) - len(differ)} of {len(numbers)} metrics equal within "
            f"{rtol:g}, {len(differ)} differ" + (f"; only on one side: {', '.join(only[:5])}" if only else "")
        )
        for k, a, b in sorted(differ, key=lambda x: -abs(x[1] - x[2]))[:10]:
            lines.append(f"  {k}: archived {a:.6g}, rebuilt {b:.6g} ({b - a:+.3g})")
    return "\n".join(lines or ["the archive is empty"]) + "\n"
