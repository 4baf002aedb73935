"""A run's independent pieces in spawned processes (fedrepro.processes): the job's threads divided among them,
results in the tasks' order, each task's progress lines labelled, a worker's error raised in the run."""

import pytest

from fedrepro import processes, progress


def test_the_workers_share_the_jobs_threads_and_return_in_order(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "4")
    assert processes.workers_for(3) == 3 and processes.workers_for(9) == 4
    assert processes.map_in_processes(processes.job_threads, [(), (), ()], 2) == [2, 2, 2]
    monkeypatch.setenv("FEDREPRO_THREADS", "1")
    assert processes.workers_for(5) == 1


def test_each_tasks_progress_lines_say_which_task_it_is(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    assert processes.map_in_processes(progress.prefix, [(), ()], 2, ["seed 0", "seed 1"]) == ["seed 0: ", "seed 1: "]
    assert processes.map_in_processes(progress.prefix, [()], 2) == [""]
    assert progress.prefix() == ""  # this process's lines are not relabelled


def test_a_workers_error_is_the_runs(monkeypatch):
    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    with pytest.raises(ValueError, match="invalid literal"):
        processes.map_in_processes(int, [("1",), ("x",)], 2)


def test_a_worker_counts_the_files_the_run_had_imported_as_its_own(monkeypatch):
    from fedrepro import provenance

    monkeypatch.setenv("FEDREPRO_THREADS", "2")
    monkeypatch.setitem(provenance._LOADED, "imported_by_the_run_only.py", "0" * 16)
    made = processes.map_in_processes(provenance.loaded_code, [(), ()], 2)
    assert all(m["imported_by_the_run_only.py"] == "0" * 16 and "processes.py" in m for m in made)


def test_the_command_line_lets_idle_threads_sleep_unless_the_environment_names_a_policy(monkeypatch, capsys):
    import os

    from fedrepro import cli

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert cli.main(["list"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.main(["list"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
