"""The paper-scale campaign (fedrepro.archive.campaign): it queues the seeds the archive lacks, archives each run as
it ends, reports a failed one and skips what reads it, and refuses to start from uncommitted code."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
from tiny_fedhdp import EXP, archived, cfg_of, settings, write_paper

from fedrepro.archive import campaign
from fedrepro.cli import main
from fedrepro.errors import ConfigError


def in_process(sets, rc=None):
    """A ``start`` that makes the run at once with `fedrepro run` (as from a committed code version), or fails with
    ``rc``."""

    def start(job):
        if rc is not None:
            return SimpleNamespace(poll=lambda: rc)
        mp = pytest.MonkeyPatch()
        mp.setattr("fedrepro.runio.code_version", lambda: "0123abc")
        try:
            argv = ["run", job.exp_id, "--scale", "paper", "--seed", str(job.seed), "--out", str(job.run_dir), *sets]
            code = main(argv)
        finally:
            mp.undo()
        return SimpleNamespace(poll=lambda: code)

    return start


def test_the_campaign_queues_the_lacking_seeds_and_archives_each_as_it_ends(world):
    base, sets = world
    for seed in (0, 1):  # the campaign makes them itself
        shutil.rmtree(base / "results" / "fedhdp" / "tiny" / "paper" / f"seed{seed}")
    cfg = cfg_of(sets)
    jobs = campaign.queue(cfg, [EXP])
    assert [(j.exp_id, j.seed) for j in jobs] == [(EXP, 0), (EXP, 1)]
    assert "campaign: 2 paper-scale runs to make and archive" in campaign.plan_text(jobs)
    said = []
    assert campaign.run(cfg, jobs, 2, False, in_process(sets), poll_s=0, out=said.append) == 0
    assert all((archived(base, s) / "manifest.json").is_file() for s in (0, 1))
    assert sum(line.startswith("[campaign] archived fedhdp.tiny seed") for line in said) == 2
    assert campaign.queue(cfg, [EXP]) == [] and "nothing to run" in campaign.plan_text([])
    shutil.rmtree(base / "archive" / "fedhdp" / "tiny" / "paper" / "seed1")  # only what the archive lacks is queued
    assert [(j.exp_id, j.seed) for j in campaign.queue(cfg, [EXP])] == [(EXP, 1)]


def test_the_campaign_builds_the_partitions_its_runs_read_before_any_starts(world):
    """A fresh machine: the partition is not built, and `fedrepro run` does not build one (it names the command)."""
    base, sets = world
    shutil.rmtree(base / "results" / "fedhdp" / "tiny" / "paper")
    shutil.rmtree(base / "results" / "data" / "mnist_fedhdp_noniid")
    cfg = cfg_of(sets)
    jobs = campaign.queue(cfg, [EXP])
    said = []
    campaign.prepare_data(cfg, jobs, out=said.append)
    assert [line for line in said if "built partition mnist_fedhdp_noniid" in line] == [said[-1]]  # once, not per seed
    assert (base / "results" / "data" / "mnist_fedhdp_noniid" / "manifest.json").is_file()
    campaign.prepare_data(cfg, jobs, out=said.append)  # built: nothing more to do
    assert len([line for line in said if "built partition" in line]) == 1
    assert campaign.run(cfg, jobs[:1], 1, False, in_process(sets), poll_s=0, out=said.append) == 0


def test_a_run_already_finished_in_results_is_archived_without_training(world):
    """The world's two seeds were made by `fedrepro run` before the campaign: archivable as they are, they are
    archived, not trained again (the first test trains the seeds results/ lacks)."""
    base, sets = world
    cfg = cfg_of(sets)
    started, said = [], []

    def start(job):
        started.append(job.seed)
        return in_process(sets)(job)

    assert campaign.run(cfg, campaign.queue(cfg, [EXP]), 1, False, start, poll_s=0, out=said.append) == 0
    assert started == [] and sum("archived without training" in line for line in said) == 2
    assert all((archived(base, s) / "manifest.json").is_file() for s in (0, 1))


def test_the_commit_message_says_whether_the_campaign_made_the_run():
    job = campaign.Job(EXP, 3, None, None, set())
    made = {"code_version": "0123abc", "wall_time_s": 8316.0}
    trained = campaign.commit_message(job, made, trained=True)
    found = campaign.commit_message(job, made, trained=False)
    assert trained == f"archive {EXP} seed 3 (made at 0123abc, 139 min, by `python -m fedrepro campaign`)"
    assert (
        found
        == f"archive {EXP} seed 3 (made at 0123abc, 139 min, found finished, archived by `python -m fedrepro campaign`)"
    )


def test_a_failed_run_is_reported_and_what_reads_it_is_skipped(world):
    base, sets = world
    shutil.rmtree(base / "results" / "fedhdp" / "tiny" / "paper")  # nothing finished: the runs are started
    cfg = cfg_of(sets)
    jobs = campaign.queue(cfg, [EXP])
    reader = campaign.Job("fedhdp.reader", 0, base / "r", base / "r.log", {EXP})
    said = []
    assert campaign.run(cfg, [*jobs, reader], 1, False, in_process(sets, rc=3), poll_s=0, out=said.append) == 3
    assert any(line.startswith("[campaign] FAILED fedhdp.tiny seed 0 (exit 3)") for line in said)
    assert "[campaign] skipped fedhdp.reader seed 0: a run it reads failed" in said
    assert not archived(base, 0).exists()


def test_a_stale_archived_seed_is_replaced_only_when_committing(world):
    """Without --commit the finished run is not archived over a stale entry (replacing tracked files uncommitted
    would make every later run's code version dirty): the message says what to do."""
    base, sets = world
    assert main(["archive", "add", str(base / "results" / "fedhdp" / "tiny" / "paper" / "seed0"), *sets]) == 0
    changed = settings(base, write_paper(base / "fedhdp.yaml", lr=0.2))
    cfg = cfg_of(changed)
    jobs = campaign.queue(cfg, [EXP])
    assert [j.seed for j in jobs] == [0, 1]  # seed 0's entry is stale, seed 1 was never archived
    said = []
    assert campaign.run(cfg, jobs[:1], 1, False, in_process(changed), poll_s=0, out=said.append) == 1
    (line,) = [s for s in said if s.startswith("[campaign] NOT ARCHIVED")]
    assert "is stale" in line and "--commit" in line


def test_the_campaign_refuses_uncommitted_code_and_unknown_experiments(world, monkeypatch):
    _, sets = world
    monkeypatch.setattr("fedrepro.archive.campaign.code_version", lambda: "0123abc-dirty")
    with pytest.raises(ConfigError, match="uncommitted changes .*commit or stash them first"):
        campaign.require_clean_checkout()
    with pytest.raises(ConfigError, match="'fedhdp.nope' is no experiment"):
        campaign.queue(cfg_of(sets), ["fedhdp.nope"])


def test_seeds_beyond_the_configs_are_archived_before_the_config_asks_for_them(world):
    """`campaign EXP --seeds 2`: a seed the config does not list yet is made and archived; the default run keeps
    restoring the config's seeds, and `archive list` says the extra one waits for a raise of ``seeds:``."""
    from fedrepro.archive import ops

    base, sets = world
    cfg = cfg_of(sets)
    assert (
        main(
            [
                "archive",
                "add",
                *(str(base / "results" / "fedhdp" / "tiny" / "paper" / f"seed{s}") for s in (0, 1)),
                *sets,
            ]
        )
        == 0
    )
    assert campaign.queue(cfg, [EXP]) == []
    jobs = campaign.queue(cfg, [EXP], [2, 1, 2])  # seed 1 is archived; seed 2 is asked twice
    assert [(j.exp_id, j.seed) for j in jobs] == [(EXP, 2)]
    assert campaign.run(cfg, jobs, 1, False, in_process(sets), poll_s=0, out=[].append) == 0
    assert (archived(base, 2) / "manifest.json").is_file()
    assert ops.restorable(cfg)[EXP] == [0, 1]
    listed = ops.list_text(cfg)
    assert "seed 2: current (not among the config's paper seeds" in listed
    assert "seed 1: current; made" in listed
    with pytest.raises(ConfigError, match="--seeds needs the experiments named"):
        campaign.queue(cfg, None, [2])
