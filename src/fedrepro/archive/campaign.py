"""The paper-scale campaign: train the paper seeds the results archive lacks, and archive each one the moment it ends.

``python -m fedrepro campaign [PAPER.EXP ...] [--jobs N] [--commit] [--dry-run]`` queues, per experiment (the ones
named, else every experiment ``plan --remaining`` lists whose data is here, in the plan's order), the paper seeds the
archive does not hold sound and current (fedrepro.archive.ops.lacking_seeds); it runs up to N of them at a time, each
as ``python -m fedrepro run EXP --scale paper --seed S --out results/<paper>/<exp>/paper/seed<S>`` with one torch
thread (``--threads``) and ``OMP_WAIT_POLICY=PASSIVE``, its output in ``logs/run/...``; and archives a run as soon as
it ends (``archive add``), and with ``--commit`` commits that entry alone (replacing a stale archived run of that
seed). A run already finished in results/ and archivable is archived without training. A machine's results do not
outlive it: a seed archived and committed does.

A run killed halfway continues from its round checkpoints when the campaign is started again. A kind that reads
another experiment's runs (a forensic sweep of kept models) waits until that experiment's queued seeds are archived,
and its read runs are restored from the archive first where results/ lacks them. The data the runs read is fetched
and their partitions built first, as the workflow's data stage does. The checkout must be clean before
anything starts: a run records the code it started from, and one made from uncommitted code cannot be archived.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fedrepro import paths
from fedrepro.archive import ops, store
from fedrepro.config import REPO_ROOT, load_paper, resolve_experiment
from fedrepro.errors import ConfigError
from fedrepro.experiments import get_kind
from fedrepro.provenance import code_version
from fedrepro.runio import METRICS


@dataclass(eq=False)  # a job is itself (a key of the running ones), not its fields
class Job:
    exp_id: str
    seed: int
    run_dir: Path
    log: Path
    after: set[str] = field(default_factory=set)  # experiments whose queued seeds must be archived first

    @property
    def name(self) -> str:
        return f"{self.exp_id} seed {self.seed}"


def queue(cfg: Mapping, experiments: list[str] | None = None, seeds: list[int] | None = None) -> list[Job]:
    """The seeds to train, in order: for the named experiments (PAPER.EXP) or else every campaign experiment whose
    data is here in ``plan --remaining``'s order, the paper seeds the archive lacks; an unknown or unavailable
    experiment named is a ConfigError. ``seeds``: these seeds of the named experiments instead of the config's paper
    seeds (the ones a raise of ``seeds:`` will ask for, archived before the config asks for them, so that the default
    run never trains an experiment whose archive is incomplete)."""
    from fedrepro.data.sources import is_available
    from fedrepro.plan import campaign_order, rows

    if seeds is not None and not experiments:
        raise ConfigError("campaign: --seeds needs the experiments named (PAPER.EXP ...)")
    if experiments:
        for exp_id in experiments:
            exp = _resolved(cfg, exp_id)
            missing = [d for d in exp.datasets if not is_available(cfg, d)]
            if missing:
                raise ConfigError(f"campaign: {exp_id} needs {', '.join(missing)}, not here: fetch it first")
        order = list(dict.fromkeys(experiments))
        if seeds is not None:
            one = [e for e in order if _resolved(cfg, e).deterministic]
            if one:
                raise ConfigError(f"campaign: --seeds: {one[0]} is deterministic: its one paper seed is the config's")
        lacking = ops.lacking_seeds(cfg, order, list(dict.fromkeys(seeds)) if seeds is not None else None)
    else:
        lacking = ops.lacking_seeds(cfg)
        order = [r.exp_id for r in campaign_order(rows(cfg)) if r.offline and lacking.get(r.exp_id)]
    jobs = []
    for exp_id in order:
        paper, name = exp_id.split(".", 1)
        exp = _resolved(cfg, exp_id)
        read = get_kind(exp.kind).reads_runs
        reads = read(exp.params) if read is not None else None
        after = {f"{paper}.{reads}"} if reads else set()
        for seed in lacking.get(exp_id, []):
            jobs.append(
                Job(
                    exp_id,
                    seed,
                    paths.run_dir(cfg, paper, name, store.SCALE, seed),
                    paths.path(cfg, "run_log", paper=paper, exp=name, scale=store.SCALE, seed=seed),
                    after,
                )
            )
    return jobs


def _resolved(cfg: Mapping, exp_id: str):
    paper, _, name = exp_id.partition(".")
    if not name or paper not in cfg["papers"] or name not in load_paper(cfg, paper)["experiments"]:
        raise ConfigError(f"campaign: {exp_id!r} is no experiment: name one as PAPER.EXP (`python -m fedrepro list`)")
    return resolve_experiment(cfg, exp_id, store.SCALE)


def prepare_data(cfg: Mapping, jobs: list[Job], out=print) -> None:
    """Fetch the datasets and build the partitions the queued experiments read, where the workflow would put them,
    once each and before any run starts (two runs started at once would otherwise race to build one partition, and a
    run does not build its own: `fedrepro run` stops naming the command)."""
    from fedrepro.run_inputs import prepare_inputs

    for exp_id in dict.fromkeys(j.exp_id for j in jobs):
        for line in prepare_inputs(cfg, _resolved(cfg, exp_id)):
            out(f"[campaign] {exp_id}: {line}")


def plan_text(jobs: list[Job]) -> str:
    if not jobs:
        return "campaign: the archive holds every paper seed asked for: nothing to run\n"
    lines = [f"campaign: {len(jobs)} paper-scale runs to make and archive, in this order:"]
    queued = {j.exp_id for j in jobs}
    for j in jobs:
        reads = ", ".join(sorted(j.after))
        wait = f" (reads {reads}'s runs{': after its seeds here' if j.after & queued else ''})" if j.after else ""
        resume = " (resumes from its checkpoints)" if (j.run_dir / ".checkpoints").is_dir() else ""
        lines.append(f"  {j.name} -> {_shown(j.run_dir)}{resume}{wait}")
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """The path relative to the working directory where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def require_clean_checkout() -> str:
    """The code version runs will record; a checkout with uncommitted changes is a ConfigError (its runs could not
    be archived)."""
    version = code_version()
    if version.endswith("-dirty"):
        raise ConfigError(
            f"campaign: the checkout has uncommitted changes ({version}): a run made from them cannot be archived; "
            "commit or stash them first (`git status`)"
        )
    return version


def spawn(job: Job, threads: int, cfg_args: list[str]) -> subprocess.Popen:
    """``python -m fedrepro run`` for the job, its output appended to the job's log."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FEDREPRO_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-m", "fedrepro", "run", job.exp_id, "--scale", store.SCALE, "--seed", str(job.seed)]
    with open(job.log, "ab") as log:
        return subprocess.Popen(
            [*cmd, "--out", str(job.run_dir), *cfg_args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
        )


def restore_read_runs(cfg: Mapping, job: Job, out=print) -> None:
    """The runs the job's kind reads, restored from the archive where results/ lacks them."""
    for exp_id in job.after:
        paper, name = exp_id.split(".", 1)
        for seed in ops.wanted_seeds(cfg, exp_id):
            run = paths.run_dir(cfg, paper, name, store.SCALE, seed)
            if not (run / METRICS).is_file():
                store.restore(cfg, exp_id, seed, run)
                out(f"[campaign] restored {exp_id} seed {seed} -> {run} (read by {job.exp_id})")


def commit_message(job: Job, made: Mapping, trained: bool) -> str:
    """The commit message of an archived run: its code version and wall time, and who made it (the campaign, or a
    run found finished in results/, made by the command its manifest records)."""
    by = "by `python -m fedrepro campaign`" if trained else "found finished, archived by `python -m fedrepro campaign`"
    minutes = made["wall_time_s"] / 60
    return f"archive {job.exp_id} seed {job.seed} (made at {made['code_version']}, {minutes:.0f} min, {by})"


def archive(cfg: Mapping, job: Job, commit: bool, out=print, trained: bool = True) -> Path:
    """``archive add`` of the finished run; with ``commit``, a commit of that entry alone, replacing a stale archived
    run of its seed (its files stay in git's history; without ``commit`` a stale entry stays and the run is not
    archived: replacing tracked files uncommitted would make every later run's code version dirty); ``trained``:
    whether the campaign made the run (else it found it finished). Returns the entry's directory."""
    target = store.entry_dir(cfg, job.exp_id, job.seed)
    replaced = ""
    if (target / store.MANIFEST).exists():
        why = store.stale(cfg, store.Entry(target, store.read_manifest(target)))
        if why and not commit:
            raise ConfigError(
                f"an archived run of this seed in {target} is stale ({why[0][:160]}): run the campaign with --commit, "
                f"or `git rm -r {target}` and `python -m fedrepro archive add {job.run_dir}`"
            )
        if why:
            shutil.rmtree(target)
            replaced = f", replacing the stale entry ({why[0][:160]})"
    entry, new = store.add(cfg, job.run_dir)
    made = entry.manifest["made"]
    out(
        f"[campaign] archived {job.name} -> {entry.dir}{replaced}"
        if new
        else f"[campaign] already archived: {job.name}"
    )
    for row in ops.failing_ci_checks(cfg, entry):
        out(f"[campaign] warning: a CI row fails in this run (the CI replication check will): {row}")
    if commit and new:
        message = commit_message(job, made, trained)
        _git(["add", "-A", "--", str(entry.dir)])
        _git(["commit", "-q", "-m", message, "--", str(entry.dir)])
        out(f"[campaign] committed: {message}")
    return entry.dir


def _git(args: list[str]) -> None:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(f"campaign: `git {' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")


def finished_here(cfg: Mapping, job: Job) -> bool:
    """Whether results/ holds the job's run finished and archivable as it is (complete, paper scale, from committed
    code, current): then it is archived, not trained again."""
    if (job.run_dir / store.ARCHIVED).exists():  # a run the workflow restored: the archive's own
        return False
    try:
        store.check_addable(cfg, job.run_dir)
    except Exception:  # noqa: BLE001 - any reason it may not be archived: it is trained
        return False
    return True


class _Finished:
    """A job found finished: it ends at once."""

    def poll(self) -> int:
        return 0

    def terminate(self) -> None:
        pass

    def wait(self) -> int:
        return 0


def run(
    cfg: Mapping,
    jobs: list[Job],
    slots: int,
    commit: bool,
    start: Callable[[Job], object],
    poll_s: float = 10.0,
    out=print,
) -> int:
    """Run the jobs, at most ``slots`` at once, in queue order as their reads allow, archiving each as it ends;
    ``start(job)`` launches one and returns an object with ``poll()`` (a return code, or None while it runs). Returns
    the number of jobs that failed (their logs named; the others go on)."""
    pending, running, failed = list(jobs), {}, []
    try:
        _loop(cfg, pending, running, failed, slots, commit, start, poll_s, out)
    finally:  # interrupted: each run stops as a killed one does, keeping its checkpoints for the next campaign
        for proc, _ in running.values():
            proc.terminate()
        for proc, _ in running.values():
            proc.wait()
    return len(failed)


def _loop(cfg, pending: list[Job], running: dict, failed: list[Job], slots, commit, start, poll_s, out) -> None:
    def waiting_on(job: Job) -> bool:
        busy = {j.exp_id for j in pending if j is not job} | {j.exp_id for j in running}
        return bool(job.after & busy) or bool(job.after & {j.exp_id for j in failed})

    while pending or running:
        for job in [j for j in pending if not waiting_on(j)][: max(0, slots - len(running))]:
            pending.remove(job)
            try:
                restore_read_runs(cfg, job, out)
            except Exception as exc:  # noqa: BLE001 - what it reads is not to be had: reported, the others go on
                failed.append(job)
                out(f"[campaign] NOT STARTED {job.name}: the runs it reads: {exc}")
                continue
            if finished_here(cfg, job):  # made before (a campaign stopped after the run, or a run by hand)
                out(f"[campaign] found {job.name} finished in {_shown(job.run_dir)}: archived without training")
                running[job] = (_Finished(), time.monotonic())
                continue
            out(f"[campaign] started {job.name} (log: {_shown(job.log)})")
            running[job] = (start(job), time.monotonic())
        blocked = [j for j in pending if j.after & {f.exp_id for f in failed}]
        for job in blocked:
            pending.remove(job)
            failed.append(job)
            out(f"[campaign] skipped {job.name}: a run it reads failed")
        for job, (proc, began) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del running[job]
            if rc != 0:
                failed.append(job)
                out(f"[campaign] FAILED {job.name} (exit {rc}): see {_shown(job.log)}")
                continue
            out(f"[campaign] finished {job.name} in {(time.monotonic() - began) / 60:.1f} min")
            try:
                archive(cfg, job, commit, out, trained=not isinstance(proc, _Finished))
            except Exception as exc:  # noqa: BLE001 - a run that cannot be archived is reported, the others go on
                failed.append(job)
                out(f"[campaign] NOT ARCHIVED {job.name}: {exc}")
        if running or pending:
            time.sleep(poll_s)
